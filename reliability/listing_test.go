//go:build reliability && linux

package reliability

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	base := bigDirectory(t, entries)
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

// TestListingNonReaders: 100 clients each send `GET /v1/files/big` (and
// legacy `/list/big`, one in four) of a directory of long names and never
// read the answer (a 4 KiB receive buffer). All listings together hold at
// most fsroot.ListBudgetBytes of names, and every write has a deadline:
// the daemon's peak RSS stays within idle + 160 MiB, and it lets go of
// every connection (its descriptor count back to idle) within two
// write waits (httpx.WriteWait) and a margin: one for the listings that
// wait for a share of the budget, one for their own cut. Main before issue 20 D1 held each listing's
// pass (about 11 MB) for as long as the client kept the connection: 100
// clients took RSS 17 → 961 MB, for over 100 s.
func TestListingNonReaders(t *testing.T) {
	entries := scale(60_000, 20_000)
	const clients = 100
	base := bigDirectory(t, entries)
	d := startDaemon(t, daemonConfig{env: map[string]string{"SANDBOX_BASE_DIR": base}})
	d.mustCall("GET", "/v1/health", nil)
	d.closeIdle()
	idleFDs := fdCount(d.pid)
	idle := vmKB(t, d.pid, "VmRSS")
	resetHWM(t, d.pid)

	start := time.Now()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range clients {
		c, err := net.DialTimeout("tcp", d.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		c.(*net.TCPConn).SetReadBuffer(4096)
		path := "/v1/files/big"
		if i%4 == 3 {
			path = "/list/big"
		}
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
			t.Fatal(err)
		}
	}
	// The daemon must let every connection go by itself: poll its
	// descriptors (the clients read nothing and close nothing).
	// A listing may wait (listWait: WriteWait + 5 s) for those ahead of it
	// to be cut, then is cut itself.
	deadline := start.Add(45 * time.Second)
	fds := fdCount(d.pid)
	for fds > idleFDs+2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
		fds = fdCount(d.pid)
	}
	peak := vmKB(t, d.pid, "VmHWM")
	bound := idle + 160<<10
	figure(t, "listing non-readers: %d clients that never read (%d entries of 207-byte names): VmHWM %d KiB = idle %d + %d KiB (bound idle + %d KiB); descriptors %d → %d (idle %d) after %v",
		clients, entries, peak, idle, peak-idle, bound-idle, idleFDs+clients, fds, idleFDs, time.Since(start).Round(time.Millisecond))
	if fds > idleFDs+2 {
		t.Errorf("the daemon still holds %d descriptors (idle %d) %v after %d listings that are never read: a non-reading client holds its listing", fds, idleFDs, time.Since(start).Round(time.Second), clients)
	}
	if peak > bound {
		t.Errorf("VmHWM %d KiB > bound %d KiB (idle + 160 MiB): listings nobody reads are not bounded in total", peak, bound)
	}
	// The daemon still answers a listing in full.
	code, body, _, err := d.callTimeout("GET", "/v1/files/big", nil, 2*time.Minute)
	if err != nil || code != 200 || !strings.HasSuffix(string(body), "]}") {
		t.Errorf("GET /v1/files/big after the non-readers: %d %v (%d bytes)", code, err, len(body))
	}
}

// bigDirectory makes a base dir holding "big", a directory of n empty files
// with 207-byte names (the size of the attack's listings), and returns it.
func bigDirectory(t *testing.T, n int) string {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "big")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pad := string(slices.Repeat([]byte("x"), 200))
	for i := range n {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%07d%s", i, pad)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return base
}
