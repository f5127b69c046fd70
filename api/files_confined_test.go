package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// treeOf lists every name below dir (relative, sorted; directories end in
// "/"), for "nothing was left behind" checks.
func treeOf(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if len(rel) > 80 { // keep failure messages readable
			rel = rel[:40] + "…" + rel[len(rel)-30:]
		}
		if d.IsDir() {
			rel += "/"
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// TestFilesEncodedTraversal: percent-encoded `..` in a /v1/files path is
// resolved, not routed away: outside the base dir it is 403 forbidden for
// every method, and nothing is read, written or removed there.
func TestFilesEncodedTraversal(t *testing.T) {
	parent := t.TempDir()
	base := filepath.Join(parent, "base")
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(parent, "victim"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(base, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "f.txt"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, func(_ *runtime.Config, o *Options) { o.BaseDir = base })
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/files/..%2F..%2Fetc%2Fpasswd"},
		{"HEAD", "/v1/files/..%2F..%2Fetc%2Fpasswd"},
		{"GET", "/v1/files/..%2Fvictim"},
		{"GET", "/v1/files/d/..%2F..%2Fvictim"},
		{"GET", "/v1/files/..%2F"},
		{"PUT", "/v1/files/..%2Fx"},
		{"PUT", "/v1/files/..%2Fvictim"},
		{"PUT", "/v1/files/d%2F..%2F..%2Fnew%2Ffile"},
		{"DELETE", "/v1/files/..%2Fvictim"},
		{"DELETE", "/v1/files/..%2F..%2Fetc%2Fpasswd"},
		{"DELETE", "/v1/files/d/..%2F..%2Fvictim?recursive=true"},
	} {
		status, h, body := fileReq(t, c.method, ts.URL+c.path, strings.NewReader("evil"))
		if c.method == "HEAD" {
			if status != http.StatusForbidden || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
				t.Errorf("%s %s: %d %s; want 403 JSON", c.method, c.path, status, h.Get("Content-Type"))
			}
			continue
		}
		wantErrorCode(t, c.method+" "+c.path, status, body, http.StatusForbidden, "forbidden")
	}
	if b, err := os.ReadFile(filepath.Join(parent, "victim")); err != nil || string(b) != "outside" {
		t.Errorf("the outside file: %q, %v; want it untouched", b, err)
	}
	if got := treeOf(t, parent); strings.Join(got, " ") != "base/ base/d/ base/f.txt victim" {
		t.Errorf("tree after the refusals: %q; want only what was there", got)
	}
	// Traversal that stays inside is answered, not refused or redirected.
	status, _, body := fileReq(t, "GET", ts.URL+"/v1/files/d%2F..%2Ff.txt", nil)
	if status != 200 || string(body) != "inside" {
		t.Errorf("GET d/../f.txt: %d %q; want 200 inside", status, body)
	}
	status, _, body = fileReq(t, "GET", ts.URL+"/v1/files/d/..%2Ff.txt", nil)
	if status != 200 || string(body) != "inside" {
		t.Errorf("GET d/..%%2Ff.txt: %d %q; want 200 inside", status, body)
	}
	status, _, body = fileReq(t, "POST", ts.URL+"/v1/files/..%2Fvictim", nil)
	wantErrorCode(t, "POST with traversal", status, body, http.StatusMethodNotAllowed, "method_not_allowed")
}

// TestFilesPutRefusedLeavesNothing: a PUT refused for its path, or failing
// after its parents were created, leaves no directory and no temporary file.
func TestFilesPutRefusedLeavesNothing(t *testing.T) {
	ts := newTestServer(t, nil)
	long := strings.Repeat("d", 250)
	var parts []string
	for range 20 {
		parts = append(parts, long)
	}
	status, _, body := fileReq(t, "PUT", ts.URL+"/v1/files/"+strings.Join(parts, "/"), strings.NewReader("x"))
	wantErrorCode(t, "PUT of a 5,000-byte path", status, body, http.StatusBadRequest, "invalid_request")
	status, _, body = fileReq(t, "PUT", ts.URL+"/v1/files/a/b/"+strings.Repeat("n", 256), strings.NewReader("x"))
	wantErrorCode(t, "PUT with a 256-byte name", status, body, http.StatusBadRequest, "invalid_request")
	// A parent that is a file: 409, and nothing created below or beside it
	// (a PUT that fails after creating parents is in
	// TestFilesRealFilesystemErrors: ENOSPC).
	if err := os.WriteFile(filepath.Join(ts.BaseDir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	status, _, body = fileReq(t, "PUT", ts.URL+"/v1/files/file/x/y", strings.NewReader("x"))
	wantErrorCode(t, "PUT below a file", status, body, http.StatusConflict, "conflict")
	if got := treeOf(t, ts.BaseDir); strings.Join(got, " ") != "file" {
		t.Errorf("tree after refused PUTs: %q; want only file", got)
	}
}

// TestFilesRangeJSON: the refusals of http.ServeContent are v1 JSON errors.
func TestFilesRangeJSON(t *testing.T) {
	ts := newTestServer(t, nil)
	if err := os.WriteFile(filepath.Join(ts.BaseDir, "ten"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		header, value string
		status        int
		code          string
	}{
		{"Range", "bytes=100-200", http.StatusRequestedRangeNotSatisfiable, "range_not_satisfiable"},
		{"If-Match", `"nope"`, http.StatusPreconditionFailed, "precondition_failed"},
	} {
		for _, method := range []string{"GET", "HEAD"} {
			req, _ := http.NewRequest(method, ts.URL+"/v1/files/ten", nil)
			req.Header.Set(c.header, c.value)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			buf.ReadFrom(resp.Body)
			resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); resp.StatusCode != c.status || ct != "application/json" {
				t.Errorf("%s with %s: %d %q; want %d application/json", method, c.header, resp.StatusCode, ct, c.status)
			}
			if method == "GET" {
				wantErrorCode(t, "GET with "+c.header, resp.StatusCode, buf.Bytes(), c.status, c.code)
			}
			if c.status == 416 && resp.Header.Get("Content-Range") != "bytes */10" {
				t.Errorf("416 Content-Range %q; want bytes */10", resp.Header.Get("Content-Range"))
			}
		}
	}
	// A satisfiable range is still served.
	req, _ := http.NewRequest("GET", ts.URL+"/v1/files/ten", nil)
	req.Header.Set("Range", "bytes=2-4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 206 || buf.String() != "234" {
		t.Errorf("Range 2-4: %d %q; want 206 234", resp.StatusCode, buf.String())
	}
}

// TestLegacyListSymlinks: /list follows symlinks that stay inside the base
// dir (relative or absolute) and omits those that leave it; /download and
// /exists refuse the latter.
func TestLegacyListSymlinks(t *testing.T) {
	ts := newTestServer(t, nil)
	base, err := filepath.EvalSymlinks(ts.BaseDir)
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("0123456789abcdef"), 0o644))
	must(os.Mkdir(filepath.Join(base, "s"), 0o755))
	must(os.WriteFile(filepath.Join(base, "s", "plain"), []byte("p"), 0o644))
	must(os.WriteFile(filepath.Join(base, "target"), []byte("tgt"), 0o644))
	must(os.Symlink("../target", filepath.Join(base, "s", "rel-in")))
	must(os.Symlink(filepath.Join(base, "target"), filepath.Join(base, "s", "abs-in")))
	must(os.Symlink(outside, filepath.Join(base, "s", "out-dir")))
	must(os.Symlink(filepath.Join(outside, "secret"), filepath.Join(base, "s", "out-file")))
	status, _, body := fileReq(t, "GET", ts.URL+"/list/s", nil)
	var entries []struct {
		Name, Type string
		Size       int64
	}
	if err := json.Unmarshal(body, &entries); status != 200 || err != nil {
		t.Fatalf("/list/s: %d %s", status, body)
	}
	var got []string
	for _, e := range entries {
		got = append(got, fmt.Sprintf("%s:%s:%d", e.Name, e.Type, e.Size))
	}
	sort.Strings(got) // /list answers in directory order, as Python's os.listdir
	if strings.Join(got, " ") != "abs-in:file:3 plain:file:1 rel-in:file:3" {
		t.Errorf("/list/s: %q; want the inside links followed, the outside ones omitted", got)
	}
	for _, p := range []string{"/download/s/out-file", "/exists/s/out-file", "/exists/s/out-dir", "/list/s/out-dir"} {
		status, _, body := fileReq(t, "GET", ts.URL+p, nil)
		if status != 403 || !strings.Contains(string(body), "Access denied") {
			t.Errorf("%s: %d %s; want 403 Access denied", p, status, body)
		}
	}
}

// TestFileErrnoMapping pins the status of each filesystem errno that has
// one, for the errors no test here can provoke for real (EMFILE, ENFILE,
// EDQUOT, ETXTBSY); the real ones are in TestFilesRealFilesystemErrors.
func TestFileErrnoMapping(t *testing.T) {
	ts := newTestServer(t, nil)
	for errno, want := range map[syscall.Errno]string{
		syscall.ENOSPC:  "507 insufficient_storage",
		syscall.EDQUOT:  "507 insufficient_storage",
		syscall.EROFS:   "409 read_only",
		syscall.EBUSY:   "409 busy",
		syscall.ETXTBSY: "409 busy",
		syscall.EMFILE:  "503 resource_exhausted",
		syscall.ENFILE:  "503 resource_exhausted",
		syscall.EACCES:  "403 forbidden",
		syscall.ENOENT:  "404 not_found",
		syscall.EIO:     "500 internal",
	} {
		err := ts.fileError(&os.PathError{Op: "open", Path: "x", Err: errno}, "x")
		status, code := statusOf(err)
		if got := strconv.Itoa(status) + " " + code; got != want {
			t.Errorf("%v: %s; want %s", errno, got, want)
		}
	}
	// os.Root's refusal of an escaping path (a swap under a race) is 403.
	root, err := os.OpenRoot(ts.BaseDir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	_, err = root.Open("../x")
	if status, code := statusOf(ts.fileError(err, "x")); status != 403 || code != "forbidden" {
		t.Errorf("escape %v: %d %s; want 403 forbidden", err, status, code)
	}
	if !errors.Is(ts.fileError(&os.PathError{Op: "open", Path: "x", Err: syscall.ENOSPC}, "x"), errNoSpace) {
		t.Error("ENOSPC is not errNoSpace")
	}
}

// mountTmpfs mounts a tmpfs of size bytes (with extra options) at dir and
// unmounts it when the test ends. It skips the test when the machine cannot
// mount: not root, or no CAP_SYS_ADMIN (EPERM).
func mountTmpfs(t *testing.T, dir string, size int, opts string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := "size=" + strconv.Itoa(size)
	if opts != "" {
		data += "," + opts
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, data); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("mounting a tmpfs needs CAP_SYS_ADMIN: %v", err)
		}
		t.Fatalf("mount tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// TestFilesRealFilesystemErrors provokes ENOSPC, EROFS and EBUSY on real
// mounts below the base dir and checks the v1 answers: never 500, the JSON
// error shape, and nothing left behind by a failed PUT.
func TestFilesRealFilesystemErrors(t *testing.T) {
	ts := newTestServer(t, nil)
	small := filepath.Join(ts.BaseDir, "small")
	mountTmpfs(t, small, 64<<10, "")
	// A new reader each time: the answer may come before the body is sent
	// whole, while the transport still reads it.
	big := func() io.Reader { return strings.NewReader(strings.Repeat("x", 1<<20)) }

	status, _, body := fileReq(t, "PUT", ts.URL+"/v1/files/small/big", big())
	wantErrorCode(t, "PUT 1 MiB onto a 64 KiB tmpfs", status, body, http.StatusInsufficientStorage, "insufficient_storage")
	status, _, body = fileReq(t, "PUT", ts.URL+"/v1/files/small/new/deeper/big", big())
	wantErrorCode(t, "PUT 1 MiB into new parents", status, body, http.StatusInsufficientStorage, "insufficient_storage")
	if got := treeOf(t, small); len(got) != 0 {
		t.Errorf("after the failed PUTs the tmpfs holds %q; want nothing (no temp file, no parent)", got)
	}
	// It still works for what fits, and DELETE of the mount point is 409
	// busy with or without recursive, leaving its content alone.
	status, _, body = fileReq(t, "PUT", ts.URL+"/v1/files/small/fits", strings.NewReader("ok"))
	if status != http.StatusNoContent {
		t.Fatalf("PUT that fits: %d %s", status, body)
	}
	for _, q := range []string{"", "?recursive=true"} {
		status, _, body = fileReq(t, "DELETE", ts.URL+"/v1/files/small"+q, nil)
		wantErrorCode(t, "DELETE of a mount point"+q, status, body, http.StatusConflict, "busy")
	}
	if b, err := os.ReadFile(filepath.Join(small, "fits")); err != nil || string(b) != "ok" {
		t.Errorf("after DELETE of the mount point: %q, %v; want its file intact", b, err)
	}

	ro := filepath.Join(ts.BaseDir, "ro")
	mountTmpfs(t, ro, 1<<20, "")
	if err := os.WriteFile(filepath.Join(ro, "f"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ro, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("", ro, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	for _, c := range []struct{ method, path string }{
		{"PUT", "/v1/files/ro/new"},
		{"PUT", "/v1/files/ro/f"},
		{"PUT", "/v1/files/ro/sub/new"},
		{"DELETE", "/v1/files/ro/f"},
		{"DELETE", "/v1/files/ro/d"},
		{"DELETE", "/v1/files/ro/d?recursive=true"},
	} {
		status, _, body := fileReq(t, c.method, ts.URL+c.path, strings.NewReader("x"))
		wantErrorCode(t, c.method+" "+c.path+" on a read-only mount", status, body, http.StatusConflict, "read_only")
	}
	if b, err := os.ReadFile(filepath.Join(ro, "f")); err != nil || string(b) != "keep" {
		t.Errorf("read-only file: %q, %v; want keep", b, err)
	}
	// Reads still work there.
	if status, _, body := fileReq(t, "GET", ts.URL+"/v1/files/ro/f", nil); status != 200 || string(body) != "keep" {
		t.Errorf("GET on a read-only mount: %d %q", status, body)
	}
}

// TestFilesEMFILE: with the descriptor table full, file requests answer
// 503 resource_exhausted (not 500), and work again once descriptors free
// up. The table is "full" by lowering RLIMIT_NOFILE to the lowest free
// descriptor number for the duration of two requests on an already open
// keep-alive connection (this test is not parallel: nothing else runs).
func TestFilesEMFILE(t *testing.T) {
	ts := newTestServer(t, nil)
	if err := os.WriteFile(filepath.Join(ts.BaseDir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	do := func(method, path string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader("data"))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		return resp.StatusCode, buf.Bytes()
	}
	if status, body := do("GET", "/v1/files/f"); status != 200 {
		t.Fatalf("warm-up GET: %d %s", status, body)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	probe, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(probe)
	full := old
	full.Cur = uint64(probe)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &full); err != nil {
		t.Fatal(err)
	}
	getStatus, getBody := do("GET", "/v1/files/f")
	putStatus, putBody := do("PUT", "/v1/files/g")
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	wantErrorCode(t, "GET with no descriptor left", getStatus, getBody, http.StatusServiceUnavailable, "resource_exhausted")
	wantErrorCode(t, "PUT with no descriptor left", putStatus, putBody, http.StatusServiceUnavailable, "resource_exhausted")
	if status, body := do("GET", "/v1/files/f"); status != 200 || string(body) != "x" {
		t.Errorf("GET after the limit is back: %d %s", status, body)
	}
	if got := treeOf(t, ts.BaseDir); strings.Join(got, " ") != "f" {
		t.Errorf("tree after the refused PUT: %q", got)
	}
}

// TestFilesDeleteMounts: a DELETE never empties a mounted file system: a
// bind mount of the same file system (same device) is refused like any
// mount point, and a recursive DELETE of a directory with a mount below it
// is refused before anything is removed.
func TestFilesDeleteMounts(t *testing.T) {
	ts := newTestServer(t, nil)
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "precious"), []byte("p"), 0o644); err != nil {
		t.Fatal(err)
	}
	bm := filepath.Join(ts.BaseDir, "bm")
	if err := os.Mkdir(bm, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(src, bm, "", syscall.MS_BIND, ""); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("bind mounts need CAP_SYS_ADMIN: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(bm, syscall.MNT_DETACH) })
	for _, q := range []string{"", "?recursive=true"} {
		status, _, body := fileReq(t, "DELETE", ts.URL+"/v1/files/bm"+q, nil)
		wantErrorCode(t, "DELETE of a bind mount"+q, status, body, http.StatusConflict, "busy")
	}
	if _, err := os.Stat(filepath.Join(src, "precious")); err != nil {
		t.Errorf("the bind-mounted content is gone: %v", err)
	}

	d := filepath.Join(ts.BaseDir, "d")
	if err := os.MkdirAll(filepath.Join(d, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "a", "own"), []byte("o"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(d, "z", "sub")
	mountTmpfs(t, sub, 1<<20, "")
	if err := os.WriteFile(filepath.Join(sub, "precious"), []byte("p"), 0o644); err != nil {
		t.Fatal(err)
	}
	status, _, body := fileReq(t, "DELETE", ts.URL+"/v1/files/d?recursive=true", nil)
	wantErrorCode(t, "recursive DELETE above a mount", status, body, http.StatusConflict, "busy")
	if got := treeOf(t, d); strings.Join(got, " ") != "a/ a/own z/ z/sub/ z/sub/precious" {
		t.Errorf("after the refused recursive DELETE: %q; want everything kept", got)
	}
}

// TestFilesFIFONeverBlocks: a FIFO where a directory or a file is expected
// is refused at once by every route; opening it (which blocks until a
// writer comes) would hang the request. The client gives up after 10 s.
func TestFilesFIFONeverBlocks(t *testing.T) {
	ts := newTestServer(t, nil)
	if err := syscall.Mkfifo(filepath.Join(ts.BaseDir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/v1/files/fifo", 400},
		{"HEAD", "/v1/files/fifo", 400},
		{"GET", "/v1/files/fifo/x", 404},
		{"PUT", "/v1/files/fifo/x", 409},
		{"PUT", "/v1/files/fifo/x/y", 409},
		{"DELETE", "/v1/files/fifo/x", 404},
		{"DELETE", "/v1/files/fifo/x?recursive=true", 404},
		{"GET", "/list/fifo", 404},
		{"GET", "/list/fifo/x", 404},
		{"GET", "/download/fifo", 404},
		{"GET", "/exists/fifo", 200},
	} {
		req, _ := http.NewRequest(c.method, ts.URL+c.path, strings.NewReader("x"))
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("%s %s: %v (a blocked open?)", c.method, c.path, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d; want %d", c.method, c.path, resp.StatusCode, c.status)
		}
	}
	body := "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"fifo/x\"\r\n\r\nx\r\n--b--\r\n"
	req, _ := http.NewRequest("POST", ts.URL+"/upload", strings.NewReader(body))
	req.Header.Set("Content-Type", "multipart/form-data; boundary=b")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("upload below a FIFO: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 500 {
		t.Errorf("upload below a FIFO: %d; want 500 (the Python OSError answer)", resp.StatusCode)
	}
}

// TestFilesNonFiles: GET and HEAD of a unix socket, a FIFO and a device are
// 400 invalid_request (a socket was once 500 internal: its open fails with
// ENXIO), and /download of each is the legacy 404; the listing shows them
// as "other".
func TestFilesNonFiles(t *testing.T) {
	ts := newTestServer(t, nil)
	l, err := net.Listen("unix", filepath.Join(ts.BaseDir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := syscall.Mkfifo(filepath.Join(ts.BaseDir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	names := []string{"sock", "fifo"}
	// A character device 1:3 (like /dev/null), where the machine lets us.
	if err := syscall.Mknod(filepath.Join(ts.BaseDir, "dev"), syscall.S_IFCHR|0o666, 1<<8|3); err == nil {
		names = append(names, "dev")
	} else {
		t.Logf("no device node here (%v): checking the socket and the FIFO", err)
	}
	for _, n := range names {
		for _, m := range []string{"GET", "HEAD"} {
			status, _, body := fileReq(t, m, ts.URL+"/v1/files/"+n, nil)
			if status != 400 || (m == "GET" && !strings.Contains(string(body), "invalid_request")) {
				t.Errorf("%s /v1/files/%s: %d %s; want 400 invalid_request", m, n, status, body)
			}
		}
		if status, _, body := fileReq(t, "GET", ts.URL+"/download/"+n, nil); status != 404 {
			t.Errorf("GET /download/%s: %d %s; want 404", n, status, body)
		}
	}
	status, _, body := fileReq(t, "GET", ts.URL+"/v1/files/", nil)
	if status != 200 {
		t.Fatalf("listing: %d %s", status, body)
	}
	for _, n := range names {
		if !strings.Contains(string(body), `"name":"`+n+`","size":0,"type":"other"`) {
			t.Errorf("listing %s: %s; want %s as type other", n, body, n)
		}
	}
}
