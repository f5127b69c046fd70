package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/fsroot"
)

// fileReq sends one request to /v1/files and returns status, headers and body.
func fileReq(t *testing.T, method, url string, body io.Reader) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, data
}

// wantErrorCode checks a v1 error answer.
func wantErrorCode(t *testing.T, what string, status int, body []byte, wantStatus int, wantCode string) {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(body, &e); status != wantStatus || err != nil || e.Error.Code != wantCode || e.Error.Message == "" {
		t.Errorf("%s: got %d %s; want %d with code %q", what, status, body, wantStatus, wantCode)
	}
}

func TestFilesGet(t *testing.T) {
	ts := newTestServer(t, nil)
	content := []byte("0123456789abcdef")
	if err := os.MkdirAll(filepath.Join(ts.BaseDir, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts.BaseDir, "dir/f.bin"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	url := ts.URL + "/v1/files/dir/f.bin"

	status, h, body := fileReq(t, "GET", url, nil)
	if status != 200 || !bytes.Equal(body, content) || h.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("GET: %d %q %q; want 200 application/octet-stream with the file", status, h.Get("Content-Type"), body)
	}
	status, _, body = fileReq(t, "GET", ts.URL+"/v1/files/dir%2Ff.bin", nil)
	if status != 200 || !bytes.Equal(body, content) {
		t.Errorf("GET with %%2F: %d %q; want 200 with the file", status, body)
	}

	status, h, body = fileReq(t, "HEAD", url, nil)
	if status != 200 || len(body) != 0 || h.Get("Content-Length") != strconv.Itoa(len(content)) {
		t.Errorf("HEAD: %d, %d body bytes, Content-Length %q; want 200, none, %d", status, len(body), h.Get("Content-Length"), len(content))
	}

	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Range", "bytes=2-5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 206 || string(body) != "2345" || resp.Header.Get("Content-Range") != "bytes 2-5/16" {
		t.Errorf("Range: %d %q %q; want 206 \"2345\" bytes 2-5/16", resp.StatusCode, body, resp.Header.Get("Content-Range"))
	}

	status, _, body = fileReq(t, "GET", ts.URL+"/v1/files/dir/missing", nil)
	wantErrorCode(t, "GET missing", status, body, 404, "not_found")
	status, _, body = fileReq(t, "GET", ts.URL+"/v1/files/dir/f.bin/below", nil)
	wantErrorCode(t, "GET below a file", status, body, 404, "not_found")
	status, _, body = fileReq(t, "GET", url+"?bogus=1", nil)
	wantErrorCode(t, "GET with an unknown parameter", status, body, 400, "invalid_request")
}

func TestFilesList(t *testing.T) {
	ts := newTestServer(t, nil)
	base := ts.BaseDir
	mtime := time.Unix(1700000200, 123456789)
	for _, d := range []string{"d/sub"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "d/b.txt"), []byte("hello"), 0o640); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(base, "d/b.txt"), 0o640)
	if err := os.Symlink("b.txt", filepath.Join(base, "d/a-link")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"d/b.txt", "d/sub"} {
		if err := os.Chtimes(filepath.Join(base, p), mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(base, "d/sub"), 0o750)

	status, h, body := fileReq(t, "GET", ts.URL+"/v1/files/d", nil)
	var got dirListing
	if err := json.Unmarshal(body, &got); status != 200 || err != nil || h.Get("Content-Type") != "application/json" {
		t.Fatalf("GET dir: %d %s (%v)", status, body, err)
	}
	if got.Path != "d" || len(got.Entries) != 3 {
		t.Fatalf("listing %s; want path \"d\" and 3 entries", body)
	}
	want := []struct{ name, typ, mode string }{{"a-link", "symlink", "0777"}, {"b.txt", "file", "0640"}, {"sub", "directory", "0750"}}
	for i, w := range want {
		e := got.Entries[i]
		if e.Name != w.name || e.Type != w.typ || e.Mode != w.mode {
			t.Errorf("entry %d: %+v; want name %s type %s mode %s", i, e, w.name, w.typ, w.mode)
		}
	}
	if e := got.Entries[1]; e.Size != 5 || !e.ModifiedAt.Equal(mtime) || e.ModifiedAt.Location() != time.UTC {
		t.Errorf("b.txt: size %d modified_at %v; want 5 and %v UTC", e.Size, e.ModifiedAt, mtime.UTC())
	}
	if !strings.Contains(string(body), `"modified_at":"2023-11-14T22:16:40.123456789Z"`) {
		t.Errorf("modified_at not RFC 3339 UTC with sub-seconds: %s", body)
	}

	status, _, body = fileReq(t, "GET", ts.URL+"/v1/files/", nil)
	if err := json.Unmarshal(body, &got); status != 200 || err != nil || got.Path != "" || len(got.Entries) != 1 || got.Entries[0].Name != "d" {
		t.Errorf("GET base dir: %d %s; want the listing of d", status, body)
	}
	os.Mkdir(filepath.Join(base, "empty"), 0o755)
	status, _, body = fileReq(t, "GET", ts.URL+"/v1/files/empty", nil)
	if status != 200 || !strings.Contains(string(body), `"entries":[]`) {
		t.Errorf("empty dir: %d %s; want entries []", status, body)
	}
}

func TestFilesPut(t *testing.T) {
	ts := newTestServer(t, nil)
	base := ts.BaseDir
	noTemps := func(dir string) {
		t.Helper()
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.Contains(e.Name(), ".tmp") {
				t.Errorf("temporary file %s left in %s", e.Name(), dir)
			}
		}
	}

	status, _, body := fileReq(t, "PUT", ts.URL+"/v1/files/new/deep/f.txt?mode=0600", strings.NewReader("first"))
	if status != 204 || len(body) != 0 {
		t.Fatalf("PUT new: %d %s; want 204", status, body)
	}
	p := filepath.Join(base, "new/deep/f.txt")
	if data, _ := os.ReadFile(p); string(data) != "first" {
		t.Errorf("content %q; want first", data)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v; want 0600", fi.Mode())
	}

	// Replacing is a rename: a reader of the old file keeps the old bytes,
	// and the mode is kept when none is given.
	old, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	status, _, body = fileReq(t, "PUT", ts.URL+"/v1/files/new/deep/f.txt", strings.NewReader("second, longer"))
	if status != 204 {
		t.Fatalf("PUT replace: %d %s", status, body)
	}
	if data, _ := io.ReadAll(old); string(data) != "first" {
		t.Errorf("the old file read %q after the replace; want first (atomic rename)", data)
	}
	if data, _ := os.ReadFile(p); string(data) != "second, longer" {
		t.Errorf("content %q; want the new bytes", data)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v after replace; want 0600 kept", fi.Mode())
	}
	noTemps(filepath.Dir(p))

	status, _, _ = fileReq(t, "PUT", ts.URL+"/v1/files/plain.txt", strings.NewReader(""))
	if fi, err := os.Stat(filepath.Join(base, "plain.txt")); status != 204 || err != nil || fi.Mode().Perm() != defaultFileMode || fi.Size() != 0 {
		t.Errorf("PUT empty: %d %v; want 204 and an empty 0644 file", status, err)
	}

	for _, c := range []struct {
		what, path string
		status     int
		code       string
	}{
		{"a directory target", "/v1/files/new/deep", 400, "invalid_request"},
		{"the base dir", "/v1/files/", 400, "invalid_request"},
		{"a trailing slash", "/v1/files/newdir/", 400, "invalid_request"},
		{"a bad mode", "/v1/files/x?mode=0999", 400, "invalid_request"},
		{"a mode too large", "/v1/files/x?mode=17777", 400, "invalid_request"},
		{"an unknown parameter", "/v1/files/x?recursive=true", 400, "invalid_request"},
		{"a file as parent", "/v1/files/plain.txt/x", 409, "conflict"},
	} {
		status, _, body := fileReq(t, "PUT", ts.URL+c.path, strings.NewReader("x"))
		wantErrorCode(t, "PUT "+c.what, status, body, c.status, c.code)
	}
	if _, err := os.Stat(filepath.Join(base, "x")); err == nil {
		t.Error("a refused PUT wrote x")
	}
	noTemps(base)
	noTemps(filepath.Join(base, "new/deep"))
}

func TestFilesDelete(t *testing.T) {
	ts := newTestServer(t, nil)
	base := ts.BaseDir
	for _, d := range []string{"full/sub", "empty"} {
		os.MkdirAll(filepath.Join(base, d), 0o755)
	}
	os.WriteFile(filepath.Join(base, "full/sub/f"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(base, "target"), []byte("t"), 0o644)
	os.WriteFile(filepath.Join(base, "file"), []byte("f"), 0o644)
	os.Symlink("target", filepath.Join(base, "link"))

	del := func(path string) (int, []byte) {
		status, _, body := fileReq(t, "DELETE", ts.URL+path, nil)
		return status, body
	}
	gone := func(rel string) bool { _, err := os.Lstat(filepath.Join(base, rel)); return os.IsNotExist(err) }

	if status, body := del("/v1/files/file"); status != 204 || !gone("file") {
		t.Errorf("DELETE file: %d %s; want 204 and gone", status, body)
	}
	status, body := del("/v1/files/file")
	wantErrorCode(t, "DELETE missing", status, body, 404, "not_found")
	status, body = del("/v1/files/full")
	wantErrorCode(t, "DELETE non-empty dir", status, body, 409, "conflict")
	if gone("full/sub/f") {
		t.Error("a refused DELETE removed content")
	}
	if status, body := del("/v1/files/full?recursive=true"); status != 204 || !gone("full") {
		t.Errorf("DELETE recursive: %d %s; want 204 and gone", status, body)
	}
	if status, body := del("/v1/files/empty"); status != 204 || !gone("empty") {
		t.Errorf("DELETE empty dir: %d %s; want 204 and gone", status, body)
	}
	if status, body := del("/v1/files/link"); status != 204 || !gone("link") || gone("target") {
		t.Errorf("DELETE symlink: %d %s; want the link gone and its target kept", status, body)
	}
	status, body = del("/v1/files/")
	wantErrorCode(t, "DELETE base dir", status, body, 400, "invalid_request")
	status, body = del("/v1/files/target?recursive=maybe")
	wantErrorCode(t, "DELETE bad recursive", status, body, 400, "invalid_request")
}

func TestFilesConfinement(t *testing.T) {
	ts := newTestServer(t, nil)
	base := ts.BaseDir
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644)
	os.Symlink(outside, filepath.Join(base, "out"))
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(base, "secret-link"))
	os.Symlink("/nonexistent-sandbox-target", filepath.Join(base, "dangling-out"))

	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/files/out"},
		{"GET", "/v1/files/out/secret"},
		{"HEAD", "/v1/files/out/secret"},
		{"GET", "/v1/files/secret-link"},
		{"PUT", "/v1/files/out/new"},
		{"PUT", "/v1/files/secret-link"},
		{"PUT", "/v1/files/dangling-out"},
		{"DELETE", "/v1/files/out/secret"},
	} {
		status, _, body := fileReq(t, c.method, ts.URL+c.path, strings.NewReader("pwned"))
		if c.method == "HEAD" {
			if status != 403 {
				t.Errorf("HEAD %s: %d; want 403", c.path, status)
			}
			continue
		}
		wantErrorCode(t, c.method+" "+c.path, status, body, 403, "forbidden")
	}
	if data, _ := os.ReadFile(filepath.Join(outside, "secret")); string(data) != "secret" {
		t.Errorf("the outside file reads %q", data)
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Error("a PUT through a symlink wrote outside the base dir")
	}
	if _, err := os.Stat("/nonexistent-sandbox-target"); err == nil {
		t.Error("a PUT through a dangling symlink wrote outside the base dir")
	}

	// `..` never reaches the handler through HTTP: clients clean it, and the
	// middleware answers unclean paths itself (404, never a redirect). The
	// handler's own check is pycompat's TestResolveUnder; here: nothing leaks.
	for _, target := range []string{"/v1/files/../../etc/passwd", "/v1/files/..%2F..%2Fetc%2Fpasswd", "/v1/files/%2E%2E/secret"} {
		status, body := rawGet(t, ts.URL, target)
		if status != 403 && status != 404 || bytes.Contains(body, []byte("root:")) {
			t.Errorf("GET %s: %d %q; want 403 or 404", target, status, body[:min(len(body), 200)])
		}
	}
}

// patternReader yields size bytes of a repeating pattern (nothing stored)
// and samples the heap every 8 MiB it hands out.
type patternReader struct {
	pattern  []byte
	off, n   int64
	onSample func()
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	if int64(len(p)) > r.n-r.off {
		p = p[:r.n-r.off]
	}
	k := 0
	for k < len(p) {
		k += copy(p[k:], r.pattern[(r.off+int64(k))%int64(len(r.pattern)):])
	}
	before := r.off
	r.off += int64(k)
	if before/(8<<20) != r.off/(8<<20) {
		r.onSample()
	}
	return k, nil
}

// TestFilesLargeStreaming PUTs and GETs 1 GiB (64 MiB with -short) through
// a real listener and checks that neither side holds it in memory.
func TestFilesLargeStreaming(t *testing.T) {
	size := int64(1 << 30)
	if testing.Short() {
		size = 64 << 20
	}
	ts := newTestServer(t, nil)
	pattern := make([]byte, 64<<10+7) // not a power of two: misplaced bytes show
	for i := range pattern {
		pattern[i] = byte(i*7 + i/251)
	}

	var ms goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&ms)
	baseHeap := ms.HeapInuse
	baseRSS := vmRSS()
	var maxHeap uint64
	var maxRSS int64
	sample := func() {
		goruntime.ReadMemStats(&ms)
		maxHeap = max(maxHeap, ms.HeapInuse)
		maxRSS = max(maxRSS, vmRSS())
	}

	src := &patternReader{pattern: pattern, n: size, onSample: sample}
	req, err := http.NewRequest("PUT", ts.URL+"/v1/files/big/blob.bin", src)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("PUT: %d; want 204", resp.StatusCode)
	}
	putTook := time.Since(start)
	if fi, err := os.Stat(filepath.Join(ts.BaseDir, "big/blob.bin")); err != nil || fi.Size() != size {
		t.Fatalf("stored file: %v %v; want %d bytes", fi, err, size)
	}

	start = time.Now()
	resp, err = http.Get(ts.URL + "/v1/files/big/blob.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != size {
		t.Fatalf("GET: %d length %d; want 200 and %d", resp.StatusCode, resp.ContentLength, size)
	}
	want := &patternReader{pattern: pattern, n: size, onSample: sample}
	got := make([]byte, 256<<10)
	exp := make([]byte, 256<<10)
	var read int64
	for {
		n, err := io.ReadFull(resp.Body, got)
		if n > 0 {
			if _, err := io.ReadFull(want, exp[:n]); err != nil {
				t.Fatalf("more bytes than were written (at %d)", read)
			}
			if !bytes.Equal(got[:n], exp[:n]) {
				t.Fatalf("content differs in the %d bytes at offset %d", n, read)
			}
			read += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if read != size {
		t.Fatalf("read %d bytes; want %d", read, size)
	}
	getTook := time.Since(start)

	growth := int64(maxHeap) - int64(baseHeap)
	t.Logf("%d MiB: PUT %v, GET %v; heap in use grew by at most %.1f MiB (base %.1f MiB), VmRSS by at most %.1f MiB",
		size>>20, putTook.Round(time.Millisecond), getTook.Round(time.Millisecond),
		float64(growth)/(1<<20), float64(baseHeap)/(1<<20), float64(maxRSS-baseRSS)/(1<<20))
	if growth > 64<<20 {
		t.Errorf("heap in use grew by %d MiB while streaming %d MiB; want under 64 MiB", growth>>20, size>>20)
	}
}

// vmRSS is this process's resident set size in bytes (0 when unknown).
func vmRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}

// rawGet sends GET target exactly as written (no client-side cleaning) on
// a connection of its own and returns the status and body.
func rawGet(t *testing.T, serverURL, target string) (int, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(serverURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", target)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// TestFilesListBudget: while the listings' budget is all leased, a listing
// waits (the server's listWait, lowered here) and is refused before
// anything is sent: 503 too_busy, Retry-After: 1, the connection closed
// (specScenarioFiles checks it against the spec). Once a share is given back, the same
// listing is answered in full.
func TestFilesListBudget(t *testing.T) {
	ts := newTestServer(t, nil)
	ts.listWait = 50 * time.Millisecond
	if err := os.MkdirAll(filepath.Join(ts.BaseDir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	var leases []*fsroot.Lease
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		l, err := ts.listings.Acquire(ctx)
		cancel()
		if err != nil {
			break
		}
		leases = append(leases, l)
	}
	if len(leases) != fsroot.ListBudgetBytes/fsroot.BudgetChunk {
		t.Fatalf("%d leases granted, want %d", len(leases), fsroot.ListBudgetBytes/fsroot.BudgetChunk)
	}
	resp, err := http.Get(ts.URL + "/v1/files/d")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct{ Error struct{ Code string } }
	json.Unmarshal(body, &e)
	if resp.StatusCode != 503 || e.Error.Code != "too_busy" || resp.Header.Get("Retry-After") != "1" || !resp.Close {
		t.Errorf("GET dir with the budget leased: %d %s, Retry-After %q, close %v; want 503 too_busy, 1, closed", resp.StatusCode, body, resp.Header.Get("Retry-After"), resp.Close)
	}
	leases[0].Release()
	if status, _, body := fileReq(t, "GET", ts.URL+"/v1/files/d", nil); status != 200 || !strings.HasSuffix(string(body), `"entries":[]}`) {
		t.Errorf("GET dir with a share free: %d %s", status, body)
	}
	for _, l := range leases[1:] {
		l.Release()
	}
}
