//go:build reliability && linux

package reliability

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The swap race of issue 11 item 3: a directory x inside the base dir and a
// symlink y to a directory outside it are exchanged atomically
// (renameat2(RENAME_EXCHANGE)) in a tight loop while every file operation of
// /v1/files and of the legacy routes is sent at x, thousands of times each.
// A daemon that resolves a path and then uses it by name reads, writes and
// deletes outside; one that works relative to an opened base dir (os.Root)
// may fail a request, but never touches the outside tree and never leaves a
// temporary file behind.

const (
	insideSecret  = "inside-content"
	outsideSecret = "OUTSIDE-SECRET"
	outsideOnly   = "outside-only.txt" // a name that exists only outside
)

// swapTree is the layout: parent/base (the daemon's base dir) with x/ and
// y -> parent/outside.
type swapTree struct {
	parent, base, outside string
}

func newSwapTree(t *testing.T, victims int) swapTree {
	t.Helper()
	parent, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := swapTree{parent: parent, base: filepath.Join(parent, "base"), outside: filepath.Join(parent, "outside")}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{st.base, filepath.Join(st.base, "x"), st.outside} {
		must(os.Mkdir(d, 0o755))
	}
	must(os.WriteFile(filepath.Join(st.base, "x", "secret.txt"), []byte(insideSecret), 0o644))
	must(os.WriteFile(filepath.Join(st.outside, "secret.txt"), []byte(outsideSecret), 0o644))
	must(os.WriteFile(filepath.Join(st.outside, outsideOnly), []byte(outsideSecret), 0o644))
	// Victims for DELETE: the same names on both sides; only the inside
	// ones may go.
	for i := range victims {
		for _, side := range []string{filepath.Join(st.base, "x"), st.outside} {
			must(os.WriteFile(filepath.Join(side, fmt.Sprintf("victim-%d", i)), []byte(outsideSecret), 0o644))
			must(os.MkdirAll(filepath.Join(side, fmt.Sprintf("vdir-%d", i), "sub"), 0o755))
			must(os.WriteFile(filepath.Join(side, fmt.Sprintf("vdir-%d", i), "sub", "f"), []byte(outsideSecret), 0o644))
		}
	}
	must(os.Symlink(st.outside, filepath.Join(st.base, "y")))
	return st
}

// snapshot is every name below dir with its content (directories "/").
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.IsDir():
			out[rel+"/"] = ""
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		default:
			out[rel] = "<" + d.Type().String() + ">"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tempFiles lists the daemon's temporary files anywhere below dir.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".sandbox-") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// swapper exchanges base/x and base/y until stop is closed; it returns the
// number of swaps once it has stopped, with x a directory again.
func swapper(t *testing.T, st swapTree, stop <-chan struct{}) <-chan int {
	done := make(chan int, 1)
	x, y := filepath.Join(st.base, "x"), filepath.Join(st.base, "y")
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				if n%2 == 1 {
					unix.Renameat2(unix.AT_FDCWD, x, unix.AT_FDCWD, y, unix.RENAME_EXCHANGE)
					n++
				}
				done <- n
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, x, unix.AT_FDCWD, y, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("renameat2: %v", err)
				done <- n
				return
			}
			n++
		}
	}()
	return done
}

// swapOp is one operation sent at x while the swapper runs. send returns a
// description of a confinement breach seen in the answer, or "".
type swapOp struct {
	name string
	send func(d *daemon, i int) (status int, breach string, err error)
}

func getOp(path string, check func(status int, body []byte) string) func(*daemon, int) (int, string, error) {
	return func(d *daemon, i int) (int, string, error) {
		code, body, _, err := d.call("GET", path, nil)
		if err != nil {
			return 0, "", err
		}
		return code, check(code, body), nil
	}
}

func noSecret(code int, body []byte) string {
	if bytes.Contains(body, []byte(outsideSecret)) || bytes.Contains(body, []byte("OUTS")) {
		return fmt.Sprintf("%d %q", code, truncate(string(body), 80))
	}
	return ""
}

func noOutsideName(code int, body []byte) string {
	if bytes.Contains(body, []byte(outsideOnly)) {
		return fmt.Sprintf("%d listing shows %s", code, outsideOnly)
	}
	return ""
}

// bodySamples keeps the first body of each status of the running
// operation, for the log (which refusal the race produced).
var bodySamples sync.Map

func sampleBody(code int, body []byte) {
	if code >= 300 {
		bodySamples.LoadOrStore(code, truncate(string(body), 160))
	}
}

func swapOps() []swapOp {
	put := func(path func(i int) string) func(*daemon, int) (int, string, error) {
		return func(d *daemon, i int) (int, string, error) {
			code, body, _, err := d.call("PUT", path(i), []byte("written-"+fmt.Sprint(i)))
			sampleBody(code, body)
			return code, "", err
		}
	}
	del := func(path func(i int) string) func(*daemon, int) (int, string, error) {
		return func(d *daemon, i int) (int, string, error) {
			code, body, _, err := d.call("DELETE", path(i), nil)
			sampleBody(code, body)
			return code, "", err
		}
	}
	return []swapOp{
		{"GET /v1/files", getOp("/v1/files/x/secret.txt", noSecret)},
		{"HEAD /v1/files", func(d *daemon, i int) (int, string, error) {
			req, _ := http.NewRequest("HEAD", d.url+"/v1/files/x/"+outsideOnly, nil)
			resp, err := d.client.Do(req)
			if err != nil {
				return 0, "", err
			}
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return 200, "HEAD found the outside-only file", nil
			}
			return resp.StatusCode, "", nil
		}},
		{"GET /v1/files Range", func(d *daemon, i int) (int, string, error) {
			req, _ := http.NewRequest("GET", d.url+"/v1/files/x/secret.txt", nil)
			req.Header.Set("Range", "bytes=0-3")
			resp, err := d.client.Do(req)
			if err != nil {
				return 0, "", err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, noSecret(resp.StatusCode, body), err
		}},
		{"GET /v1/files list", getOp("/v1/files/x", noOutsideName)},
		{"GET /download", getOp("/download/x/secret.txt", noSecret)},
		{"GET /list", getOp("/list/x", noOutsideName)},
		{"GET /exists", getOp("/exists/x/"+outsideOnly, func(code int, body []byte) string {
			var r struct{ Exists bool }
			if json.Unmarshal(body, &r) == nil && r.Exists {
				return "exists says the outside-only file exists"
			}
			return ""
		})},
		{"PUT /v1/files", put(func(i int) string { return fmt.Sprintf("/v1/files/x/put-%d.txt", i) })},
		{"PUT /v1/files parents", put(func(i int) string { return fmt.Sprintf("/v1/files/x/new-%d/deeper/p.txt", i) })},
		{"POST /upload", func(d *daemon, i int) (int, string, error) {
			var buf bytes.Buffer
			mw := multipart.NewWriter(&buf)
			h := make(map[string][]string)
			h["Content-Disposition"] = []string{fmt.Sprintf(`form-data; name="file"; filename="x/up-%d.txt"`, i)}
			pw, _ := mw.CreatePart(h)
			pw.Write([]byte("uploaded"))
			mw.Close()
			req, _ := http.NewRequest("POST", d.url+"/upload", &buf)
			req.Header.Set("Content-Type", mw.FormDataContentType())
			resp, err := d.client.Do(req)
			if err != nil {
				return 0, "", err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode, "", nil
		}},
		{"DELETE /v1/files", del(func(i int) string { return fmt.Sprintf("/v1/files/x/victim-%d", i) })},
		{"DELETE /v1/files recursive", del(func(i int) string { return fmt.Sprintf("/v1/files/x/vdir-%d?recursive=true", i) })},
	}
}

// TestFilesSwapRace runs every operation against the swap and then checks
// the outside tree byte for byte and the whole tree for temporary files.
func TestFilesSwapRace(t *testing.T) {
	n := scale(5000, 1500)
	const workers = 4
	st := newSwapTree(t, n)
	before := snapshot(t, st.outside)
	d := startDaemon(t, daemonConfig{env: map[string]string{"SANDBOX_BASE_DIR": st.base}})

	base := d.baseline()
	for _, op := range swapOps() {
		stop := make(chan struct{})
		swaps := swapper(t, st, stop)
		var next atomic.Int64
		var mu sync.Mutex
		statuses := map[int]int{}
		var firstBreach string
		var opBreaches, transport int
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1) - 1)
					if i >= n {
						return
					}
					code, breach, err := op.send(d, i)
					mu.Lock()
					switch {
					case err != nil:
						transport++
					case breach != "":
						opBreaches++
						if firstBreach == "" {
							firstBreach = breach
						}
					}
					statuses[code]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(stop)
		nswaps := <-swaps
		var codes []string
		for c, k := range statuses {
			codes = append(codes, fmt.Sprintf("%d×%d", c, k))
		}
		sort.Strings(codes)
		bodySamples.Range(func(k, v any) bool {
			t.Logf("%s: a %d answer: %s", op.name, k, v)
			bodySamples.Delete(k)
			return true
		})
		figure(t, "%s under the swap race: %d requests, %d swaps, statuses %s, %d breaches", op.name, n, nswaps, strings.Join(codes, " "), opBreaches)
		if transport > 0 {
			t.Errorf("%s: %d requests failed at the transport level", op.name, transport)
		}
		if opBreaches > 0 {
			t.Errorf("%s: %d of %d answers came from outside the base dir; first: %s", op.name, opBreaches, n, firstBreach)
		}
		if statuses[500] > 0 && !strings.HasPrefix(op.name, "POST /upload") {
			t.Errorf("%s: %d answers were 500", op.name, statuses[500])
		}
		if !d.alive() {
			t.Fatalf("the daemon died during %s", op.name)
		}
	}

	// Every request opened the base dir (and maybe a parent) as a handle:
	// none of them may stay open.
	if r, ok := d.settle(base, 2, 10*time.Second); !ok {
		t.Errorf("after the race the daemon holds %d fds and %d goroutines; at idle before %d and %d", r.fds, r.goroutines, base.fds, base.goroutines)
	} else {
		figure(t, "fds after the race: %d (idle before: %d)", r.fds, base.fds)
	}

	after := snapshot(t, st.outside)
	var changed []string
	for name, content := range before {
		if got, ok := after[name]; !ok {
			changed = append(changed, "deleted "+name)
		} else if got != content {
			changed = append(changed, "rewritten "+name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			changed = append(changed, "created "+name)
		}
	}
	sort.Strings(changed)
	kinds := map[string]int{}
	for _, c := range changed {
		kinds[strings.Fields(c)[0]]++
	}
	figure(t, "outside tree after %d requests per operation: %d names changed (%d created, %d rewritten, %d deleted)",
		n, len(changed), kinds["created"], kinds["rewritten"], kinds["deleted"])
	if len(changed) > 0 {
		t.Errorf("the outside tree changed: %d names, e.g. %q", len(changed), changed[:min(len(changed), 8)])
	}
	tmps := tempFiles(t, st.parent)
	figure(t, "temporary files left anywhere: %d", len(tmps))
	if len(tmps) > 0 {
		t.Errorf("%d temporary files were left behind, e.g. %q", len(tmps), tmps[:min(len(tmps), 5)])
	}
}
