package rest_test

// Tests of the attacker's findings on the sandboxd REST listener (issue 22).

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// do sends method u with the Host header host (the URL's when "") and
// header pairs, and returns the status and body.
func doHost(t *testing.T, method, u, host string, body io.Reader, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{Timeout: 10 * time.Second}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestRebindingRefused (F1): on loopback the listener asks no token, so a
// web page whose name was re-pointed at 127.0.0.1 (DNS rebinding: Host and
// Origin both its own name) must be refused whatever the route; loopback
// literals and localhost are served.
func TestRebindingRefused(t *testing.T) {
	d, u := startOurs(t, "SANDBOXD_REST_ADDR=127.0.0.1:0")
	port := u[strings.LastIndex(u, ":")+1:]
	if err := os.WriteFile(filepath.Join(d.BaseDir, "victim.txt"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	evil := "rebind.attacker.example:" + port
	for _, m := range []struct{ method, path string }{{"DELETE", "/v1/files/victim.txt"}, {"GET", "/v1/metadata"}, {"GET", "/v1/files/victim.txt"}, {"PUT", "/v1/files/planted.txt"}} {
		code, body := doHost(t, m.method, u+m.path, evil, strings.NewReader("x"), "Origin", "http://"+evil)
		if code != 403 || !strings.Contains(body, `"code":"PERMISSION_DENIED"`) {
			t.Errorf("%s %s with Host and Origin %s: %d %s; want 403 PERMISSION_DENIED", m.method, m.path, evil, code, body)
		}
		if code, body := doHost(t, m.method, u+m.path, "rebind.attacker.example", strings.NewReader("x")); code != 403 {
			t.Errorf("%s %s with Host rebind.attacker.example and no Origin: %d %s; want 403", m.method, m.path, code, body)
		}
	}
	if b, err := os.ReadFile(filepath.Join(d.BaseDir, "victim.txt")); err != nil || string(b) != "keep me" {
		t.Errorf("victim.txt after the rebound DELETE: %q, %v; want it intact", b, err)
	}
	if _, err := os.Stat(filepath.Join(d.BaseDir, "planted.txt")); err == nil {
		t.Errorf("the rebound PUT wrote planted.txt")
	}
	for _, h := range []string{"127.0.0.1:" + port, "localhost:" + port, "localhost", "[::1]:" + port} {
		if code, body := doHost(t, "GET", u+"/v1/files/victim.txt", h, nil); code != 200 || body != "keep me" {
			t.Errorf("GET with Host %s: %d %q; want 200", h, code, body)
		}
	}
}

// TestPutNamesAFile (F7, F6): a PUT path ending in "/" names a directory,
// and a name of the daemon's temporary-file patterns is reserved: both are
// 400 INVALID_ARGUMENT and nothing is written.
func TestPutNamesAFile(t *testing.T) {
	d, u := startOurs(t, "SANDBOXD_REST_ADDR=127.0.0.1:0")
	for _, p := range []string{"newdir/", "a/b/", ".sandbox-put-0123456789abcdef.tmp", "sub/.sandbox-put-0123456789abcdef.tmp",
		".sandbox-put-0123456789abcdef.tmp/x", ".sandbox-upload-123e4567-e89b-12d3-a456-426614174000.tmp"} {
		code, body := doHost(t, "PUT", u+"/v1/files/"+p, "", strings.NewReader("content"))
		if code != 400 || !strings.Contains(body, `"code":"INVALID_ARGUMENT"`) {
			t.Errorf("PUT %s: %d %s; want 400 INVALID_ARGUMENT", p, code, body)
		}
	}
	for _, n := range []string{"newdir", "a", "sub", ".sandbox-put-0123456789abcdef.tmp", ".sandbox-upload-123e4567-e89b-12d3-a456-426614174000.tmp"} {
		if _, err := os.Lstat(filepath.Join(d.BaseDir, n)); err == nil {
			t.Errorf("%s exists after the refused PUTs", n)
		}
	}
	// Names that only look alike are files like any other.
	for _, p := range []string{".sandbox-put-notes.tmp", "x.sandbox-put-0123456789abcdef.tmp"} {
		if code, body := doHost(t, "PUT", u+"/v1/files/"+p, "", strings.NewReader("c")); code != 204 {
			t.Errorf("PUT %s: %d %s; want 204", p, code, body)
		}
	}
}

// vmHWM is the peak resident set of pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

// TestMultipartPreambleBounded (F3): the bytes before the "file" part's
// content (preamble, skipped parts, part headers) are bounded: the
// attacker's shape (parts with 9 MiB headers before the file part), sent by
// 20 clients at once, is 400 with a clear message, and the daemon's peak
// RSS grows by far less than the 20 × 27 MiB it held before.
func TestMultipartPreambleBounded(t *testing.T) {
	d, u := startOurs(t, "SANDBOXD_REST_ADDR=127.0.0.1:0")
	pad := strings.Repeat("a", 9<<20)
	var b strings.Builder
	for range 3 {
		b.WriteString("--ZZ\r\nContent-Disposition: form-data; name=\"x\"\r\nX-Pad: " + pad + "\r\n\r\nv\r\n")
	}
	b.WriteString("--ZZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\ncontent\r\n--ZZ--\r\n")
	body := b.String()
	before := vmHWM(t, d.PID)
	const clients = 20
	errs := make(chan string, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, resp := doHost(t, "PUT", fmt.Sprintf("%s/v1/files/mpm%d", u, i), "", strings.NewReader(body), "Content-Type", "multipart/form-data; boundary=ZZ")
			if code != 400 || !strings.Contains(resp, "before the") {
				errs <- fmt.Sprintf("PUT mpm%d: %d %s; want 400 naming the bound", i, code, truncate(resp, 200))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	grew := vmHWM(t, d.PID) - before
	t.Logf("peak RSS grew by %d MiB", grew>>20)
	if grew > 64<<20 {
		t.Errorf("peak RSS grew by %d MiB for %d such PUTs; want under 64 MiB", grew>>20, clients)
	}
	// A multipart body with a small preamble and other parts is served.
	ok := "preamble\r\n--ZZ\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\nv\r\n--ZZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n" + strings.Repeat("z", 1<<20) + "\r\n--ZZ--\r\n"
	if code, resp := doHost(t, "PUT", u+"/v1/files/okmp", "", strings.NewReader(ok), "Content-Type", "multipart/form-data; boundary=ZZ"); code != 204 {
		t.Fatalf("a small multipart PUT: %d %s", code, resp)
	}
	if fi, err := os.Stat(filepath.Join(d.BaseDir, "okmp")); err != nil || fi.Size() != 1<<20 {
		t.Errorf("okmp: %v %v; want 1 MiB", fi, err)
	}
}

// TestMetadataHidesValuesHoldingToken (F5): a variable whose value holds
// the daemon's token anywhere (not only as its whole value) is left out of
// /v1/metadata.
func TestMetadataHidesValuesHoldingToken(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("tok-atk-123456\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, u := startOurs(t, "SANDBOXD_REST_ADDR=127.0.0.1:0", "SANDBOX_RUNTIME_TOKEN_FILE="+tok,
		"SANDBOX_X=Bearer tok-atk-123456", "SANDBOX_Y=tok-atk-123456\n", "SANDBOX_Z= tok-atk-123456 ", "SANDBOX_W=tok-atk-123456", "SANDBOX_OK=hello")
	code, body := doHost(t, "GET", u+"/v1/metadata", "", nil)
	if code != 200 || strings.Contains(body, "tok-atk") || !strings.Contains(body, `"SANDBOX_OK":"hello"`) {
		t.Errorf("/v1/metadata: %d %s; want 200 with SANDBOX_OK and no value holding the token", code, body)
	}
}

// openFDs is the number of descriptors pid holds.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestFileGetNeverReadCut (F4): GETs of a large file whose clients never
// read, on both ports, are cut within httpx.WriteWait (10 s) of their last
// progress plus slack, and the daemon's descriptors (socket and file) are
// freed. Before the fix they were held for as long as the client stayed.
func TestFileGetNeverReadCut(t *testing.T) {
	d, u := startOurs(t, "SANDBOXD_REST_ADDR=127.0.0.1:0")
	big := make([]byte, 64<<20)
	if err := os.WriteFile(filepath.Join(d.BaseDir, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	baseline := openFDs(t, d.PID)
	const per = 5
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, hostport := range []string{strings.TrimPrefix(d.URL, "http://"), strings.TrimPrefix(u, "http://")} {
		for range per {
			c, err := net.DialTimeout("tcp", hostport, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c.(*net.TCPConn).SetReadBuffer(4096)
			conns = append(conns, c)
			if _, err := fmt.Fprintf(c, "GET /v1/files/big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each held GET holds a socket and the file at least.
	start := time.Now()
	for openFDs(t, d.PID) < baseline+2*len(conns) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the daemon holds %d fds, baseline %d: the GETs did not start", openFDs(t, d.PID), baseline)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, bounded
	}
	const bound = 10*time.Second + 10*time.Second // WriteWait, and slack for -race on 2 shared cores
	for openFDs(t, d.PID) > baseline+2 {
		if time.Since(start) > bound {
			t.Fatalf("after %v the daemon still holds %d fds (baseline %d) for %d clients that never read; want them freed within %v",
				time.Since(start).Round(time.Second), openFDs(t, d.PID), baseline, len(conns), bound)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("fds freed %v after the GETs started", time.Since(start).Round(100*time.Millisecond))
	if code, _ := doHost(t, "GET", d.URL+"/v1/health", "", nil); code != 200 {
		t.Errorf("main /v1/health: %d", code)
	}
}
