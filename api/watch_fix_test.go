package api

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/pycompat"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// watchLines reads one window of a watch stream (follow=false) and returns
// its lines as raw JSON objects, the end line last.
func watchLines(t *testing.T, url string) []map[string]any {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	var out []map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %s: %v", sc.Bytes(), err)
		}
		out = append(out, m)
	}
	return out
}

// TestWatchNonUTF8Names: names that are not valid UTF-8 (a\xff, a\xfe)
// show U+FFFD in path, and escaped_path / escaped_old_path carry their
// exact bytes, distinct for the two files (issue 25, W1).
func TestWatchNonUTF8Names(t *testing.T) {
	ts := newTestServer(t, nil)
	os.Mkdir(filepath.Join(ts.BaseDir, "d"), 0o755)
	resp, info := postWatch(t, ts, `{"path":"d"}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	d := filepath.Join(ts.BaseDir, "d")
	if err := os.WriteFile(filepath.Join(d, "a\xff"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(d, "a\xfe"), nil, 0o644)
	os.WriteFile(filepath.Join(d, "plain"), nil, 0o644)
	os.Rename(filepath.Join(d, "a\xff"), filepath.Join(d, "b\xfd"))
	// Wait (bounded) until the rename is in the log: the creates precede it.
	var lines []map[string]any
	for end := time.Now().Add(10 * time.Second); ; {
		lines = watchLines(t, ts.URL+"/v1/watches/"+info.ID+"/events?follow=false")
		if len(lines) >= 2 && lines[len(lines)-2]["type"] == "rename" {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no rename reported: %v", lines)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a bound
	}
	escaped := map[string]bool{}
	for _, l := range lines {
		switch l["type"] {
		case "create":
			p, _ := l["path"].(string)
			e, has := l["escaped_path"].(string)
			if p == "d/plain" {
				if has {
					t.Errorf("a UTF-8 name has escaped_path: %v", l)
				}
				continue
			}
			if p != "d/a\ufffd" || !has {
				t.Errorf("create %v: want path d/a\\ufffd and escaped_path", l)
			}
			escaped[e] = true
		case "rename":
			if l["escaped_old_path"] != "d/a%FF" || l["escaped_path"] != "d/b%FD" {
				t.Errorf("rename %v: want escaped_old_path d/a%%FF, escaped_path d/b%%FD", l)
			}
		}
	}
	if !escaped["d/a%FF"] || !escaped["d/a%FE"] {
		t.Errorf("the creates' escaped_path: %v, want d/a%%FF and d/a%%FE", escaped)
	}
	// escaped_path addresses the file in /v1/files.
	r, err := http.Get(ts.URL + "/v1/files/d/a%FE")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 200 {
		t.Errorf("GET /v1/files/d/a%%FE: %d", r.StatusCode)
	}
}

// TestWatchPathOutsideBase: paths that resolve outside the base (by ..)
// are 403 as in the files API, for POST /v1/watches and the one-shot
// ?watch=true; a .. that stays inside is fine and watches where it
// resolves (issue 25, W2).
func TestWatchPathOutsideBase(t *testing.T) {
	ts := newTestServer(t, nil)
	os.MkdirAll(filepath.Join(ts.BaseDir, "d", "e"), 0o755)
	os.Mkdir(filepath.Join(ts.BaseDir, "r"), 0o755)
	for _, p := range []string{"../", "..", "d/../../r", "/../", "d/e/../../.."} {
		body, _ := json.Marshal(map[string]any{"path": p})
		resp, err := http.Post(ts.URL+"/v1/watches", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "outside the base directory") {
			t.Errorf("POST /v1/watches %q: %d %s, want 403 outside the base directory", p, resp.StatusCode, b)
		}
	}
	for _, p := range []string{"/v1/files/%2E%2E?watch=true&max_wait=0.1", "/v1/files/d/%2E%2E/%2E%2E/r?watch=true&max_wait=0.1"} {
		resp, err := http.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET %s: %d %s, want 403", p, resp.StatusCode, b)
		}
	}
	resp, info := postWatch(t, ts, `{"path":"d/e/../../r"}`)
	if resp.StatusCode != http.StatusCreated || info.Path != "r" {
		t.Fatalf("a .. inside the base: %d %+v, want 201 watching r", resp.StatusCode, info)
	}
	// A symlink inside the base is followed as /v1/files follows it: the
	// watch is of its target, and says so.
	os.Symlink("d/e", filepath.Join(ts.BaseDir, "l"))
	resp, info = postWatch(t, ts, `{"path":"l"}`)
	if resp.StatusCode != http.StatusCreated || info.Path != "d/e" {
		t.Fatalf("a symlink to d/e: %d %+v, want 201 watching d/e", resp.StatusCode, info)
	}
}

// TestWatchRegularFile: watching a regular file is 400 invalid_request
// "not a directory", not 404 (issue 25, W3).
func TestWatchRegularFile(t *testing.T) {
	ts := newTestServer(t, nil)
	os.WriteFile(filepath.Join(ts.BaseDir, "f"), []byte("x"), 0o644)
	check := func(what string, resp *http.Response) {
		t.Helper()
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		json.Unmarshal(b, &e)
		if resp.StatusCode != http.StatusBadRequest || e.Error.Code != "invalid_request" || !strings.Contains(e.Error.Message, "not a directory") {
			t.Errorf("%s: %d %s, want 400 invalid_request not a directory", what, resp.StatusCode, b)
		}
	}
	resp, err := http.Post(ts.URL+"/v1/watches", "application/json", strings.NewReader(`{"path":"f"}`))
	if err != nil {
		t.Fatal(err)
	}
	check("POST f", resp)
	resp, err = http.Get(ts.URL + "/v1/files/f?watch=true&max_wait=0.1")
	if err != nil {
		t.Fatal(err)
	}
	check("GET f?watch=true", resp)
	// A missing path, or one below a file, stays 404.
	for _, p := range []string{"nope", "f/x"} {
		resp, _ := postWatch(t, ts, `{"path":"`+p+`"}`)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("POST %s: %d, want 404", p, resp.StatusCode)
		}
	}
}

// TestWatchEscapedRequestPath: a directory whose name is not valid UTF-8
// can be watched: POST /v1/watches takes escaped_path (the form events and
// listings give), the one-shot takes the percent-encoded URL path; both
// paths at once, or an escaped_path that does not decode, are 400.
func TestWatchEscapedRequestPath(t *testing.T) {
	ts := newTestServer(t, nil)
	os.Mkdir(filepath.Join(ts.BaseDir, "a\xff"), 0o755)
	os.Mkdir(filepath.Join(ts.BaseDir, "a\xfe"), 0o755)
	resp, info := postWatch(t, ts, `{"escaped_path":"a%FF"}`)
	if resp.StatusCode != http.StatusCreated || info.EscapedPath != "a%FF" {
		t.Fatalf("POST escaped_path a%%FF: %d %+v", resp.StatusCode, info)
	}
	os.WriteFile(filepath.Join(ts.BaseDir, "a\xfe", "no"), nil, 0o644)
	os.WriteFile(filepath.Join(ts.BaseDir, "a\xff", "x"), nil, 0o644)
	var lines []map[string]any
	for end := time.Now().Add(10 * time.Second); len(lines) < 2; {
		lines = watchLines(t, ts.URL+"/v1/watches/"+info.ID+"/events?follow=false")
		if time.Now().After(end) {
			t.Fatalf("no event: %v", lines)
		}
		if len(lines) < 2 {
			time.Sleep(20 * time.Millisecond) // polling a condition with a bound
		}
	}
	if lines[0]["escaped_path"] != "a%FF/x" {
		t.Fatalf("first event %v, want escaped_path a%%FF/x (the a\\xff dir, not a\\xfe)", lines[0])
	}
	for _, body := range []string{`{"path":"a","escaped_path":"a%FF"}`, `{"escaped_path":"a%G1"}`} {
		if resp, _ := postWatch(t, ts, body); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST %s: %d, want 400", body, resp.StatusCode)
		}
	}
	if resp, _ := postWatch(t, ts, `{"escaped_path":"%2E%2E"}`); resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST escaped_path ..: %d, want 403", resp.StatusCode)
	}
}

// TestWatchRequestEscapeIsQuote: the client's escaped_path (wire) is the
// server's escaped form (pycompat.Quote) for every byte.
func TestWatchRequestEscapeIsQuote(t *testing.T) {
	var all []byte
	for c := 1; c < 256; c++ {
		all = append(all, byte(c))
	}
	p := "d/" + string(all)
	if got, want := wire.NewWatchRequest(p, false).EscapedPath, pycompat.Quote(p); got != want {
		t.Fatalf("wire %q, pycompat.Quote %q", got, want)
	}
	if r := wire.NewWatchRequest("d/é", false); r.Path != "d/é" || r.EscapedPath != "" {
		t.Fatalf("a UTF-8 path: %+v", r)
	}
}

// TestOneShotWatchEndLineBeforeDelete: the one-shot watch stream's `end`
// line reaches the client before its watch is removed (a recursive watch's
// removal takes milliseconds; the line once waited for it). The removal is
// held until the client has the line, for at most 10 s: with the line held
// back behind the removal, the hook sees the time run out.
func TestOneShotWatchEndLineBeforeDelete(t *testing.T) {
	ts := newTestServer(t, nil)
	os.Mkdir(filepath.Join(ts.BaseDir, "d"), 0o755)
	gotEnd := make(chan struct{})
	held := make(chan bool, 1)
	hook := func() {
		select {
		case <-gotEnd:
			held <- true
		case <-time.After(10 * time.Second):
			held <- false
		}
	}
	testHookOneShotWatchDelete.Store(&hook)
	t.Cleanup(func() { testHookOneShotWatchDelete.Store(nil) })
	e := readWatch(t, ts.URL+"/v1/files/d?watch=true&recursive=true&max_wait=0.2", func(wire.WatchEvent) {})
	close(gotEnd)
	if e.Reason != wire.EndMaxWait {
		t.Fatalf("end %+v; want max_wait", e)
	}
	if !<-held {
		t.Fatal("the end line reached the client only after the watch's removal")
	}
}
