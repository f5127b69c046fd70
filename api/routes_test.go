package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/legacy"
)

// TestEveryMountedHandlerIsReached: every handler of a route another group
// mounts (Options.Routes: the legacy API, and a Raw and a plain route of
// this test) is reached by a request to its pattern, through the whole
// middleware. The legacy file routes were once registered in ServeMux while
// the middleware took their prefixes first, so their handlers were dead
// code; a Raw route is now served by prefix only, never shadowed.
func TestEveryMountedHandlerIsReached(t *testing.T) {
	var mu sync.Mutex
	hit := map[string]bool{}
	wrap := func(routes []httpx.Route) []httpx.Route {
		out := make([]httpx.Route, len(routes))
		for i, r := range routes {
			methods := map[string]http.HandlerFunc{}
			for m, h := range r.Methods {
				key := m + " " + r.Pattern
				methods[m] = func(w http.ResponseWriter, req *http.Request) {
					mu.Lock()
					hit[key] = true
					mu.Unlock()
					h(w, req)
				}
			}
			r.Methods = methods
			out[i] = r
		}
		return out
	}
	plain := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }
	base := newTestServer(t, nil)
	lh := legacy.New(base.M, legacy.Options{BaseDir: base.BaseDir})
	srv := New(base.M, Options{Version: "test", BaseDir: base.BaseDir, Refuse: legacy.Refuse,
		Routes: wrap(append(lh.Routes(),
			httpx.Route{Pattern: "/test-plain", Methods: map[string]http.HandlerFunc{"POST": plain}},
			httpx.Route{Pattern: "/test-raw/{path...}", Methods: map[string]http.HandlerFunc{"GET": plain}, Raw: true, NoHead: true}))})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	ts := struct {
		*Server
		URL string
	}{srv, hs.URL}
	mounted := 0
	for _, r := range ts.routes {
		if len(r.Methods) == 0 || strings.HasPrefix(r.Pattern, "/v1/") || r.Pattern == "/metrics" {
			continue // the server's own routes
		}
		for m := range r.Methods {
			mounted++
			target := strings.ReplaceAll(strings.ReplaceAll(r.Pattern, "{$}", ""), "{path...}", "x/../y")
			req, err := http.NewRequest(m, ts.URL+target, strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			req.URL.Opaque = target // sent as written: `..` reaches a Raw route uncleaned
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			mu.Lock()
			reached := hit[m+" "+r.Pattern]
			mu.Unlock()
			if !reached {
				t.Errorf("%s %s (pattern %s): answered %d without reaching its handler", m, target, r.Pattern, resp.StatusCode)
			}
		}
	}
	if mounted < 8 { // 6 legacy routes + the test's 2
		t.Errorf("only %d mounted handlers in the route table; want the legacy routes and the test's", mounted)
	}
	// The prefix without its slash is the Raw route too (no redirect).
	mu.Lock()
	delete(hit, "GET /test-raw/{path...}")
	mu.Unlock()
	if status, _ := rawGet(t, ts.URL, "/test-raw"); status != http.StatusNoContent || !hit["GET /test-raw/{path...}"] {
		t.Errorf("GET /test-raw: %d, handler reached %v; want the Raw route", status, hit["GET /test-raw/{path...}"])
	}
}
