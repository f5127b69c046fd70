package main

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/internal/daemontest"
)

// TestE2EFilesFakeProc runs the daemon in a private mount namespace whose
// /proc is a plain directory where every self/fd/N is a symlink to a
// directory outside the base dir: what a command with mount rights could
// set up in the daemon's namespace. PUT and DELETE below a subdirectory
// must still act inside the base dir (they once re-opened the parent
// through /proc/self/fd/N and wrote or removed outside).
func TestE2EFilesFakeProc(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e tests are skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("a private mount namespace needs root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare(1)")
	}
	if out, err := exec.Command(unshare, "-m", "--propagation", "private", "true").CombinedOutput(); err != nil {
		t.Skipf("unshare -m is refused here: %v %s", err, out)
	}
	tmp := t.TempDir()
	outside := filepath.Join(tmp, "outside")
	fake := filepath.Join(tmp, "fakeproc")
	for _, d := range []string{outside, filepath.Join(fake, "self", "fd")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for n := range 1024 {
		if err := os.Symlink(outside, filepath.Join(fake, "self", "fd", strconv.Itoa(n))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "victim.txt"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(tmp, "base")
	if err := os.MkdirAll(filepath.Join(base, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "sub", "victim.txt"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := daemontest.StartT(t, daemontest.Options{
		Bin:     binPath,
		BaseDir: base,
		LogPath: filepath.Join(tmp, "daemon.log"),
		// The script runs in the new namespace: /proc becomes the fake
		// tree (for the daemon only), then the daemon replaces the shell.
		Prefix: []string{unshare, "-m", "--propagation", "private",
			"sh", "-c", `mount --bind "$0" /proc && exec "$@"`, fake},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	do := func(method, path, body string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, d.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	if code := do("PUT", "/v1/files/sub/pwned.txt", "pwned"); code != http.StatusNoContent {
		t.Errorf("PUT sub/pwned.txt = %d, want 204", code)
	}
	if _, err := os.Stat(filepath.Join(outside, "pwned.txt")); err == nil {
		t.Error("PUT sub/pwned.txt wrote outside the base dir, through the fake /proc")
	}
	if b, err := os.ReadFile(filepath.Join(base, "sub", "pwned.txt")); err != nil || string(b) != "pwned" {
		t.Errorf("base/sub/pwned.txt = %q, %v; want \"pwned\"", b, err)
	}

	if code := do("DELETE", "/v1/files/sub/victim.txt", ""); code != http.StatusNoContent {
		t.Errorf("DELETE sub/victim.txt = %d, want 204", code)
	}
	if _, err := os.Stat(filepath.Join(outside, "victim.txt")); err != nil {
		t.Errorf("DELETE sub/victim.txt removed the file outside the base dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "sub", "victim.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("base/sub/victim.txt after its DELETE: %v, want it gone", err)
	}

	// The listing of sub is of sub itself (it opens the same way).
	if code := do("GET", "/v1/files/sub", ""); code != http.StatusOK {
		t.Errorf("GET sub = %d, want 200", code)
	}
}

// TestE2EFilesNonUTF8Names: names that are not UTF-8, made on disk, round
// trip: a listing (v1 and legacy) shows them with U+FFFD in "name" and
// their exact bytes percent-encoded in "escaped_name", and that form in a
// URL reaches the file (GET, /download, PUT, DELETE). Before, the listing
// gave only "\ufffd\ufffd…", which then was 404.
func TestE2EFilesNonUTF8Names(t *testing.T) {
	d := startDaemon(t)
	ctx := testCtx(t, 30*time.Second)
	name := "\xff\xfe-caf\xe9.txt" // Latin-1 bytes
	sub := "d\x80"
	if err := os.Mkdir(filepath.Join(d.base, sub), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.base, sub, name), []byte("latin-1"), 0o644); err != nil {
		t.Fatal(err)
	}
	type entry struct {
		Name        string `json:"name"`
		EscapedName string `json:"escaped_name"`
	}
	var root struct{ Entries []entry }
	d.doJSON(ctx, "GET", "/v1/files/", nil, 200, &root)
	if len(root.Entries) != 1 || root.Entries[0].Name != "d\ufffd" || root.Entries[0].EscapedName != "d%80" {
		t.Fatalf("base listing: %+v; want d\\ufffd with escaped_name d%%80", root.Entries)
	}
	var l struct{ Entries []entry }
	d.doJSON(ctx, "GET", "/v1/files/"+root.Entries[0].EscapedName, nil, 200, &l)
	if len(l.Entries) != 1 || l.Entries[0].Name != "\ufffd\ufffd-caf\ufffd.txt" || l.Entries[0].EscapedName != "%FF%FE-caf%E9.txt" {
		t.Fatalf("listing of d%%80: %+v", l.Entries)
	}
	url := "/v1/files/" + root.Entries[0].EscapedName + "/" + l.Entries[0].EscapedName
	if resp, b := d.do(ctx, "GET", url, nil); resp.StatusCode != 200 || string(b) != "latin-1" {
		t.Errorf("GET %s: %d %q; want 200 \"latin-1\"", url, resp.StatusCode, b)
	}
	// The legacy /list carries the same field; the legacy routes decode a
	// path as UTF-8 (as the Python server did), so it is for /v1/files.
	var legacy []entry
	if err := os.WriteFile(filepath.Join(d.base, "\xe9t\xe9"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.doJSON(ctx, "GET", "/list/", nil, 200, &legacy)
	var esc []string
	for _, e := range legacy {
		esc = append(esc, e.EscapedName)
	}
	if slices.Sort(esc); !slices.Equal(esc, []string{"%E9t%E9", "d%80"}) {
		t.Errorf("legacy /list: %+v; want escaped_name d%%80 and %%E9t%%E9", legacy)
	}
	// A UTF-8 name has no escaped_name.
	if resp, b := d.do(ctx, "PUT", "/v1/files/"+root.Entries[0].EscapedName+"/caf%C3%A9", "x"); resp.StatusCode != 204 {
		t.Fatalf("PUT café: %d %s", resp.StatusCode, b)
	}
	resp, b := d.do(ctx, "GET", "/v1/files/d%80", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"name":"café",`) || strings.Count(string(b), "escaped_name") != 1 {
		t.Errorf("listing with café: %s; want café without escaped_name", b)
	}
	if resp, b := d.do(ctx, "DELETE", url, nil); resp.StatusCode != 204 {
		t.Errorf("DELETE %s: %d %s", url, resp.StatusCode, b)
	}
	if _, err := os.Stat(filepath.Join(d.base, sub, name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after DELETE the file is still there: %v", err)
	}
}

// TestE2EFilesPutKilled: a PUT into missing parents whose daemon is
// SIGKILLed mid-body leaves no parent at its real name and nothing a
// listing shows (v1 or legacy); the next daemon on that base dir removes
// the hidden leftovers at start. Before, the temporary file and the
// created parents stayed, and listings showed them.
func TestE2EFilesPutKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e tests are skipped with -short")
	}
	tmp := t.TempDir()
	base := filepath.Join(tmp, "base")
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(log string) *daemontest.Daemon {
		return daemontest.StartT(t, daemontest.Options{Bin: binPath, BaseDir: base, LogPath: filepath.Join(tmp, log)})
	}
	d := start("first.log")
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequest("PUT", d.URL+"/v1/files/new/deeper/file.bin", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	if _, err := pw.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	// The body is arriving: wait until the daemon has the temporary file.
	hidden := func() []string {
		var out []string
		filepath.WalkDir(base, func(p string, e fs.DirEntry, err error) error {
			if err == nil && p != base {
				out = append(out, strings.TrimPrefix(p, base+"/"))
			}
			return nil
		})
		return out
	}
	deadline := time.Now().Add(20 * time.Second)
	for !slices.ContainsFunc(hidden(), func(p string) bool { return strings.HasSuffix(p, "/file.bin") || strings.Contains(p, "/.sandbox-put-") }) {
		if time.Now().After(deadline) {
			t.Fatalf("no temporary file appeared: %q", hidden())
		}
		time.Sleep(10 * time.Millisecond) // polling the file system, bounded above
	}
	ctx := testCtx(t, 30*time.Second)
	for _, path := range []string{"/v1/files/", "/list/"} {
		resp, err := http.Get(d.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "sandbox-put") || strings.Contains(string(b), `"new"`) {
			t.Errorf("GET %s during the PUT: %s; want neither the temporary name nor the parent", path, b)
		}
	}
	if err := syscall.Kill(d.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.Exited():
	case <-ctx.Done():
		t.Fatal("the daemon did not die of SIGKILL")
	}
	left := hidden()
	if slices.Contains(left, "new") {
		t.Errorf("after SIGKILL the parent \"new\" exists at its real name: %q", left)
	}
	if len(left) == 0 {
		t.Fatal("nothing was left to clean: the test did not cut a write")
	}
	d2 := start("second.log")
	deadline = time.Now().Add(20 * time.Second)
	for len(hidden()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted daemon kept %q", hidden())
		}
		time.Sleep(10 * time.Millisecond) // polling the file system, bounded above
	}
	resp, err := http.Get(d2.URL + "/v1/files/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != `{"path":"","entries":[]}` {
		t.Errorf("listing after the restart: %s; want it empty", b)
	}
}
