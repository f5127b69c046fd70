//go:build reliability && linux

package reliability

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestListingMemory: concurrent v1 and legacy listings of a directory of
// many long names (207 bytes, the case). The daemon's peak RSS must
// not grow with the directory: within idle + 8 MiB per listing + 16 MiB
// (a listing streams, holding at most fsroot.ListPassBytes of names), and
// every answer is whole: each name once, the v1 one sorted. Main before
// issue 20 built each listing whole: one v1 GET of 150k entries took RSS
// 14 → 236 MB, six of 100k 931 MB.
func TestListingMemory(t *testing.T) {
	entries := scale(150_000, 30_000)
	listings := scale(6, 4)
	base := t.TempDir()
	dir := filepath.Join(base, "big")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pad := string(slices.Repeat([]byte("x"), 200))
	for i := range entries {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%07d%s", i, pad)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	d := startDaemon(t, daemonConfig{env: map[string]string{"SANDBOX_BASE_DIR": base}})
	d.mustCall("GET", "/v1/health", nil)
	idle := vmKB(t, d.pid, "VmRSS")
	resetHWM(t, d.pid)

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 2*listings)
	for i := range 2 * listings {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := "/v1/files/big"
			if i%2 == 1 {
				path = "/list/big"
			}
			code, body, _, err := d.callTimeout("GET", path, nil, 5*time.Minute)
			if err != nil || code != 200 {
				errs <- fmt.Errorf("GET %s: %d %v", path, code, err)
				return
			}
			var names []string
			if i%2 == 0 {
				var l struct{ Entries []struct{ Name string } }
				err = json.Unmarshal(body, &l)
				for _, e := range l.Entries {
					names = append(names, e.Name)
				}
				if !slices.IsSorted(names) {
					errs <- fmt.Errorf("GET %s: the entries are not sorted", path)
				}
			} else {
				var l []struct{ Name string }
				err = json.Unmarshal(body, &l)
				for _, e := range l {
					names = append(names, e.Name)
				}
				slices.Sort(names)
			}
			if err != nil {
				errs <- fmt.Errorf("GET %s: %v", path, err)
				return
			}
			if len(slices.Compact(names)) != entries || len(names) != entries {
				errs <- fmt.Errorf("GET %s: %d distinct names, want %d", path, len(slices.Compact(names)), entries)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	peak := vmKB(t, d.pid, "VmHWM")
	bound := idle + int64(2*listings)*8<<10 + 16<<10
	figure(t, "listing memory: %d concurrent listings (%d v1, %d legacy) of %d entries with 207-byte names in %v: VmHWM %d KiB = idle %d + %d KiB; bound idle + %d KiB",
		2*listings, listings, listings, entries, time.Since(start).Round(time.Millisecond), peak, idle, peak-idle, bound-idle)
	if peak > bound {
		t.Errorf("VmHWM %d KiB > bound %d KiB (idle %d + 8 MiB per listing + 16 MiB): the listings grow with the directory", peak, bound, idle)
	}
}
