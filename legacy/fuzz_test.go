package legacy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/sandbox-runtime/sandbox-runtime/api"
	"github.com/sandbox-runtime/sandbox-runtime/pycompat"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// fzTree is a base dir with files, a subdirectory and symlinks that point
// inside, outside (to a directory holding a secret), nowhere and to
// themselves; outside is its sibling. Every file inside holds "inside".
type fzTree struct {
	root, base, outside string
}

func fzMakeTree(f *testing.F) fzTree {
	root := f.TempDir()
	tr := fzTree{root: root, base: filepath.Join(root, "l1", "l2", "l3", "base"), outside: filepath.Join(root, "l1", "outside")}
	for _, d := range []string{tr.base + "/dir/sub", tr.outside + "/deep"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	for p, data := range map[string]string{
		tr.base + "/file.txt": "inside", tr.base + "/dir/a.txt": "inside", tr.base + "/ü %41.txt": "inside",
		tr.outside + "/secret.txt": "OUTSIDE-SECRET", tr.outside + "/deep/secret.txt": "OUTSIDE-SECRET",
	} {
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	for name, target := range map[string]string{
		"link-in": "dir", "link-out": tr.outside, "link-out-rel": "../../../outside", "link-up": "..",
		"dangling": "nowhere", "loop": "loop", "loop-a": "loop-b", "loop-b": "loop-a", "dir/link-file": "../file.txt",
	} {
		if err := os.Symlink(target, filepath.Join(tr.base, name)); err != nil {
			f.Fatal(err)
		}
	}
	return tr
}

// fzConfined reports whether full, as the kernel resolves it, stays in base:
// the longest existing prefix of full is resolved with EvalSymlinks.
func fzConfined(base, full string) bool {
	realBase, err := filepath.EvalSymlinks(base)
	if err != nil {
		return false
	}
	p := full
	for {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		parent := filepath.Dir(p)
		if parent == p {
			break
		}
		p = parent
	}
	rp, err := filepath.EvalSymlinks(p)
	if err != nil {
		return true // a loop: nothing can be opened through it
	}
	return rp == realBase || strings.HasPrefix(rp, realBase+"/")
}

var legacyPathSeeds = []string{
	"", "file.txt", "dir/a.txt", "../outside/secret.txt", "../../../outside/secret.txt", "link-out/secret.txt", "link-out",
	"link-out-rel/deep/secret.txt", "link-up/base/file.txt", "link-up", "link-in/a.txt", "dangling", "loop", "loop-a/x",
	"dir/../file.txt", "dir/../../base/file.txt", "/etc/passwd", "//etc/passwd", "\x00", "a\x00b", "ü %41.txt", ".", "..",
	"dir/link-file", "link-in/../../outside/secret.txt", strings.Repeat("../", 40) + "etc/passwd", strings.Repeat("x", 300),
}

// FuzzResolveUnder fuzzes the path confinement shared by the legacy file
// routes, /upload and /v1/files: an accepted path is clean, absolute and,
// as the kernel resolves it, inside the base dir; NUL is refused.
func FuzzResolveUnder(f *testing.F) {
	tr := fzMakeTree(f)
	base, err := filepath.EvalSymlinks(tr.base)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range legacyPathSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		full, err := pycompat.ResolveUnder(base, rel)
		switch {
		case strings.IndexByte(rel, 0) >= 0:
			if !errors.Is(err, pycompat.ErrNULPath) {
				t.Fatalf("pycompat.ResolveUnder(%q) with NUL = %q, %v", rel, full, err)
			}
			return
		case err != nil:
			if !errors.Is(err, pycompat.ErrOutside) {
				t.Fatalf("pycompat.ResolveUnder(%q): unexpected error %v", rel, err)
			}
			return
		}
		if !filepath.IsAbs(full) || filepath.Clean(full) != full {
			t.Fatalf("pycompat.ResolveUnder(%q) = %q: not clean and absolute", rel, full)
		}
		if !pycompat.Within(base, full) {
			t.Fatalf("pycompat.ResolveUnder(%q) = %q: outside %q", rel, full, base)
		}
		if !fzConfined(base, full) {
			t.Fatalf("pycompat.ResolveUnder(%q) = %q, which the kernel resolves outside %q", rel, full, base)
		}
	})
}

// fzLegacy is an in-process server over an fzTree for the handler fuzzers.
var (
	fzLegacyOnce sync.Once
	fzLegacySrv  *testServer
	fzLegacyTree fzTree
)

func fzLegacyServer(f *testing.F) (*testServer, fzTree) {
	fzLegacyOnce.Do(func() {
		fzLegacyTree = fzMakeTree(f)
		fzLegacySrv = newTestServer(f, func(c *runtime.Config, o *api.Options) {
			c.BaseDir, o.BaseDir = fzLegacyTree.base, fzLegacyTree.base
		})
	})
	return fzLegacySrv, fzLegacyTree
}

// FuzzLegacyPath fuzzes the raw paths of GET /download, /list, /exists and
// GET /v1/files through the real handler chain: never 5xx, never a
// redirect, and nothing from outside the base dir is ever served.
func FuzzLegacyPath(f *testing.F) {
	ts, _ := fzLegacyServer(f)
	h := ts.Handler()
	for i, s := range legacyPathSeeds {
		f.Add(uint8(i), s)
	}
	for _, s := range []string{"..%2f..%2f..%2foutside%2fsecret.txt", "%2e%2e/%2e%2e/%2e%2e/outside/secret.txt", "link-out%2fsecret.txt",
		"%252e%252e/x", "%ff%fe", "a%", "%zz", "%00", "dir%2F..%2F..%2F..%2F..%2Foutside/secret.txt", "?x=1", "#frag"} {
		f.Add(uint8(len(s)), s)
	}
	f.Add(uint8(3), strings.Repeat("x", 300))
	f.Add(uint8(3), "dir/"+strings.Repeat("y", 256)+"/z")
	routes := []string{"/download/", "/list/", "/exists/", "/v1/files/"}
	f.Fuzz(func(t *testing.T, route uint8, raw string) {
		target := routes[int(route)%len(routes)] + raw
		u, err := url.ParseRequestURI(target)
		if err != nil || strings.ContainsAny(target, " \r\n\t") {
			return // net/http refuses such a request line before any handler
		}
		req := &http.Request{Method: "GET", URL: u, RequestURI: target, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{}, Host: "127.0.0.1", Body: http.NoBody}
		req = req.WithContext(context.Background())
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		body := rec.Body.String()
		switch {
		case rec.Code >= 500 && strings.HasPrefix(target, "/v1/files/") && fzLongSegment(u.Path):
			t.Fatalf("GET %q: %d: a name over NAME_MAX is not classified by fileError (ENAMETOOLONG)", fzClip([]byte(target)), rec.Code)
		case rec.Code >= 500:
			t.Fatalf("GET %q: %d %s", target, rec.Code, fzClip([]byte(body)))
		case rec.Code >= 300 && rec.Code < 400:
			t.Fatalf("GET %q: redirect %d to %q", target, rec.Code, rec.Header().Get("Location"))
		case strings.Contains(body, "OUTSIDE-SECRET") || rec.Code == http.StatusOK && strings.Contains(body, `"name":"secret.txt"`):
			t.Fatalf("GET %q served content from outside the base dir: %s", target, fzClip([]byte(body)))
		}
	})
}

// FuzzLegacyUpload fuzzes the multipart filename of POST /upload through
// the real handler (pycompat.PartDisposition, pycompat.ResolveUnder, makedirs, placement):
// no panic, no 5xx but the legacy "File upload failed" answer to an OS
// error, and no file is ever created or changed outside the base dir.
// Filenames that could climb above the test's own temporary tree if
// confinement broke are not sent (at most 3 ".." and the base is 4 deep).
func FuzzLegacyUpload(f *testing.F) {
	ts, tr := fzLegacyServer(f)
	h := ts.Handler()
	for _, s := range legacyPathSeeds {
		f.Add(s, []byte("content"))
	}
	for _, s := range []string{`C:\dir\name.txt`, `\\server\share\x`, `a\"b`, `new/dir/file.txt`, "caf\xe9.txt", "dir/sub/", "link-out-rel/deep/x"} {
		f.Add(s, []byte("x"))
	}
	snapshot := func() map[string]string {
		out := map[string]string{}
		filepath.WalkDir(tr.root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if p == tr.base {
				return filepath.SkipDir
			}
			if fi, err := d.Info(); err == nil {
				out[p] = fmt.Sprintf("%v %d %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
			}
			return nil
		})
		return out
	}
	before := snapshot()
	f.Fuzz(func(t *testing.T, filename string, content []byte) {
		if strings.Count(filename, "..") > 3 || strings.HasPrefix(filename, "/") || strings.HasPrefix(filename, `\`) ||
			strings.ContainsAny(filename, "\r\n") || len(content) > 1<<16 {
			return
		}
		quoted := strings.ReplaceAll(strings.ReplaceAll(filename, `\`, `\\`), `"`, `\"`)
		var b bytes.Buffer
		b.WriteString("--fzb\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" + quoted + "\"\r\n" +
			"Content-Type: application/octet-stream\r\n\r\n")
		b.Write(content)
		b.WriteString("\r\n--fzb--\r\n")
		req := httptest.NewRequest("POST", "/upload", &b)
		req.Header.Set("Content-Type", "multipart/form-data; boundary=fzb")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		body := rec.Body.String()
		if rec.Code >= 500 && !(rec.Code == 500 && strings.Contains(body, "File upload failed: ")) {
			t.Fatalf("upload %q: %d %s", filename, rec.Code, fzClip([]byte(body)))
		}
		after := snapshot()
		for p, v := range after {
			if before[p] != v {
				t.Fatalf("upload %q (answer %d %s) created or changed %s outside the base dir", filename, rec.Code, fzClip([]byte(body)), p)
			}
		}
		if len(after) != len(before) {
			t.Fatalf("upload %q removed files outside the base dir", filename)
		}
	})
}

func fzLongSegment(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if len(seg) > 255 {
			return true
		}
	}
	return false
}

// fzLastCommand returns the last top-level "command" string of a JSON
// object as encoding/json reads it (exact key), and whether there is one.
func fzLastCommand(body []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false
	}
	cmd, found := "", false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return "", false
		}
		if tok == "command" {
			var s string
			if json.Unmarshal(v, &s) == nil {
				cmd, found = s, true
			} else {
				found = false // a non-string command: coerced, not compared
			}
		}
	}
	return cmd, found
}

// FuzzLegacyExecuteBody fuzzes the body of legacy POST /execute, decoded by
// the runtime's own Python-compatible JSON parser (parseExecuteBody): no
// panic, refusals are 400 or 422 only, and on plain JSON objects it agrees
// with encoding/json on the command (differential check).
func FuzzLegacyExecuteBody(f *testing.F) {
	for _, s := range []string{
		`{"command":"echo hi"}`, `{"command":"a","command":"b"}`, `{"command":5}`, `{"command":1e400}`, `{"command":true}`,
		`{"command":null}`, `{}`, `[["command","x"]]`, `["ab"]`, `{"command":"\ud800"}`, `{"command":"x"} x`, `{"command":NaN}`,
		`{"command":"x",}`, "\xef\xbb\xbf{\"command\":\"bom\"}", "\xff\xfe{\x00}\x00", strings.Repeat("[", 1000) + strings.Repeat("]", 1000),
		`{"command":` + strings.Repeat("9", 5000) + `}`, `{"command":"\u0000"}`, `{"Command":"x"}`, ``, ` `, `"x"`, `{"command":"x"`,
	} {
		f.Add(s, "application/json")
	}
	f.Add(`{"command":"x"}`, "text/plain")
	f.Add(`{"command":"x"}`, "application/vnd.api+json; charset=utf-8")
	f.Fuzz(func(t *testing.T, body, ctype string) {
		cmd, fail := parseExecuteBody(ctype, []byte(body))
		if fail != nil {
			if fail.status != http.StatusBadRequest && fail.status != http.StatusUnprocessableEntity {
				t.Fatalf("parseExecuteBody(%q) refused with %d", fzClip([]byte(body)), fail.status)
			}
			if _, err := json.Marshal(fail.detail); err != nil {
				t.Fatalf("the refusal detail does not encode: %v", err)
			}
			return
		}
		if !legacyIsJSON(ctype) {
			t.Fatalf("a %q body was accepted as JSON", ctype)
		}
		if !utf8.ValidString(body) || !json.Valid([]byte(body)) || strings.Contains(body, `\u`) {
			return // Python-only inputs (BOM, UTF-16, NaN, pairs, surrogates): no reference to compare with
		}
		if want, ok := fzLastCommand([]byte(body)); ok && want != cmd {
			t.Fatalf("body %q: parseExecuteBody's command %q; encoding/json reads %q", fzClip([]byte(body)), cmd, want)
		}
	})
}

func fzClip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
