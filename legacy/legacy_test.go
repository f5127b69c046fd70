package legacy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/api"
	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// The replay test: every case of testdata/legacy/recorded.jsonl (the legacy
// Python runtime's recorded answers) is sent verbatim to a fresh server and
// compared as testdata/legacy/README.md describes.

// legacyCorpus is relative to the api package directory. It is part of the
// repository: a missing or short corpus fails the test, never skips it.
const legacyCorpus = "../testdata/legacy/recorded.jsonl"

// legacyCorpusCases is the number of cases recorded in legacyCorpus.
const legacyCorpusCases = 148

type replayCase struct {
	Name     string         `json:"name"`
	Setup    []replaySetup  `json:"setup"`
	Request  replayRequest  `json:"request"`
	Response replayResponse `json:"response"`
	// Normalize lists the comparison rules for values that vary.
	Normalize     []string        `json:"normalize"`
	BaseDir       string          `json:"base_dir"`
	BaseDirInBody bool            `json:"base_dir_in_body"`
	FSAfter       json.RawMessage `json:"fs_after"`
	Lenient       string          `json:"lenient"`
	Deviation     string          `json:"deviation"`
}

type replaySetup struct {
	Dir     string `json:"dir,omitempty"`
	Path    string `json:"path,omitempty"`
	Content string `json:"content_b64,omitempty"`
	Mode    string `json:"mode,omitempty"`
	MtimeNs int64  `json:"mtime_ns,omitempty"`
	Symlink string `json:"symlink,omitempty"`
	Target  string `json:"target,omitempty"`
}

type replayRequest struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body_b64"`
}

type replayResponse struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body_b64"`
	JSON    json.RawMessage   `json:"json"`
}

// replayResult is what the server answered.
type replayResult struct {
	status int
	header http.Header
	body   []byte
}

func (r *replayResult) json() (any, error) { return decodeJSONNumbers(r.body) }

func decodeJSONNumbers(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// replayLocalDeviations are differences the corpus does not mark but the
// contract requires.
var replayLocalDeviations = map[string]string{
	"route-not-found-v1": "the corpus pins the legacy 404 for /v1/health, but protocol.md §3 serves GET /v1/health: expect 200 {\"status\":\"ok\"}",
}

func loadLegacyCorpus(t *testing.T) []replayCase {
	t.Helper()
	data, err := os.ReadFile(legacyCorpus)
	if err != nil {
		t.Fatalf("the legacy corpus is part of the repository: %v", err)
	}
	var cases []replayCase
	for i, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var c replayCase
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatalf("corpus line %d: %v", i+1, err)
		}
		cases = append(cases, c)
	}
	return cases
}

func TestLegacyReplay(t *testing.T) {
	cases := loadLegacyCorpus(t)
	if len(cases) != legacyCorpusCases {
		t.Fatalf("corpus has %d cases; want %d", len(cases), legacyCorpusCases)
	}
	var mu sync.Mutex
	counts := map[string]int{}
	var fails []string
	t.Cleanup(func() { // after every parallel subtest
		t.Logf("replayed %d cases: passed=%d deviation-as-expected=%d lenient=%d failed=%d %v",
			counts["pass"]+counts["deviation"]+counts["lenient"]+counts["fail"], counts["pass"], counts["deviation"], counts["lenient"], counts["fail"], fails)
	})
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			verdict := replayOne(t, c)
			mu.Lock()
			counts[verdict]++
			if verdict == "fail" {
				fails = append(fails, c.Name)
			}
			mu.Unlock()
		})
	}
}

// replayOne runs one case and returns pass, deviation, lenient or fail.
func replayOne(t *testing.T, c replayCase) string {
	var base string
	ts := newTestServer(t, func(cfg *runtime.Config, o *api.Options) {
		real, err := filepath.EvalSymlinks(cfg.BaseDir)
		if err != nil {
			t.Fatal(err)
		}
		base = real
		cfg.BaseDir, o.BaseDir = real, real
		cfg.MaxTimeout = 3 * time.Second // SANDBOX_EXEC_TIMEOUT_SECONDS=3, as recorded
	})
	replayApplySetup(t, base, c.Setup)
	start := time.Now()
	got := replaySend(t, ts.URL, c.Request)
	elapsed := time.Since(start)

	if dev := c.Deviation + replayLocalDeviations[c.Name]; dev != "" {
		check, ok := replayDeviationChecks[c.Name]
		if !ok {
			t.Fatalf("no check written for deviation %q", dev)
		}
		if diffs := check(base, got); len(diffs) > 0 {
			t.Errorf("deviation %q not as expected:\n  %s", dev, strings.Join(diffs, "\n  "))
			return "fail"
		}
		return "deviation"
	}
	diffs := replayCompare(c, base, got)
	if strings.HasPrefix(c.Name, "execute-timeout") && elapsed < 3*time.Second {
		diffs = append(diffs, fmt.Sprintf("answered after %v; the timeout is 3 s", elapsed))
	}
	if len(diffs) == 0 {
		return "pass"
	}
	if c.Lenient != "" {
		check := replayLenientChecks[c.Name]
		if check == nil {
			t.Fatalf("no check written for lenient case %q", c.Lenient)
		}
		ldiffs := check(c, base, got)
		if len(ldiffs) == 0 {
			t.Logf("lenient (%s): %s", c.Lenient, strings.Join(diffs, "; "))
			return "lenient"
		}
		diffs = append(diffs, ldiffs...)
	}
	t.Errorf("%s %s:\n  %s", c.Request.Method, c.Request.Path, strings.Join(diffs, "\n  "))
	return "fail"
}

// replayApplySetup creates the entries, then pins modes and times (record.py's
// apply_setup).
func replayApplySetup(t *testing.T, base string, setup []replaySetup) {
	t.Helper()
	for _, e := range setup {
		var err error
		switch {
		case e.Dir != "":
			err = os.MkdirAll(filepath.Join(base, e.Dir), 0o755)
		case e.Path != "":
			p := filepath.Join(base, e.Path)
			data, derr := base64.StdEncoding.DecodeString(e.Content)
			if derr != nil {
				t.Fatal(derr)
			}
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				err = os.WriteFile(p, data, 0o644)
			}
		case e.Symlink != "":
			p := filepath.Join(base, e.Symlink)
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				err = os.Symlink(strings.ReplaceAll(e.Target, "{BASE}", base), p)
			}
		default:
			t.Fatalf("bad setup entry %+v", e)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range setup {
		rel := e.Dir + e.Path
		if rel == "" {
			continue
		}
		p := filepath.Join(base, rel)
		if e.Mode != "" {
			var mode uint32
			fmt.Sscanf(e.Mode, "%o", &mode)
			if err := os.Chmod(p, fs.FileMode(mode)); err != nil {
				t.Fatal(err)
			}
		}
		if e.MtimeNs != 0 {
			ts := time.Unix(0, e.MtimeNs)
			if err := os.Chtimes(p, ts, ts); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// replaySend writes the request target verbatim on a TCP connection, so that
// nothing re-encodes or cleans it.
func replaySend(t *testing.T, serverURL string, req replayRequest) *replayResult {
	t.Helper()
	u, _ := url.Parse(serverURL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	body, err := base64.StdEncoding.DecodeString(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", req.Method, req.Path, u.Host)
	for k, v := range req.Headers {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("Connection: close\r\n\r\n")
	b.Write(body)
	if _, err := conn.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: req.Method})
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return &replayResult{status: resp.StatusCode, header: resp.Header, body: data}
}

var replayHeaders = []string{"content-type", "content-disposition", "allow", "location"}

// replayCompare is replay.py's compare: the differences from the recording.
func replayCompare(c replayCase, base string, got *replayResult) []string {
	var diffs []string
	want, _ := base64.StdEncoding.DecodeString(c.Response.Body)
	if c.BaseDirInBody {
		want = bytes.ReplaceAll(want, []byte(c.BaseDir), []byte(base))
	}
	if got.status != c.Response.Status {
		diffs = append(diffs, fmt.Sprintf("status %d; want %d", got.status, c.Response.Status))
	}
	presenceOnly := map[string]bool{}
	var bodyRules []string
	for _, r := range c.Normalize {
		if h, ok := strings.CutPrefix(r, "header:"); ok {
			presenceOnly[h] = true
		} else {
			bodyRules = append(bodyRules, r)
		}
	}
	for _, h := range replayHeaders {
		wantV, wantOK := c.Response.Headers[h]
		gotV, gotOK := got.header.Get(h), len(got.header.Values(h)) > 0
		if presenceOnly[h] {
			if wantOK != gotOK {
				diffs = append(diffs, fmt.Sprintf("header %s present=%v; want %v", h, gotOK, wantOK))
			}
			continue
		}
		if wantOK != gotOK || wantV != gotV {
			diffs = append(diffs, fmt.Sprintf("header %s %q (present=%v); want %q (present=%v)", h, gotV, gotOK, wantV, wantOK))
		}
	}
	isJSON := len(c.Response.JSON) > 0 && string(c.Response.JSON) != "null"
	gotCL := got.header.Get("Content-Length")
	if c.Request.Method == "HEAD" {
		if gotCL != c.Response.Headers["content-length"] {
			diffs = append(diffs, fmt.Sprintf("content-length %q; want %q", gotCL, c.Response.Headers["content-length"]))
		}
	} else if gotCL != "" && !isJSON && gotCL != fmt.Sprint(len(want)) {
		diffs = append(diffs, fmt.Sprintf("content-length %s; want %d", gotCL, len(want)))
	}
	if isJSON {
		g, err := got.json()
		w, werr := decodeJSONNumbers(want)
		switch {
		case werr != nil:
			diffs = append(diffs, "recorded body is not JSON: "+werr.Error())
		case err != nil:
			diffs = append(diffs, fmt.Sprintf("body is not JSON (%v): %q", err, replayClip(got.body)))
		default:
			g, w = replayNormalize(g, bodyRules), replayNormalize(w, bodyRules)
			if !reflect.DeepEqual(g, w) {
				diffs = append(diffs, fmt.Sprintf("json %s; want %s", replayClip(replayJSON(g)), replayClip(replayJSON(w))))
			} else if len(bodyRules) == 0 && !bytes.Equal(bytes.TrimSpace(got.body), bytes.TrimSpace(want)) && !replayEscapesOnly(got.body, want) {
				// Equal as JSON but not as bytes (key order, number
				// spelling): an old SDK that compares text would notice.
				diffs = append(diffs, fmt.Sprintf("body bytes %q; want %q (equal as JSON)", replayClip(got.body), replayClip(want)))
			}
		}
	} else if !bytes.Equal(got.body, want) {
		diffs = append(diffs, fmt.Sprintf("body %q; want %q", replayClip(got.body), replayClip(want)))
	}
	if len(c.FSAfter) > 0 {
		if d := replayCompareFS(base, c.FSAfter); d != "" {
			diffs = append(diffs, d)
		}
	}
	return diffs
}

func replayClip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

func replayJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// replayNormalize applies the README's body rules: "unordered:$:key" and
// masks such as "[?type=directory].size" (root arrays only, as used).
func replayNormalize(v any, rules []string) any {
	for _, r := range rules {
		if rest, ok := strings.CutPrefix(r, "unordered:"); ok {
			path, key, _ := strings.Cut(rest, ":")
			arr, isArr := v.([]any)
			if (path == "$" || path == "") && isArr {
				sort.SliceStable(arr, func(i, j int) bool {
					return fmt.Sprint(replayField(arr[i], key)) < fmt.Sprint(replayField(arr[j], key))
				})
			}
			continue
		}
		r = strings.TrimPrefix(r, "$")
		arr, isArr := v.([]any)
		if !isArr {
			continue
		}
		var fk, fv, key string
		if n, _ := fmt.Sscanf(strings.NewReplacer("[?", "", "=", " ", "].", " ").Replace(r), "%s %s %s", &fk, &fv, &key); n == 3 {
			for _, el := range arr {
				if m, ok := el.(map[string]any); ok && fmt.Sprint(m[fk]) == fv {
					if _, has := m[key]; has {
						m[key] = "<normalized>"
					}
				}
			}
		} else if k, ok := strings.CutPrefix(r, "[*]."); ok {
			for _, el := range arr {
				if m, ok := el.(map[string]any); ok {
					if _, has := m[k]; has {
						m[k] = "<normalized>"
					}
				}
			}
		}
	}
	return v
}

func replayField(v any, key string) any {
	if m, ok := v.(map[string]any); ok {
		return m[key]
	}
	return v
}

// replayCompareFS compares the tree under base with fs_after (record.py's snapshot).
func replayCompareFS(base string, wantRaw json.RawMessage) string {
	var want, got []map[string]string
	if err := json.Unmarshal(wantRaw, &want); err != nil {
		return "fs_after: " + err.Error()
	}
	got = []map[string]string{}
	if want == nil {
		want = []map[string]string{}
	}
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == base {
			return err
		}
		rel, _ := filepath.Rel(base, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			got = append(got, map[string]string{"symlink": rel, "target": target})
		case d.IsDir():
			got = append(got, map[string]string{"dir": rel})
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			got = append(got, map[string]string{"path": rel, "content_b64": base64.StdEncoding.EncodeToString(data)})
		}
		return nil
	})
	if err != nil {
		return "fs_after walk: " + err.Error()
	}
	key := func(m map[string]string) string { return m["dir"] + m["path"] + m["symlink"] }
	sort.Slice(got, func(i, j int) bool { return key(got[i]) < key(got[j]) })
	if !reflect.DeepEqual(got, want) {
		return fmt.Sprintf("fs_after %s; want %s", replayClip(replayJSON(got)), replayClip(replayJSON(want)))
	}
	return ""
}

// ---- deviations: what the new runtime answers instead ---------------------

func replayWantJSON(got *replayResult, status int, want string) []string {
	var diffs []string
	if got.status != status {
		diffs = append(diffs, fmt.Sprintf("status %d; want %d", got.status, status))
	}
	if ct := got.header.Get("Content-Type"); ct != "application/json" {
		diffs = append(diffs, fmt.Sprintf("content-type %q; want application/json", ct))
	}
	g, err := got.json()
	w, _ := decodeJSONNumbers([]byte(want))
	if err != nil || !reflect.DeepEqual(g, w) {
		diffs = append(diffs, fmt.Sprintf("body %q; want %s", replayClip(got.body), want))
	}
	return diffs
}

func replayWantBytes(got *replayResult, want string) []string {
	if got.status != 200 || string(got.body) != want || got.header.Get("Content-Type") != "application/octet-stream" {
		return []string{fmt.Sprintf("status %d, content-type %q, body %q; want 200 application/octet-stream %q",
			got.status, got.header.Get("Content-Type"), got.body, want)}
	}
	return nil
}

func replayNoRedirect(got *replayResult) []string {
	if got.status >= 300 && got.status < 400 || got.header.Get("Location") != "" {
		return []string{fmt.Sprintf("a redirect (%d, Location %q): the contract forbids them (for /list and /download without a slash, server.go's middleware must hand the path to serveLegacyPath)", got.status, got.header.Get("Location"))}
	}
	return nil
}

var replayDeviationChecks = map[string]func(base string, got *replayResult) []string{
	"execute-invalid-utf8": func(_ string, got *replayResult) []string {
		return replayWantJSON(got, 200, `{"stdout":"\ufffd","stderr":"","exit_code":0}`)
	},
	"execute-invalid-utf8-stderr": func(_ string, got *replayResult) []string {
		return replayWantJSON(got, 200, `{"stdout":"ok\n","stderr":"a\ufffdb","exit_code":0}`)
	},
	"execute-trailing-slash": func(_ string, got *replayResult) []string {
		if d := replayNoRedirect(got); d != nil {
			return d
		}
		return replayWantJSON(got, 404, `{"detail":"Not Found"}`)
	},
	"list-no-slash": func(_ string, got *replayResult) []string {
		if d := replayNoRedirect(got); d != nil {
			return d
		}
		return replayWantJSON(got, 200, `[]`) // the (empty) base dir
	},
	"download-no-slash": func(_ string, got *replayResult) []string {
		if d := replayNoRedirect(got); d != nil {
			return d
		}
		return replayWantJSON(got, 404, `{"message":"File not found"}`)
	},
	"execute-sandbox-timeout-header-ignored": func(_ string, got *replayResult) []string {
		return replayWantJSON(got, 200, `{"stdout":"","stderr":"Failed to execute command: Command '['sh', '-c', 'sleep 2; echo done']' timed out after 1.0 seconds","exit_code":1}`)
	},
	"download-double-encoding": func(_ string, got *replayResult) []string {
		return replayWantBytes(got, "literal a%2Fb.txt\n")
	},
	"download-double-encoding-letter": func(_ string, got *replayResult) []string {
		return replayWantBytes(got, "x%41\n")
	},
	"exists-double-encoded": func(_ string, got *replayResult) []string {
		return replayWantJSON(got, 200, `{"path":"a%2Fb.txt","exists":false}`)
	},
	"list-dangling-symlink": func(_ string, got *replayResult) []string {
		return replayWantJSON(got, 200, `[{"name":"ok.txt","size":2,"type":"file","mod_time":1700000100.5}]`)
	},
	"list-symlink-loop": func(_ string, got *replayResult) []string {
		return replayWantJSON(got, 200, `[]`)
	},
	"route-not-found-v1": func(_ string, got *replayResult) []string {
		return replayWantJSON(got, 200, `{"status":"ok"}`)
	},
}

// ---- lenient cases: what else is accepted ---------------------------------

// lenientFirstLoc accepts a 422 (or the recorded status) whose detail is a
// non-empty list with the recorded first loc.
func lenientFirstLoc(c replayCase, base string, got *replayResult) []string {
	want, _ := base64.StdEncoding.DecodeString(c.Response.Body)
	w, _ := decodeJSONNumbers(want)
	g, err := got.json()
	if got.status != c.Response.Status || err != nil {
		return []string{fmt.Sprintf("lenient: status %d body %q; want %d with a detail list", got.status, replayClip(got.body), c.Response.Status)}
	}
	loc := func(v any) any {
		m, _ := v.(map[string]any)
		l, _ := m["detail"].([]any)
		if len(l) == 0 {
			return nil
		}
		item, _ := l[0].(map[string]any)
		return item["loc"]
	}
	if loc(g) == nil || !reflect.DeepEqual(loc(g), loc(w)) {
		return []string{fmt.Sprintf("lenient: first loc %v; want %v", loc(g), loc(w))}
	}
	if len(c.FSAfter) > 0 {
		if d := replayCompareFS(base, c.FSAfter); d != "" {
			return []string{d}
		}
	}
	return nil
}

func lenientStatusIn(statuses ...int) func(replayCase, string, *replayResult) []string {
	return func(c replayCase, base string, got *replayResult) []string {
		for _, s := range statuses {
			if got.status == s {
				if s == c.Response.Status && s != 422 {
					return replayCompare(c, base, got) // the recorded status: the recorded answer
				}
				if _, err := got.json(); err != nil {
					return []string{"lenient: the body is not JSON"}
				}
				return nil
			}
		}
		return []string{fmt.Sprintf("lenient: status %d; want one of %v", got.status, statuses)}
	}
}

func lenientEmptyCommand(c replayCase, _ string, got *replayResult) []string {
	g, err := got.json()
	m, _ := g.(map[string]any)
	stderr, _ := m["stderr"].(string)
	if err != nil || got.status != 200 || m["stdout"] != "" || fmt.Sprint(m["exit_code"]) != "1" ||
		!strings.HasPrefix(stderr, "Failed to execute command: ") {
		return []string{fmt.Sprintf("lenient: %d %q; want 200, stdout \"\", exit_code 1, stderr \"Failed to execute command: …\"", got.status, got.body)}
	}
	return nil
}

func lenientNonString(c replayCase, _ string, got *replayResult) []string {
	if got.status == 422 {
		return nil
	}
	g, err := got.json()
	m, _ := g.(map[string]any)
	if err != nil || got.status != 200 || fmt.Sprint(m["exit_code"]) != "1" {
		return []string{fmt.Sprintf("lenient: %d %q; want 422, or 200 with exit_code 1", got.status, got.body)}
	}
	return nil
}

var replayLenientChecks = map[string]func(c replayCase, base string, got *replayResult) []string{
	"execute-text-plain":                lenientFirstLoc,
	"execute-command-null":              lenientFirstLoc,
	"execute-command-list":              lenientFirstLoc,
	"execute-empty-object":              lenientFirstLoc,
	"execute-body-array":                lenientFirstLoc,
	"execute-body-not-json":             lenientFirstLoc,
	"execute-body-empty":                lenientFirstLoc,
	"upload-missing-file-part":          lenientFirstLoc,
	"upload-file-part-without-filename": lenientFirstLoc,
	"upload-not-multipart":              lenientFirstLoc,
	"execute-command-int":               lenientNonString,
	"execute-command-bool":              lenientNonString,
	"execute-empty":                     lenientEmptyCommand,
	"execute-whitespace-only":           lenientEmptyCommand,
	"execute-body-invalid-utf8":         lenientStatusIn(400, 422),
	"execute-body-utf8-bom":             lenientStatusIn(200, 422),
	"execute-body-utf16":                lenientStatusIn(200, 422),
	"upload-empty-filename":             lenientStatusIn(500, 422),
	"upload-backslash-ie-path": func(c replayCase, base string, got *replayResult) []string {
		if got.status != 200 {
			return []string{fmt.Sprintf("lenient: status %d; want 200", got.status)}
		}
		return nil
	},
	"download-range": func(c replayCase, base string, got *replayResult) []string {
		if got.status == 206 && string(got.body) == "x-co" {
			return nil
		}
		return []string{fmt.Sprintf("lenient: %d %q; want 200 with the file or 206 with bytes 0-3", got.status, got.body)}
	},
	"download-if-modified-since": lenientStatusIn(304),
}

// ---- focused tests of /execute --------------------------------------------

// legacyPost sends POST /execute on a raw connection and returns the
// connection's reader positioned after the response headers.
func legacyPost(t *testing.T, serverURL, command string, header map[string]string) (*http.Response, net.Conn) {
	t.Helper()
	u, _ := url.Parse(serverURL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	body, _ := json.Marshal(map[string]string{"command": command})
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST /execute HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", u.Host, len(body))
	for k, v := range header {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("Connection: close\r\n\r\n")
	b.Write(body)
	if _, err := conn.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: "POST"})
	if err != nil {
		t.Fatalf("reading the response headers: %v", err)
	}
	return resp, conn
}

// legacyExec posts a command and decodes the answer.
func legacyExec(t *testing.T, serverURL, command string, header map[string]string) (int, legacyExecResponse) {
	t.Helper()
	resp, _ := legacyPost(t, serverURL, command, header)
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out legacyExecResponse
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("body %q: %v", data, err)
		}
	}
	return resp.StatusCode, out
}

// legacyOpenFIFO opens the FIFO for writing, which returns once the command
// under test has opened it for reading: the proof that it runs.
func legacyOpenFIFO(t *testing.T, path string) *os.File {
	t.Helper()
	opened := make(chan *os.File, 1)
	go func() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
		}
		opened <- f
	}()
	select {
	case f := <-opened:
		if f == nil {
			t.FailNow()
		}
		return f
	case <-time.After(10 * time.Second):
		// Unblock the opener before failing, so no goroutine is left behind.
		if r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			defer r.Close()
		}
		if f := <-opened; f != nil {
			f.Close()
		}
		t.Fatal("the command never opened the FIFO")
		return nil
	}
}

func TestLegacyExecuteHeartbeat(t *testing.T) {
	ts := newTestServer(t, func(_ *runtime.Config, o *api.Options) { o.HeartbeatInterval = 20 * time.Millisecond })
	fifo := filepath.Join(ts.BaseDir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	resp, _ := legacyPost(t, ts.URL, "cat fifo", nil)
	// The headers came while the command runs (it waits for the FIFO).
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d content-type %q; want 200 application/json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	w := legacyOpenFIFO(t, fifo)
	first := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, first); err != nil || first[0] != ' ' {
		t.Fatalf("first body byte %q (%v); want a heartbeat space while the command runs", first, err)
	}
	if _, err := w.WriteString("done\r\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	body := append(first, rest...)
	trimmed := bytes.TrimLeft(body, " ")
	if len(trimmed) == len(body) || strings.Trim(string(body[:len(body)-len(trimmed)]), " ") != "" {
		t.Errorf("body %q; want spaces, then the JSON", body)
	}
	var out legacyExecResponse
	if err := json.Unmarshal(body, &out); err != nil { // leading spaces are valid JSON
		t.Fatalf("body %q: %v", body, err)
	}
	if want := (legacyExecResponse{Stdout: "done\n"}); out != want {
		t.Errorf("got %+v; want %+v", out, want)
	}
	if n := legacyExecCount(t, ts); n != "1" {
		t.Errorf("sandbox_runtime_legacy_executions_total %v; want 1", n)
	}
}

// legacyExecCount reads the legacy counter from /metrics.
func legacyExecCount(t *testing.T, ts *testServer) string {
	t.Helper()
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "sandbox_runtime_legacy_executions_total "); ok {
			return v
		}
	}
	return "missing"
}

func TestLegacyExecuteTimeoutHeader(t *testing.T) {
	ts := newTestServer(t, func(c *runtime.Config, _ *api.Options) { c.MaxTimeout = 2 * time.Second })
	cases := []struct {
		name, command, header, stderr string
		max                           time.Duration
	}{
		{"smaller", "sleep 10", "0.25", "Failed to execute command: Command '['sleep', '10']' timed out after 0.25 seconds", 2 * time.Second},
		{"larger than the cap", "sleep 10", "60", "Failed to execute command: Command '['sleep', '10']' timed out after 2.0 seconds", 5 * time.Second},
		{"not a number", "sleep 10", "soon", "Failed to execute command: Command '['sleep', '10']' timed out after 2.0 seconds", 5 * time.Second},
		{"zero", "sleep 10", "0", "Failed to execute command: Command '['sleep', '10']' timed out after 2.0 seconds", 5 * time.Second},
		{"negative", "sleep 10", "-1", "Failed to execute command: Command '['sleep', '10']' timed out after 2.0 seconds", 5 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			status, out := legacyExec(t, ts.URL, c.command, map[string]string{"X-Sandbox-Timeout": c.header})
			if took := time.Since(start); took > c.max {
				t.Errorf("took %v; want under %v", took, c.max)
			}
			if want := (legacyExecResponse{Stderr: c.stderr, ExitCode: 1}); status != 200 || out != want {
				t.Errorf("got %d %+v; want 200 %+v", status, out, want)
			}
		})
	}
	t.Run("quick command unaffected", func(t *testing.T) {
		t.Parallel()
		status, out := legacyExec(t, ts.URL, "echo hi", map[string]string{"X-Sandbox-Timeout": "5"})
		if want := (legacyExecResponse{Stdout: "hi\n"}); status != 200 || out != want {
			t.Errorf("got %d %+v; want 200 %+v", status, out, want)
		}
	})
}

func TestLegacyExecuteTruncation(t *testing.T) {
	ts := newTestServer(t, func(c *runtime.Config, _ *api.Options) { c.LegacyOutputLimit = 100 })
	cases := []struct {
		name, command string
		want          legacyExecResponse
	}{
		{"stdout", `sh -c "printf '%0300d' 0; echo err >&2"`,
			legacyExecResponse{Stdout: strings.Repeat("0", 100), Stderr: "err\n[stdout truncated: 200 bytes dropped]\n"}},
		{"both", `sh -c "printf '%0300d' 0; printf '%0250d' 0 >&2; exit 3"`,
			legacyExecResponse{Stdout: strings.Repeat("0", 100),
				Stderr:   strings.Repeat("0", 100) + "\n[stdout truncated: 200 bytes dropped]\n[stderr truncated: 150 bytes dropped]\n",
				ExitCode: 3}},
		{"at the limit", `sh -c "printf '%0100d' 0"`, legacyExecResponse{Stdout: strings.Repeat("0", 100)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, out := legacyExec(t, ts.URL, c.command, nil)
			if status != 200 || out != c.want {
				t.Errorf("got %d %+v; want 200 %+v", status, out, c.want)
			}
		})
	}
}

// TestLegacyExecuteNever5xx covers the answers that are not 200 (all 4xx)
// and shutdown, which must still answer 200.
func TestLegacyExecuteNever5xx(t *testing.T) {
	ts := newTestServer(t, nil)
	t.Run("body over 1 MiB", func(t *testing.T) {
		body := `{"command": "echo ` + strings.Repeat("x", httpx.MaxJSONBody) + `"}`
		resp, err := http.Post(ts.URL+"/execute", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var v struct{ Detail string }
		if resp.StatusCode != 413 || json.Unmarshal(data, &v) != nil || v.Detail == "" {
			t.Errorf("got %d %q; want 413 {\"detail\": …}", resp.StatusCode, data)
		}
	})
	t.Run("python json errors", func(t *testing.T) {
		for body, want := range map[string]string{
			`{"command": "x",}`:  `{"detail":[{"loc":["body",16],"msg":"Expecting property name enclosed in double quotes: line 1 column 17 (char 16)","type":"value_error.jsondecode","ctx":{"msg":"Expecting property name enclosed in double quotes","doc":"{\"command\": \"x\",}","pos":16,"lineno":1,"colno":17}}]}`,
			"{\n\"command\" 1}":  `{"detail":[{"loc":["body",12],"msg":"Expecting ':' delimiter: line 2 column 11 (char 12)","type":"value_error.jsondecode","ctx":{"msg":"Expecting ':' delimiter","doc":"{\n\"command\" 1}","pos":12,"lineno":2,"colno":11}}]}`,
			`{"command": "x"} x`: `{"detail":[{"loc":["body",17],"msg":"Extra data: line 1 column 18 (char 17)","type":"value_error.jsondecode","ctx":{"msg":"Extra data","doc":"{\"command\": \"x\"} x","pos":17,"lineno":1,"colno":18}}]}`,
			`"echo"`:             `{"detail":[{"loc":["body"],"msg":"value is not a valid dict","type":"type_error.dict"}]}`,
			`null`:               `{"detail":[{"loc":["body"],"msg":"field required","type":"value_error.missing"}]}`,
			`{"command": {}}`:    `{"detail":[{"loc":["body","command"],"msg":"str type expected","type":"type_error.str"}]}`,
		} {
			resp, err := http.Post(ts.URL+"/execute", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			g, _ := decodeJSONNumbers(data)
			w, _ := decodeJSONNumbers([]byte(want))
			if resp.StatusCode != 422 || !reflect.DeepEqual(g, w) {
				t.Errorf("body %q: got %d %s; want 422 %s", body, resp.StatusCode, data, want)
			}
		}
	})
	t.Run("coercion like pydantic 1", func(t *testing.T) {
		for body, want := range map[string]string{
			`{"command": 1.50}`:                  "[Errno 2] No such file or directory: '1.5'",
			`{"command": -0}`:                    "[Errno 2] No such file or directory: '0'",
			`{"command": false}`:                 "[Errno 2] No such file or directory: 'False'",
			`[["command", "nosuch x"]]`:          "[Errno 2] No such file or directory: 'nosuch'",
			`{"command": "a", "command": 1e400}`: "[Errno 2] No such file or directory: 'inf'",
		} {
			resp, err := http.Post(ts.URL+"/execute", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var out legacyExecResponse
			json.Unmarshal(data, &out)
			if resp.StatusCode != 200 || out.Stderr != "Failed to execute command: "+want || out.ExitCode != 1 {
				t.Errorf("body %s: got %d %s; want 200 with %q", body, resp.StatusCode, data, want)
			}
		}
	})
	t.Run("shutdown", func(t *testing.T) {
		fifo := filepath.Join(ts.BaseDir, "fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		resp, _ := legacyPost(t, ts.URL, "sh -c 'echo before; exec cat fifo'", nil)
		w := legacyOpenFIFO(t, fifo)
		defer w.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ts.M.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var out legacyExecResponse
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("body %q: %v", data, err)
		}
		want := legacyExecResponse{Stdout: "before\n", Stderr: "[terminated: the sandbox runtime is shutting down]\n", ExitCode: -15}
		if resp.StatusCode != 200 || out != want {
			t.Errorf("got %d %+v; want 200 %+v", resp.StatusCode, out, want)
		}
		status, out := legacyExec(t, ts.URL, "echo late", nil)
		if want := execFailed("the sandbox runtime is shutting down"); status != 200 || out != want {
			t.Errorf("after shutdown: got %d %+v; want 200 %+v", status, out, want)
		}
	})
}

// TestLegacyFIFO: a FIFO is not a file to download (404 at once, not a hang
// on open) and uploading onto one without a reader fails instead of hanging.
func TestLegacyFIFO(t *testing.T) {
	ts := newTestServer(t, nil)
	if err := syscall.Mkfifo(filepath.Join(ts.BaseDir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := replaySend(t, ts.URL, replayRequest{Method: "GET", Path: "/download/fifo"})
	if got.status != 404 {
		t.Errorf("download of a FIFO: %d %q; want 404", got.status, got.body)
	}
	body := "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"fifo\"\r\n\r\nx\r\n--b--\r\n"
	got = replaySend(t, ts.URL, replayRequest{Method: "POST", Path: "/upload",
		Headers: map[string]string{"Content-Type": "multipart/form-data; boundary=b", "Content-Length": fmt.Sprint(len(body))},
		Body:    base64.StdEncoding.EncodeToString([]byte(body))})
	if got.status != 500 || !strings.Contains(string(got.body), "File upload failed: [Errno 6] No such device or address") {
		t.Errorf("upload onto a FIFO: %d %q; want 500 ENXIO", got.status, got.body)
	}
}

// replayEscapesOnly reports whether got and want differ only in how U+2028
// and U+2029 are written: Go's encoder escapes them (for JavaScript
// consumers), Python's writes them raw; both are the same JSON string.
func replayEscapesOnly(got, want []byte) bool {
	r := strings.NewReplacer(`\u2028`, "\u2028", `\u2029`, "\u2029")
	return r.Replace(string(bytes.TrimSpace(got))) == string(bytes.TrimSpace(want))
}

// TestLegacyExecuteHeaderHold: an answer that comes within
// answerHeaderHold goes out with its headers (a short one with
// Content-Length: not flushed, then chunked); a command that runs longer
// still gets its headers while it runs, with no heartbeat before them (the
// hold, not the heartbeat, sends them).
func TestLegacyExecuteHeaderHold(t *testing.T) {
	ts := newTestServer(t, func(_ *runtime.Config, o *api.Options) { o.HeartbeatInterval = time.Hour })
	resp, _ := legacyPost(t, ts.URL, "echo hi", nil)
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ContentLength != int64(len(body)) || len(resp.TransferEncoding) != 0 {
		t.Errorf("echo hi: Content-Length %d, Transfer-Encoding %v, body %q; want the answer with a Content-Length", resp.ContentLength, resp.TransferEncoding, body)
	}
	if want := `{"stdout":"hi\n","stderr":"","exit_code":0}`; string(body) != want {
		t.Errorf("echo hi: %q; want %q", body, want)
	}

	fifo := filepath.Join(ts.BaseDir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	resp, _ = legacyPost(t, ts.URL, "cat fifo", nil)
	// The headers came; the command cannot have ended (nobody has opened
	// the FIFO for writing yet).
	if resp.StatusCode != 200 || resp.ContentLength != -1 {
		t.Fatalf("cat fifo: status %d Content-Length %d; want 200 with a body of unknown length", resp.StatusCode, resp.ContentLength)
	}
	w := legacyOpenFIFO(t, fifo)
	w.WriteString("done\n")
	w.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"stdout":"done\n","stderr":"","exit_code":0}`; string(body) != want {
		t.Errorf("cat fifo: %q; want %q", body, want)
	}
}
