package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// authTokenChange is protocol.md §6: a changed token file takes effect within 5 s.
const authTokenChange = 5 * time.Second

// authServer starts a server whose token file holds content (nil: no file).
func authServer(t *testing.T, content *string) (*testServer, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if content != nil {
		authWriteFile(t, path, *content)
	}
	ts := newTestServer(t, func(_ *runtime.Config, o *Options) { o.TokenFile = path })
	return ts, path
}

// authWriteFile replaces the token file the way a Kubernetes secret
// update does: a new file renamed over the old one.
func authWriteFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func authBearer(tok string) http.Header {
	return http.Header{"Authorization": {"Bearer " + tok}}
}

// authRequest is one request of the route tables below.
type authRequest struct {
	method, path, body string
}

// authProtected are requests on routes that need the token, v1 and legacy.
var authProtected = []authRequest{
	{"GET", "/v1/info", ""},
	{"GET", "/v1/commands", ""},
	{"POST", "/v1/commands", `{"argv":["true"]}`},
	{"GET", "/v1/commands/9b2f6f0e-3f43-4c1e-9d49-0a8b9b0c6a11", ""},
	{"POST", "/v1/commands/9b2f6f0e-3f43-4c1e-9d49-0a8b9b0c6a11/kill", ""},
	{"GET", "/v1/files/", ""},
	{"PUT", "/v1/files/x.txt", "data"},
	{"GET", "/metrics", ""},
	{"POST", "/execute", `{"command":"true"}`},
	{"POST", "/upload", ""},
	{"GET", "/v1/events?follow=false", ""},
	{"GET", "/v1/ports", ""},
}

// authLegacyPaths are the legacy file routes, which the middleware serves
// outside the route table (their handler checks the token itself).
var authLegacyPaths = []authRequest{
	{"GET", "/list/", ""},
	{"GET", "/download/x.txt", ""},
	{"GET", "/exists/x.txt", ""},
}

// authExpect checks that req is refused with 401 unauthorized (want401) or
// not refused for want of a token.
func authExpect(t *testing.T, ts *testServer, req authRequest, hdr http.Header, want401 bool) {
	t.Helper()
	code, body := atDo(t, req.method, ts.URL+req.path, req.body, hdr)
	if !want401 {
		if code == http.StatusUnauthorized {
			t.Errorf("%s %s: got 401 %s; want it allowed", req.method, req.path, body)
		}
		return
	}
	var eb errorBody
	if code != http.StatusUnauthorized || json.Unmarshal(body, &eb) != nil || eb.Error.Code != "unauthorized" {
		t.Errorf("%s %s: got %d %s; want 401 with code unauthorized", req.method, req.path, code, body)
	}
}

// authPublic checks the routes that never need a token.
func authPublic(t *testing.T, ts *testServer) {
	t.Helper()
	for _, p := range []string{"/", "/v1/health"} {
		if code, body := atDo(t, "GET", ts.URL+p, "", nil); code != http.StatusOK {
			t.Errorf("GET %s without a token: got %d %s; want 200", p, code, body)
		}
	}
}

// authAttach dials the attach route of a command that does not exist and
// returns the handshake's HTTP status (a refused token comes first).
func authAttach(t *testing.T, ts *testServer, hdr http.Header) int {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(atWSURL(ts, "9b2f6f0e-3f43-4c1e-9d49-0a8b9b0c6a11", ""), hdr)
	if err == nil {
		ws.Close()
		return http.StatusSwitchingProtocols
	}
	if resp == nil {
		t.Fatalf("attach: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestAuthToken(t *testing.T) {
	tok := "  s3cret-token\n\n" // surrounding whitespace is ignored
	ts, _ := authServer(t, &tok)

	for _, hdr := range []http.Header{nil, authBearer("wrong"), authBearer("s3cret-toke"), {"Authorization": {"s3cret-token"}}, {"Authorization": {"Basic s3cret-token"}}} {
		for _, req := range authProtected {
			authExpect(t, ts, req, hdr, true)
		}
		if got := authAttach(t, ts, hdr); got != http.StatusUnauthorized {
			t.Errorf("attach with %v: got %d; want 401", hdr, got)
		}
	}
	authPublic(t, ts)

	good := authBearer("s3cret-token")
	for _, req := range authProtected {
		authExpect(t, ts, req, good, false)
	}
	if code, body := atDo(t, "GET", ts.URL+"/v1/info", "", good); code != http.StatusOK {
		t.Errorf("GET /v1/info with the token: got %d %s; want 200", code, body)
	}
	if got := authAttach(t, ts, good); got != http.StatusNotFound {
		t.Errorf("attach to an unknown id with the token: got %d; want 404", got)
	}

	t.Run("legacy file routes", func(t *testing.T) {
		// No skip when a route is missing: a missing route answers 404, not
		// 401, and fails here.
		for _, req := range authLegacyPaths {
			authExpect(t, ts, req, nil, true)
			authExpect(t, ts, req, authBearer("wrong"), true)
			authExpect(t, ts, req, good, false)
		}
	})
}

func TestAuthTokenChange(t *testing.T) {
	first := "first-token"
	ts, path := authServer(t, &first)
	if code, _ := atDo(t, "GET", ts.URL+"/v1/info", "", authBearer(first)); code != http.StatusOK {
		t.Fatalf("first token: got %d; want 200", code)
	}
	// Rotate. The runtime re-checks the file every tokenRecheck; within
	// the contract's 5 s the new token must work and the old one must not.
	authWriteFile(t, path, "the-second-token\n")
	changed := time.Now()
	deadline := changed.Add(authTokenChange)
	for {
		code, _ := atDo(t, "GET", ts.URL+"/v1/info", "", authBearer("the-second-token"))
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new token is still refused %v after the change (last %d)", authTokenChange, code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the new token took effect after %v", time.Since(changed))
	if code, _ := atDo(t, "GET", ts.URL+"/v1/info", "", authBearer(first)); code != http.StatusUnauthorized {
		t.Errorf("the old token after the change: got %d; want 401", code)
	}

	// A file that disappears keeps the last good token (a re-read that
	// fails never locks the pod out), and the public routes stay public.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < 2*tokenRecheck; {
		if code, body := atDo(t, "GET", ts.URL+"/v1/info", "", authBearer("the-second-token")); code != http.StatusOK {
			t.Fatalf("the last good token after the file was removed: got %d %s; want 200", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	authPublic(t, ts)
}

func TestAuthTokenFileMissingOrEmpty(t *testing.T) {
	empty := " \n\t\n"
	for name, content := range map[string]*string{"missing": nil, "empty": &empty} {
		t.Run(name, func(t *testing.T) {
			ts, _ := authServer(t, content)
			for _, hdr := range []http.Header{nil, authBearer(""), authBearer("anything")} {
				for _, req := range authProtected {
					authExpect(t, ts, req, hdr, true)
				}
				if got := authAttach(t, ts, hdr); got != http.StatusUnauthorized {
					t.Errorf("attach with %v: got %d; want 401", hdr, got)
				}
			}
			authPublic(t, ts)
		})
	}
}

// TestAuthTokenFileFailureLogged: a token file that becomes unusable while
// the runtime runs keeps the last good token in force and says so at error
// level, naming the file and the cause; fixing the file brings the new token
// and is logged once.
func TestAuthTokenFileFailureLogged(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	path := filepath.Join(t.TempDir(), "token")
	authWriteFile(t, path, "s3cret\n")
	ts := newTestServer(t, func(_ *runtime.Config, o *Options) {
		o.TokenFile = path
		o.Logger = zap.New(core)
	})
	req := authRequest{"GET", "/v1/info", ""}
	authExpect(t, ts, req, authBearer("s3cret"), false)
	if n := logs.FilterMessageSnippet("token file").Len(); n != 0 {
		t.Fatalf("%d token file log lines while the file is fine", n)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	authUntilLogged(t, ts, logs, "no such file")
	bad := logs.FilterMessageSnippet("token file unusable").FilterField(zap.String("token_file", path)).All()
	if len(bad) == 0 || bad[0].Level != zap.ErrorLevel {
		t.Fatalf("no error-level line naming %s: %v", path, logs.All())
	}
	authWriteFile(t, path, "   ") // blank: the last token still holds, logged as empty
	authUntilLogged(t, ts, logs, "empty")
	// Tokens no request can send (D5): before, each replaced the last good
	// token and every request was then refused.
	authWriteFile(t, path, "s3cret\nn3w\n")
	authUntilLogged(t, ts, logs, "second line")
	authWriteFile(t, path, "n3w\x00\n")
	authUntilLogged(t, ts, logs, "control byte")
	authWriteFile(t, path, "\uFEFFn3w\n")
	authUntilLogged(t, ts, logs, "byte-order mark")
	authWriteFile(t, path, "n3w\n")
	authUntil(t, ts, req, authBearer("n3w"), http.StatusOK)
	authExpect(t, ts, req, authBearer("s3cret"), true)
	if logs.FilterMessage("token file readable again").Len() != 1 {
		t.Errorf("recovery not logged once: %v", logs.All())
	}
	for _, e := range logs.All() {
		if b, _ := json.Marshal(e.ContextMap()); strings.Contains(e.Message+string(b), "s3cret") || strings.Contains(e.Message+string(b), "n3w") {
			t.Errorf("a log line holds the token: %s %s", e.Message, b)
		}
	}
}

// authUntilLogged waits (at most authTokenChange) until a failed re-read
// with cause in its error was logged, checking meanwhile that the last good
// token ("s3cret") is still accepted.
func authUntilLogged(t *testing.T, ts *testServer, logs *observer.ObservedLogs, cause string) {
	t.Helper()
	deadline := time.Now().Add(authTokenChange)
	for !authLogged(logs, cause) {
		if time.Now().After(deadline) {
			t.Fatalf("a failed re-read (%s) was not logged within %v: %v", cause, authTokenChange, logs.All())
		}
		authExpect(t, ts, authRequest{"GET", "/v1/info", ""}, authBearer("s3cret"), false)
		time.Sleep(20 * time.Millisecond)
	}
}

// authLogged reports whether an "unusable" line with cause in its error was logged.
func authLogged(logs *observer.ObservedLogs, cause string) bool {
	for _, e := range logs.FilterMessageSnippet("token file unusable").All() {
		if msg, _ := e.ContextMap()["error"].(string); strings.Contains(msg, cause) {
			return true
		}
	}
	return false
}

// authUntil repeats req until it answers want, for at most authTokenChange.
func authUntil(t *testing.T, ts *testServer, req authRequest, hdr http.Header, want int) {
	t.Helper()
	deadline := time.Now().Add(authTokenChange)
	for {
		code, body := atDo(t, req.method, ts.URL+req.path, req.body, hdr)
		if code == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s still answers %d %s after %v; want %d", req.method, req.path, code, body, authTokenChange, want)
		}
	}
}

// TestAuthStopNeverWaitsOnAStuckRead: a token file on a file system whose
// read never returns (a hung NFS mount, a FUSE server that stopped) leaves
// the re-reading goroutine stuck. Before, shutdown (EndStreams) waited for
// it for ever; now stop gives up after tokenStopWait and says why.
func TestAuthStopNeverWaitsOnAStuckRead(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stuck, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	var calls atomic.Int32
	read := func(string) ([]byte, error) {
		if calls.Add(1) == 1 {
			return []byte("s3cret"), nil
		}
		select {
		case stuck <- struct{}{}:
		default:
		}
		<-release // a read that does not return until the test ends
		return nil, errors.New("released")
	}
	a := newTokenAuthReading(ctx, "/stand-in/token", zap.New(core), read)
	select {
	case <-stuck:
	case <-time.After(3 * tokenRecheck):
		t.Fatal("the re-read never started")
	}
	cancel()
	done := make(chan struct{})
	start := time.Now()
	go func() { a.stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(tokenStopWait + 5*time.Second):
		t.Fatalf("stop still waits on a stuck read after %v", time.Since(start))
	}
	if logs.FilterMessageSnippet("stuck").Len() != 1 {
		t.Errorf("the stuck read was not logged: %v", logs.All())
	}
}
