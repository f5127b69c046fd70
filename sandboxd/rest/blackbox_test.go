package rest_test

// The black-box suite of sandboxd's REST surface, written from
// filesystem.yaml (upstream's spec) and api/sandboxd-rest.yaml (ours): real
// HTTP against the real binary, every response validated against our spec.
//
// By default it builds the daemon and starts it with SANDBOXD_REST_ADDR.
// With SANDBOXD_REST_BLACKBOX_URL (and SANDBOXD_REST_BLACKBOX_ROOT, the
// server's root directory, which the suite seeds directly: symlinks, a
// FIFO) it runs against any other server instead, e.g. upstream's sandboxd
// built from source; docs/sandboxd-rest.md has the recipe and both runs'
// results. That server must be started with the environment of
// blackboxEnv.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/sandbox-runtime/sandbox-runtime/internal/daemontest"
)

var binPath string

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	if os.Getenv("SANDBOXD_REST_BLACKBOX_URL") == "" {
		dir, err := os.MkdirTemp("", "sandboxd-rest-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if binPath, err = daemontest.Build(ctx, daemontest.BuildOptions{Dir: dir, Race: daemontest.RaceEnabled}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

// The token of the daemon under test, and the environment both servers
// must run with: /v1/metadata must serve the first variable only.
const blackboxToken = "tok-blackbox-4f1c9e"

var blackboxEnv = []string{
	"SANDBOX_VISIBLE_NOTE=hello",
	"SANDBOX_API_TOKEN=s3cret-by-name",
	"AWS_SECRET_ACCESS_KEY=s3cret-aws",
	"SANDBOX_WORKLOAD_ID=" + blackboxToken, // a secret by its value only
}

// target is the server under test.
type target struct {
	url, root string
	ours      bool
	spec      *openapi3.T
	client    *http.Client
}

func newTarget(t *testing.T) *target {
	tg := &target{spec: loadSpec(t), client: &http.Client{
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	if u := os.Getenv("SANDBOXD_REST_BLACKBOX_URL"); u != "" {
		tg.url, tg.root = strings.TrimSuffix(u, "/"), os.Getenv("SANDBOXD_REST_BLACKBOX_ROOT")
		if tg.root == "" {
			t.Fatal("SANDBOXD_REST_BLACKBOX_URL needs SANDBOXD_REST_BLACKBOX_ROOT, the server's root directory")
		}
		return tg
	}
	tmp := t.TempDir()
	tokenFile := filepath.Join(tmp, "token")
	if err := os.WriteFile(tokenFile, []byte(blackboxToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(tmp, "base")
	d := daemontest.StartT(t, daemontest.Options{
		Bin: binPath, BaseDir: base, CheckLeaks: true,
		Env: append([]string{"SANDBOXD_REST_ADDR=127.0.0.1:0", "SANDBOX_RUNTIME_TOKEN_FILE=" + tokenFile}, blackboxEnv...),
	})
	addr, _ := d.Listening["sandboxd_rest_addr"].(string)
	if addr == "" {
		t.Fatalf("the listening line has no sandboxd_rest_addr: %v", d.Listening)
	}
	tg.url, tg.root, tg.ours = "http://"+addr, base, true
	return tg
}

// loadSpec loads api/sandboxd-rest.yaml, validated, with every response
// object closed (additionalProperties: false): a field the spec does not
// describe fails the suite.
func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("../../api/sandboxd-rest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("api/sandboxd-rest.yaml is not a valid OpenAPI document: %v", err)
	}
	seen := map[*openapi3.Schema]bool{}
	var closeSchema func(s *openapi3.Schema)
	closeSchema = func(s *openapi3.Schema) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		if s.Type.Is("object") && s.AdditionalProperties.Schema == nil {
			no := false
			s.AdditionalProperties.Has = &no
		}
		for _, p := range s.Properties {
			closeSchema(p.Value)
		}
		if s.Items != nil {
			closeSchema(s.Items.Value)
		}
	}
	for _, sr := range doc.Components.Schemas {
		closeSchema(sr.Value)
	}
	return doc
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) errorCode() string {
	var e struct{ Code string }
	json.Unmarshal(r.body, &e)
	return e.Code
}

func (r resp) String() string {
	return fmt.Sprintf("%d %s %q", r.status, r.header.Get("Content-Type"), truncate(string(r.body), 300))
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// do sends one request (path is what follows the host, already encoded)
// and validates the answer against the spec.
func (tg *target) do(t *testing.T, method, path string, body []byte, contentType string) resp {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, tg.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := tg.client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return resp{}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	out := resp{res.StatusCode, res.Header, b}
	tg.validate(t, req, out)
	return out
}

// validate checks an answer against the spec's operation for it.
func (tg *target) validate(t *testing.T, req *http.Request, r resp) {
	t.Helper()
	p := req.URL.EscapedPath()
	specPath, params := "", map[string]string{}
	switch {
	case strings.HasPrefix(p, "/v1/files/"):
		specPath = "/v1/files/{path}"
		params["path"], _ = url.PathUnescape(p[len("/v1/files/"):])
	case p == "/v1/health" || p == "/v1/metadata":
		specPath = p
	default:
		return // outside the spec: the check itself says what it wants
	}
	item := tg.spec.Paths.Find(specPath)
	op := item.GetOperation(req.Method)
	if op == nil {
		t.Errorf("%s %s: no operation in the spec", req.Method, specPath)
		return
	}
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params,
		Route:   &routers.Route{Spec: tg.spec, Path: specPath, PathItem: item, Method: req.Method, Operation: op},
		Options: &openapi3filter.Options{IncludeResponseStatus: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	}
	rin := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: r.status, Header: r.header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	if req.Method == http.MethodHead {
		rin.Options.ExcludeResponseBody = true
	}
	rin.SetBodyBytes(r.body)
	if err := openapi3filter.ValidateResponse(context.Background(), rin); err != nil {
		t.Errorf("%s %s: the answer %v does not match api/sandboxd-rest.yaml: %v", req.Method, p, r, err)
	}
}

func files(p string) string { return "/v1/files/" + url.PathEscape(p) }

func (tg *target) want(t *testing.T, r resp, status int, code string) {
	t.Helper()
	if r.status != status || (code != "" && r.errorCode() != code) {
		t.Errorf("got %v; want %d %s", r, status, code)
	}
}

func (tg *target) put(t *testing.T, p, content string) {
	t.Helper()
	tg.want(t, tg.do(t, "PUT", files(p), []byte(content), "application/octet-stream"), 204, "")
}

func (tg *target) disk(p string) string { return filepath.Join(tg.root, filepath.FromSlash(p)) }

type listing struct {
	Path    string `json:"path"`
	Entries []struct {
		Name       string `json:"name"`
		Type       string `json:"type"`
		ModifiedAt string `json:"modified_at"`
		Mode       string `json:"mode"`
		Size       int64  `json:"size"`
	} `json:"entries"`
}

func (tg *target) list(t *testing.T, p string) (listing, resp) {
	t.Helper()
	r := tg.do(t, "GET", files(p), nil, "")
	var l listing
	if r.status == 200 {
		if err := json.Unmarshal(r.body, &l); err != nil {
			t.Errorf("listing of %q: %v in %v", p, err, r)
		}
	}
	return l, r
}

func (l listing) names() []string {
	var out []string
	for _, e := range l.Entries {
		out = append(out, e.Name)
	}
	return out
}

// TestBlackBox runs every check, one subtest each (their names are the
// rows of docs/sandboxd-rest.md's side-by-side table).
func TestBlackBox(t *testing.T) {
	tg := newTarget(t)
	for _, c := range blackboxChecks {
		t.Run(c.name, func(t *testing.T) { c.run(t, tg) })
	}
}

type check struct {
	name string
	run  func(t *testing.T, tg *target)
}

var blackboxChecks = []check{
	{"health", func(t *testing.T, tg *target) {
		r := tg.do(t, "GET", "/v1/health", nil, "")
		var h map[string]any
		json.Unmarshal(r.body, &h)
		if _, ok := h["uptime_seconds"].(float64); r.status != 200 || h["status"] != "ok" || !ok {
			t.Errorf("got %v; want 200 {status: ok, uptime_seconds}", r)
		}
	}},
	{"metadata_prefix_and_secrets", func(t *testing.T, tg *target) {
		r := tg.do(t, "GET", "/v1/metadata", nil, "")
		var m struct{ Env map[string]string }
		json.Unmarshal(r.body, &m)
		if r.status != 200 || m.Env["SANDBOX_VISIBLE_NOTE"] != "hello" {
			t.Errorf("got %v; want 200 with SANDBOX_VISIBLE_NOTE=hello", r)
		}
		for _, secret := range []string{"s3cret", blackboxToken} {
			if bytes.Contains(r.body, []byte(secret)) {
				t.Errorf("/v1/metadata serves a secret (%q): %s", secret, r.body)
			}
		}
		for k := range m.Env {
			if !strings.HasPrefix(k, "SANDBOX_") {
				t.Errorf("/v1/metadata serves %s, outside the prefix", k)
			}
		}
	}},
	{"put_raw_then_get", func(t *testing.T, tg *target) {
		tg.put(t, "hello.txt", "hi there\n")
		r := tg.do(t, "GET", files("hello.txt"), nil, "")
		if r.status != 200 || string(r.body) != "hi there\n" || r.header.Get("Content-Type") != "application/octet-stream" {
			t.Errorf("got %v; want 200 application/octet-stream %q", r, "hi there\n")
		}
	}},
	{"put_replaces", func(t *testing.T, tg *target) {
		tg.put(t, "twice.txt", "first, longer content")
		tg.put(t, "twice.txt", "second")
		if b, _ := os.ReadFile(tg.disk("twice.txt")); string(b) != "second" {
			t.Errorf("after two PUTs the file holds %q", b)
		}
	}},
	{"put_creates_parents", func(t *testing.T, tg *target) {
		tg.put(t, "p1/p2/p3/deep.txt", "deep")
		if b, _ := os.ReadFile(tg.disk("p1/p2/p3/deep.txt")); string(b) != "deep" {
			t.Errorf("the file holds %q", b)
		}
	}},
	{"put_mode", func(t *testing.T, tg *target) {
		tg.want(t, tg.do(t, "PUT", files("run.sh")+"?mode=0750", []byte("#!/bin/sh\n"), "application/octet-stream"), 204, "")
		if fi, err := os.Stat(tg.disk("run.sh")); err != nil || fi.Mode().Perm() != 0o750 {
			t.Errorf("mode on disk: %v %v; want 0750", fi.Mode(), err)
		}
		l, _ := tg.list(t, "")
		for _, e := range l.Entries {
			if e.Name == "run.sh" && e.Mode != "0750" {
				t.Errorf("listing mode %q; want 0750", e.Mode)
			}
		}
	}},
	{"put_mode_default_0644_on_replace", func(t *testing.T, tg *target) {
		tg.put(t, "private.txt", "x")
		os.Chmod(tg.disk("private.txt"), 0o600)
		tg.put(t, "private.txt", "y")
		if fi, err := os.Stat(tg.disk("private.txt")); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("mode on disk: %v %v; want 0644 (the spec's default)", fi.Mode(), err)
		}
	}},
	{"put_mode_invalid", func(t *testing.T, tg *target) {
		for _, m := range []string{"755", "0888", "01777", "rwx", "0o644"} {
			tg.want(t, tg.do(t, "PUT", files("badmode.txt")+"?mode="+url.QueryEscape(m), []byte("x"), "application/octet-stream"), 400, "INVALID_ARGUMENT")
		}
		if _, err := os.Lstat(tg.disk("badmode.txt")); err == nil {
			t.Errorf("a PUT with a bad mode wrote the file")
		}
	}},
	{"put_multipart", func(t *testing.T, tg *target) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		mw.WriteField("note", "ignored")
		fw, _ := mw.CreateFormFile("file", "whatever.bin")
		fw.Write([]byte("from a form\x00\xff"))
		mw.Close()
		tg.want(t, tg.do(t, "PUT", files("form.bin"), b.Bytes(), mw.FormDataContentType()), 204, "")
		if got, _ := os.ReadFile(tg.disk("form.bin")); string(got) != "from a form\x00\xff" {
			t.Errorf("the file holds %q", got)
		}
	}},
	{"put_multipart_without_file", func(t *testing.T, tg *target) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		mw.WriteField("other", "x")
		mw.Close()
		tg.want(t, tg.do(t, "PUT", files("noform.bin"), b.Bytes(), mw.FormDataContentType()), 400, "INVALID_ARGUMENT")
	}},
	{"put_to_directory", func(t *testing.T, tg *target) {
		os.MkdirAll(tg.disk("adir"), 0o755)
		tg.want(t, tg.do(t, "PUT", files("adir"), []byte("x"), "application/octet-stream"), 400, "INVALID_ARGUMENT")
		tg.want(t, tg.do(t, "PUT", "/v1/files/", []byte("x"), "application/octet-stream"), 400, "INVALID_ARGUMENT")
	}},
	{"put_parent_is_file", func(t *testing.T, tg *target) {
		tg.put(t, "plain.txt", "x")
		tg.want(t, tg.do(t, "PUT", files("plain.txt/child"), []byte("x"), "application/octet-stream"), 400, "INVALID_ARGUMENT")
	}},
	{"get_missing", func(t *testing.T, tg *target) {
		tg.want(t, tg.do(t, "GET", files("no/such/file"), nil, ""), 404, "NOT_FOUND")
	}},
	{"head_exists_and_missing", func(t *testing.T, tg *target) {
		tg.put(t, "head.txt", "12345")
		r := tg.do(t, "HEAD", files("head.txt"), nil, "")
		if r.status != 200 || len(r.body) != 0 || r.header.Get("Content-Length") != "5" {
			t.Errorf("HEAD of a file: %v, Content-Length %q; want 200, 5, no body", r, r.header.Get("Content-Length"))
		}
		tg.want(t, tg.do(t, "HEAD", files("head-missing.txt"), nil, ""), 404, "")
		os.MkdirAll(tg.disk("headdir"), 0o755)
		tg.want(t, tg.do(t, "HEAD", files("headdir"), nil, ""), 200, "")
	}},
	{"listing_shape_sorted", func(t *testing.T, tg *target) {
		os.MkdirAll(tg.disk("ls/sub"), 0o755)
		os.WriteFile(tg.disk("ls/b.txt"), []byte("bb"), 0o640)
		os.WriteFile(tg.disk("ls/a.txt"), []byte("a"), 0o644)
		l, r := tg.list(t, "ls")
		if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
			t.Fatalf("got %v", r)
		}
		if l.Path != "/ls" || !slices.Equal(l.names(), []string{"a.txt", "b.txt", "sub"}) {
			t.Errorf("listing %+v; want path /ls, entries a.txt b.txt sub", l)
		}
		for _, e := range l.Entries {
			if _, err := time.Parse(time.RFC3339, e.ModifiedAt); err != nil {
				t.Errorf("%s: modified_at %q is not RFC 3339", e.Name, e.ModifiedAt)
			}
			want := map[string]string{"a.txt": "file 1 0644", "b.txt": "file 2 0640", "sub": "directory"}[e.Name]
			got := e.Type + " " + fmt.Sprint(e.Size) + " " + e.Mode
			if e.Type == "directory" {
				got = e.Type
			}
			if got != want {
				t.Errorf("%s: %q; want %q", e.Name, got, want)
			}
		}
	}},
	{"listing_root_and_empty", func(t *testing.T, tg *target) {
		l, r := tg.list(t, "")
		if r.status != 200 || l.Path != "/" {
			t.Errorf("root listing: %v; want 200 path /", r)
		}
		os.MkdirAll(tg.disk("empty"), 0o755)
		_, r = tg.list(t, "empty")
		if r.status != 200 || !bytes.Contains(r.body, []byte(`"entries":[]`)) {
			t.Errorf("empty directory: %v; want entries []", r)
		}
	}},
	{"traversal_encoded_403", func(t *testing.T, tg *target) {
		tg.want(t, tg.do(t, "GET", files("../../../../etc/passwd"), nil, ""), 403, "PERMISSION_DENIED")
		tg.want(t, tg.do(t, "PUT", files("a/../../escape.txt"), []byte("x"), "application/octet-stream"), 403, "PERMISSION_DENIED")
		tg.want(t, tg.do(t, "DELETE", files(".."), nil, ""), 403, "PERMISSION_DENIED")
	}},
	{"traversal_raw_403_no_redirect", func(t *testing.T, tg *target) {
		tg.want(t, tg.do(t, "GET", "/v1/files/../../../etc/passwd", nil, ""), 403, "PERMISSION_DENIED")
	}},
	{"absolute_path_rerooted", func(t *testing.T, tg *target) {
		name := fmt.Sprintf("/etc/sandboxd-blackbox-%d.txt", time.Now().UnixNano())
		defer os.Remove(name) // were it written outside the root
		tg.put(t, name, "rerooted")
		if _, err := os.Lstat(name); err == nil {
			t.Errorf("%s was written outside the root", name)
		}
		if b, _ := os.ReadFile(tg.disk(name)); string(b) != "rerooted" {
			t.Errorf("<root>%s holds %q", name, b)
		}
	}},
	{"absolute_path_under_root", func(t *testing.T, tg *target) {
		tg.put(t, "abs.txt", "abs")
		root, _ := filepath.Abs(tg.root)
		r := tg.do(t, "GET", files(filepath.Join(root, "abs.txt")), nil, "")
		if r.status != 200 || string(r.body) != "abs" {
			t.Errorf("GET by the absolute path under the root: %v", r)
		}
	}},
	{"symlink_out_403_and_unlisted", func(t *testing.T, tg *target) {
		outside := t.TempDir()
		os.WriteFile(filepath.Join(outside, "secret"), []byte("outside"), 0o644)
		os.MkdirAll(tg.disk("sl"), 0o755)
		if err := os.Symlink(outside, tg.disk("sl/out")); err != nil {
			t.Fatal(err)
		}
		tg.want(t, tg.do(t, "GET", files("sl/out/secret"), nil, ""), 403, "PERMISSION_DENIED")
		tg.want(t, tg.do(t, "PUT", files("sl/out/planted"), []byte("x"), "application/octet-stream"), 403, "PERMISSION_DENIED")
		if _, err := os.Lstat(filepath.Join(outside, "planted")); err == nil {
			t.Errorf("a PUT through the symlink wrote outside the root")
		}
		if l, _ := tg.list(t, "sl"); slices.Contains(l.names(), "out") {
			t.Errorf("the listing shows a symlink leading out: %v", l.names())
		}
	}},
	{"symlink_inside_listed_as_target", func(t *testing.T, tg *target) {
		os.MkdirAll(tg.disk("sin/real"), 0o755)
		os.Symlink("real", tg.disk("sin/link"))
		l, _ := tg.list(t, "sin")
		for _, e := range l.Entries {
			if e.Name == "link" && e.Type != "directory" {
				t.Errorf("a symlink to a directory is listed as %q", e.Type)
			}
		}
		if !slices.Contains(l.names(), "link") {
			t.Errorf("the symlink inside is not listed: %v", l.names())
		}
	}},
	{"delete_symlink_out_keeps_target", func(t *testing.T, tg *target) {
		outside := t.TempDir()
		os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o644)
		os.Symlink(outside, tg.disk("dl-out"))
		r := tg.do(t, "DELETE", files("dl-out")+"?recursive=true", nil, "")
		if r.status != 204 && r.status != 403 {
			t.Errorf("got %v; want 204 (the link removed) or 403", r)
		}
		if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
			t.Errorf("deleting the symlink removed its target's content: %v", err)
		}
	}},
	{"get_fifo_no_hang", func(t *testing.T, tg *target) {
		if err := syscall.Mkfifo(tg.disk("fifo"), 0o644); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		r := tg.do(t, "GET", files("fifo"), nil, "")
		if r.status != 400 {
			t.Errorf("got %v; want 400 at once (a FIFO is not a file to read)", r)
		}
	}},
	{"delete_file", func(t *testing.T, tg *target) {
		tg.put(t, "gone.txt", "x")
		tg.want(t, tg.do(t, "DELETE", files("gone.txt"), nil, ""), 204, "")
		tg.want(t, tg.do(t, "DELETE", files("gone.txt"), nil, ""), 404, "NOT_FOUND")
	}},
	{"delete_dir_recursive", func(t *testing.T, tg *target) {
		tg.put(t, "tree/x/y.txt", "y")
		tg.want(t, tg.do(t, "DELETE", files("tree"), nil, ""), 409, "CONFLICT")
		tg.want(t, tg.do(t, "DELETE", files("tree")+"?recursive=false", nil, ""), 409, "CONFLICT")
		tg.want(t, tg.do(t, "DELETE", files("tree")+"?recursive=true", nil, ""), 204, "")
		if _, err := os.Lstat(tg.disk("tree")); err == nil {
			t.Errorf("the tree is still there")
		}
		os.MkdirAll(tg.disk("emptydir"), 0o755)
		tg.want(t, tg.do(t, "DELETE", files("emptydir"), nil, ""), 204, "")
	}},
	{"delete_recursive_invalid", func(t *testing.T, tg *target) {
		tg.put(t, "keep.txt", "x")
		tg.want(t, tg.do(t, "DELETE", files("keep.txt")+"?recursive=maybe", nil, ""), 400, "INVALID_ARGUMENT")
	}},
	{"unknown_route_json_404", func(t *testing.T, tg *target) {
		r := tg.do(t, "GET", "/v1/nothing", nil, "")
		if r.status != 404 || r.errorCode() != "NOT_FOUND" {
			t.Errorf("got %v; want 404 with the error body", r)
		}
	}},
	// Last: it empties the root.
	{"delete_root", func(t *testing.T, tg *target) {
		tg.want(t, tg.do(t, "DELETE", "/v1/files/", nil, ""), 409, "CONFLICT")
		tg.want(t, tg.do(t, "DELETE", "/v1/files/?recursive=true", nil, ""), 204, "")
		ents, err := os.ReadDir(tg.root)
		if err != nil || len(ents) != 0 {
			t.Errorf("after the recursive delete of the root: %v %v; want it there and empty", ents, err)
		}
	}},
}

// startOurs starts our daemon with env (the sandboxd REST listener among
// it) and returns it with that listener's URL. Against another server
// (SANDBOXD_REST_BLACKBOX_URL) the test is skipped: it is about our
// daemon's own settings.
func startOurs(t *testing.T, env ...string) (*daemontest.Daemon, string) {
	t.Helper()
	if os.Getenv("SANDBOXD_REST_BLACKBOX_URL") != "" {
		t.Skip("SANDBOXD_REST_BLACKBOX_URL names another server; this test starts our daemon with settings of its own")
	}
	d := daemontest.StartT(t, daemontest.Options{Bin: binPath, BaseDir: filepath.Join(t.TempDir(), "base"), CheckLeaks: true, Env: env})
	addr, _ := d.Listening["sandboxd_rest_addr"].(string)
	if addr == "" {
		t.Fatalf("the listening line has no sandboxd_rest_addr: %v", d.Listening)
	}
	_, port, _ := strings.Cut(addr, "]:")
	if port == "" {
		_, port, _ = strings.Cut(addr, ":")
	}
	return d, "http://127.0.0.1:" + port
}

func get(t *testing.T, u string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{Timeout: 10 * time.Second}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestAuthRule: on loopback the listener asks no token, even when the
// daemon has one (sandboxd's SDK sends none); on any other address every
// request needs it, /v1/health included.
func TestAuthRule(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("auth-rule-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("loopback", func(t *testing.T) {
		_, u := startOurs(t, "SANDBOXD_REST_ADDR=127.0.0.1:0", "SANDBOX_RUNTIME_TOKEN_FILE="+tok)
		for _, p := range []string{"/v1/health", "/v1/metadata", "/v1/files/"} {
			if code, body := get(t, u+p); code != 200 {
				t.Errorf("GET %s without a token on loopback: %d %s; want 200", p, code, body)
			}
		}
	})
	t.Run("every interface", func(t *testing.T) {
		// Bound on every interface, spoken to on 127.0.0.1 only.
		_, u := startOurs(t, "SANDBOXD_REST_ADDR=0.0.0.0:0", "SANDBOX_RUNTIME_TOKEN_FILE="+tok)
		for _, p := range []string{"/v1/health", "/v1/metadata", "/v1/files/"} {
			code, body := get(t, u+p)
			if code != 401 || !strings.Contains(body, `"code":"UNAUTHENTICATED"`) {
				t.Errorf("GET %s without a token: %d %s; want 401 UNAUTHENTICATED", p, code, body)
			}
			if code, body := get(t, u+p, "Authorization", "Bearer wrong"); code != 401 {
				t.Errorf("GET %s with a wrong token: %d %s; want 401", p, code, body)
			}
			if code, body := get(t, u+p, "Authorization", "Bearer auth-rule-token"); code != 200 {
				t.Errorf("GET %s with the token: %d %s; want 200", p, code, body)
			}
		}
	})
}

// TestRefusesExposedWithoutToken: the daemon does not start with the
// listener beyond loopback and no token file, and says which settings.
func TestRefusesExposedWithoutToken(t *testing.T) {
	if os.Getenv("SANDBOXD_REST_BLACKBOX_URL") != "" {
		t.Skip("SANDBOXD_REST_BLACKBOX_URL names another server; this test starts our daemon with settings of its own")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath)
	cmd.Env = append(daemontest.CleanEnv(), "SANDBOX_BASE_DIR="+t.TempDir(), "SANDBOXD_REST_ADDR=0.0.0.0:0")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "SANDBOXD_REST_ADDR") || !strings.Contains(string(out), "SANDBOX_RUNTIME_TOKEN_FILE") {
		t.Errorf("exit %v, output %q; want exit 2 naming SANDBOXD_REST_ADDR and SANDBOX_RUNTIME_TOKEN_FILE", err, out)
	}
}

// TestOriginRefused: a browser page of another site is refused, as on the
// main port.
func TestOriginRefused(t *testing.T) {
	_, u := startOurs(t, "SANDBOXD_REST_ADDR=127.0.0.1:0")
	code, body := get(t, u+"/v1/files/", "Origin", "http://evil.example")
	if code != 403 || !strings.Contains(body, `"code":"PERMISSION_DENIED"`) {
		t.Errorf("a foreign Origin: %d %s; want 403 PERMISSION_DENIED", code, body)
	}
}

// TestHealthDrains: from the first moment of a graceful shutdown
// /v1/health answers 503 UNAVAILABLE. A command that ignores SIGTERM holds
// the shutdown open for the kill grace (3 s), and the listener is still
// serving then; the daemon then ends it and exits by itself.
func TestHealthDrains(t *testing.T) {
	d, u := startOurs(t, "SANDBOXD_REST_ADDR=127.0.0.1:0", "SANDBOX_KILL_GRACE_SECONDS=3")
	body := `{"argv":["sh","-c","trap '' TERM; echo ready; while :; do sleep 1; done"],"timeout":120}`
	res, err := http.Post(d.URL+"/v1/commands", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 201 && res.StatusCode != 200 {
		t.Fatalf("starting the command: %d %s", res.StatusCode, b)
	}
	var cmd struct {
		ID string `json:"command_id"`
	}
	json.Unmarshal(b, &cmd)
	// Wait until the shell has set its trap (its first line is out).
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, out := get(t, d.URL+"/v1/commands/"+cmd.ID+"/output")
		if strings.Contains(out, "ready") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command never printed ready: %s", out)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with a bound
	}
	if code, body := get(t, u+"/v1/health"); code != 200 {
		t.Fatalf("health before the shutdown: %d %s", code, body)
	}
	if err := d.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(15 * time.Second)
	for {
		code, body := get(t, u+"/v1/health")
		if code == 503 {
			if !strings.Contains(body, `"code":"UNAVAILABLE"`) {
				t.Errorf("503 body %s; want code UNAVAILABLE", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health still %d %s 15 s after SIGTERM", code, body)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with a bound
	}
	if code, ok := d.Wait(30 * time.Second); !ok || code != 0 {
		t.Errorf("the daemon's exit after SIGTERM: code %d, exited %v; want 0", code, ok)
	}
}

// TestInfoFeature: /v1/info on the main port lists sandboxd_rest while the
// listener is on, and only then.
func TestInfoFeature(t *testing.T) {
	features := func(d *daemontest.Daemon) []string {
		t.Helper()
		_, body := get(t, d.URL+"/v1/info")
		var info struct{ Features []string }
		if err := json.Unmarshal([]byte(body), &info); err != nil {
			t.Fatalf("/v1/info: %v %s", err, body)
		}
		return info.Features
	}
	on, _ := startOurs(t, "SANDBOXD_REST_ADDR=127.0.0.1:0")
	if f := features(on); !slices.Contains(f, "sandboxd_rest") {
		t.Errorf("with SANDBOXD_REST_ADDR the features are %v; want sandboxd_rest among them", f)
	}
	off := daemontest.StartT(t, daemontest.Options{Bin: binPath, BaseDir: filepath.Join(t.TempDir(), "base")})
	if f := features(off); slices.Contains(f, "sandboxd_rest") {
		t.Errorf("without SANDBOXD_REST_ADDR the features are %v", f)
	}
	// The listening line always has both sandboxd addresses, "" when off.
	if a, ok := off.Listening["sandboxd_rest_addr"]; !ok || a != "" {
		t.Errorf("without SANDBOXD_REST_ADDR the listening line has sandboxd_rest_addr %q (present: %v); want \"\": %v", a, ok, off.Listening)
	}
	if a, ok := on.Listening["sandboxd_rest_addr"].(string); !ok || a == "" {
		t.Errorf("with SANDBOXD_REST_ADDR the listening line has no sandboxd_rest_addr: %v", on.Listening)
	}
}

// TestHealthUptime: /v1/health's uptime_seconds is whole seconds (an
// integer, as upstream's int64) counted from the daemon's start: never more
// than the time since the test started it, and it grows with the clock.
func TestHealthUptime(t *testing.T) {
	t0 := time.Now()
	_, u := startOurs(t, "SANDBOXD_REST_ADDR=127.0.0.1:0")
	uptime := func() int64 {
		t.Helper()
		code, body := get(t, u+"/v1/health")
		dec := json.NewDecoder(strings.NewReader(body))
		dec.UseNumber()
		var h struct {
			Status string      `json:"status"`
			Uptime json.Number `json:"uptime_seconds"`
		}
		if err := dec.Decode(&h); err != nil || code != 200 || h.Status != "ok" {
			t.Fatalf("/v1/health: %d %s (%v)", code, body, err)
		}
		n, err := h.Uptime.Int64()
		if err != nil || n < 0 {
			t.Fatalf("uptime_seconds %q is not a whole number of seconds >= 0", h.Uptime)
		}
		if max := int64(time.Since(t0).Seconds()); n > max {
			t.Fatalf("uptime_seconds %d, but the daemon was started %d s ago at most", n, max)
		}
		return n
	}
	first := uptime()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n := uptime(); n > first {
			if time.Since(t0) < time.Second {
				t.Errorf("uptime_seconds went from %d to %d within %v of the start", first, n, time.Since(t0))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("uptime_seconds still %d after 10 s", first)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a bound
	}
}
