package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// brDo sends a request with exactly the headers given (no Content-Type is
// added) and returns the status, headers and body.
func brDo(t *testing.T, method, url, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), atTimeout)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, url, rd)
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func brCode(body string) string {
	var e errorBody
	json.Unmarshal([]byte(body), &e)
	return e.Error.Code
}

// TestJSONContentTypeRequired: a v1 body that does not say it is JSON is
// 415, so a page cannot send one as a "simple" request (text/plain, no
// preflight); nothing is started. Empty bodies need no type.
func TestJSONContentTypeRequired(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	create := `{"argv":["true"]}`
	for _, ct := range []string{"", "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx", "json", "application/json; charset"} {
		code, _, body := brDo(t, "POST", ts.URL+"/v1/commands", create, map[string]string{"Content-Type": ct})
		if code != http.StatusUnsupportedMediaType || brCode(body) != "unsupported_media_type" {
			t.Errorf("create with Content-Type %q: got %d %s; want 415 unsupported_media_type", ct, code, body)
		}
	}
	if n := len(ts.M.List(nil)); n != 0 {
		t.Fatalf("refused creates registered %d commands", n)
	}
	for _, ct := range []string{"application/json", "Application/JSON; charset=utf-8", "application/vnd.sandbox+json"} {
		if code, _, body := brDo(t, "POST", ts.URL+"/v1/commands", create, map[string]string{"Content-Type": ct}); code != http.StatusCreated {
			t.Errorf("create with Content-Type %q: got %d %s; want 201", ct, code, body)
		}
	}
	st := atCreate(t, ts, `{"argv":["cat"],"stdin":true}`)
	id := ts.URL + "/v1/commands/" + st.CommandID
	for _, r := range []struct{ path, body string }{{"/stdin", `{"data":"x"}`}, {"/signal", `{"signal":"TERM"}`}, {"/kill", `{}`}} {
		if code, _, body := brDo(t, "POST", id+r.path, r.body, map[string]string{"Content-Type": "text/plain"}); code != http.StatusUnsupportedMediaType {
			t.Errorf("POST %s as text/plain: got %d %s; want 415", r.path, code, body)
		}
	}
	if got := atGet(t, ts, st.CommandID, 0); got.State != "running" {
		t.Fatalf("after refused signal and kill: state %s; want running", got.State)
	}
	// kill takes no body: without one, no type is needed.
	if code, _, body := brDo(t, "POST", id+"/kill", "", nil); code != http.StatusOK {
		t.Errorf("kill without a body: got %d %s; want 200", code, body)
	}
}

// TestBrowserOriginRefused: a request carrying an Origin other than the
// daemon's own host is 403 on every route, WebSocket upgrades and the
// legacy API included; clients without Origin, and pages of the daemon's
// own host, are unaffected.
func TestBrowserOriginRefused(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	host := strings.TrimPrefix(ts.URL, "http://")
	json := map[string]string{"Content-Type": "application/json"}
	with := func(m map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range m {
			out[a] = b
		}
		return out
	}
	for _, origin := range []string{"http://evil.example", "null", "http://" + host + ".evil.example", "https://" + host + "x", "file://"} {
		evil := with(json, "Origin", origin)
		for _, r := range []struct{ method, path, body string }{
			{"POST", "/v1/commands", `{"argv":["true"]}`},
			{"GET", "/v1/commands", ""},
			{"GET", "/v1/health", ""},
			{"PUT", "/v1/files/x.txt", "data"},
			{"POST", "/execute", `{"command":"true"}`},
			{"GET", "/list/", ""},
			{"GET", "/v1/events?follow=false", ""},
			{"GET", "/v1/ports", ""},
		} {
			code, h, body := brDo(t, r.method, ts.URL+r.path, r.body, evil)
			if code != http.StatusForbidden || brCode(body) != "forbidden" || h.Get("Access-Control-Allow-Origin") != "" {
				t.Errorf("%s %s from Origin %q: got %d %s; want 403 forbidden without CORS headers", r.method, r.path, origin, code, body)
			}
		}
	}
	// The simple request of a page on another site: text/plain, no type at
	// all (a Blob body), or a form: refused before any of it is looked at.
	for _, ct := range []string{"text/plain", ""} {
		code, _, body := brDo(t, "POST", ts.URL+"/execute", `{"command":"touch pwned"}`, map[string]string{"Origin": "http://evil.example", "Content-Type": ct})
		if code != http.StatusForbidden {
			t.Errorf("legacy /execute from another site with Content-Type %q: got %d %s; want 403", ct, code, body)
		}
	}
	if n := len(ts.M.List(nil)); n != 0 {
		t.Fatalf("refused requests registered %d commands", n)
	}
	// Two Origin headers are refused too.
	req, _ := http.NewRequest("GET", ts.URL+"/v1/health", nil)
	req.Header["Origin"] = []string{"http://" + host, "http://evil.example"}
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("two Origin headers: %v %v; want 403", resp, err)
	} else {
		resp.Body.Close()
	}

	// No Origin (the broker, curl) and the daemon's own host are served.
	if code, _, body := brDo(t, "POST", ts.URL+"/v1/commands", `{"argv":["true"]}`, json); code != http.StatusCreated {
		t.Errorf("no Origin: got %d %s; want 201", code, body)
	}
	if code, _, body := brDo(t, "POST", ts.URL+"/v1/commands", `{"argv":["true"]}`, with(json, "Origin", "http://"+host)); code != http.StatusCreated {
		t.Errorf("own host as Origin: got %d %s; want 201", code, body)
	}
	if code, _, body := brDo(t, "POST", ts.URL+"/execute", `{"command":"true"}`, json); code != http.StatusOK {
		t.Errorf("legacy /execute without Origin: got %d %s; want 200", code, body)
	}

	// WebSocket: a foreign Origin is refused before the upgrade.
	st := atCreate(t, ts, `{"argv":["cat"],"stdin":true}`)
	ws, resp, err := websocket.DefaultDialer.Dial(atWSURL(ts, st.CommandID, ""), http.Header{"Origin": {"http://evil.example"}})
	if err == nil {
		ws.Close()
		t.Fatal("attach from another origin was upgraded")
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("attach from another origin: %v %v; want 403", resp, err)
	}
	ws, _, err = websocket.DefaultDialer.Dial(atWSURL(ts, st.CommandID, ""), http.Header{"Origin": {"http://" + host}})
	if err != nil {
		t.Fatalf("attach from the own host: %v", err)
	}
	ws.Close()
}

// TestAllowedOrigins: an origin allowed by configuration is served, with
// the CORS headers a browser application needs, and its preflights are
// answered; others stay refused.
func TestAllowedOrigins(t *testing.T) {
	ts := newTestServer(t, func(c *runtime.Config, o *Options) {
		atQuietAPI(c, o)
		o.AllowedOrigins = "https://UI.example:443, http://127.0.0.1:3000"
	})
	for _, origin := range []string{"https://ui.example", "http://127.0.0.1:3000"} {
		code, h, body := brDo(t, "POST", ts.URL+"/v1/commands", `{"argv":["true"]}`, map[string]string{"Origin": origin, "Content-Type": "application/json"})
		if code != http.StatusCreated || h.Get("Access-Control-Allow-Origin") != origin || !strings.Contains(h.Get("Access-Control-Expose-Headers"), "Location") {
			t.Errorf("create from allowed %s: got %d %v %s; want 201 with CORS headers", origin, code, h, body)
		}
		code, h, body = brDo(t, "OPTIONS", ts.URL+"/v1/commands", "", map[string]string{"Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type, authorization"})
		if code != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != origin || !strings.Contains(h.Get("Access-Control-Allow-Headers"), "Content-Type") || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") {
			t.Errorf("preflight from allowed %s: got %d %v %s; want 204 with CORS headers", origin, code, h, body)
		}
	}
	for _, origin := range []string{"http://ui.example", "https://ui.example:8443", "http://127.0.0.1:3001"} {
		if code, _, body := brDo(t, "OPTIONS", ts.URL+"/v1/commands", "", map[string]string{"Origin": origin, "Access-Control-Request-Method": "POST"}); code != http.StatusForbidden {
			t.Errorf("preflight from %s: got %d %s; want 403", origin, code, body)
		}
	}
	st := atCreate(t, ts, `{"argv":["cat"],"stdin":true}`)
	ws, _, err := websocket.DefaultDialer.Dial(atWSURL(ts, st.CommandID, ""), http.Header{"Origin": {"https://ui.example"}})
	if err != nil {
		t.Fatalf("attach from an allowed origin: %v", err)
	}
	ws.Close()

	any := newTestServer(t, func(c *runtime.Config, o *Options) { atQuietAPI(c, o); o.AllowedOrigins = "*" })
	if code, _, body := brDo(t, "GET", any.URL+"/v1/health", "", map[string]string{"Origin": "http://anything.example"}); code != http.StatusOK {
		t.Errorf("with *: got %d %s; want 200", code, body)
	}
}

func TestParseAllowedOrigins(t *testing.T) {
	got, err := ParseAllowedOrigins(" HTTPS://A.example:443/ ,http://[::1]:80,*, http://b.example:8080")
	if want := "https://a.example,http://[::1],*,http://b.example:8080"; err != nil || strings.Join(got, ",") != want {
		t.Errorf("got %q %v; want %s", got, err, want)
	}
	for _, bad := range []string{"a.example", "https://a.example/path", "ftp://a.example", "https://", "https://u@a.example", "https://a.example?x"} {
		if _, err := ParseAllowedOrigins(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
