package api

// Tests that api/openapi.yaml and the server agree: the route table, and
// every request and response of a realistic scenario run over real HTTP.
//
// Conventions of these tests (see also the spec's info.description):
//   - The server pattern "{path...}" is written "{path}" in the spec (OpenAPI
//     cannot express a wildcard); "/{$}" is "/".
//   - HEAD is implied by GET: a HEAD route is ignored on either side when the
//     same path has GET. (The server answers HEAD on every GET route except
//     the legacy routes and attach; the spec lists HEAD only for /v1/files.)
//   - Response object schemas are open in the published spec (clients must
//     ignore unknown fields) but closed here (specCloseSchemas), so the server
//     cannot send a field the spec does not describe.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/sandbox-runtime/sandbox-runtime/fsroot"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// specFile is the spec under test. SPEC_OPENAPI_FILE may name another copy,
// to check that the tests catch a broken spec without touching this one.
var specFile = cmp.Or(os.Getenv("SPEC_OPENAPI_FILE"), "openapi.yaml")

// specLoad loads and validates the spec.
func specLoad(t testing.TB) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(specFile)
	if err != nil {
		t.Fatalf("loading %s: %v", specFile, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", specFile, err)
	}
	return doc
}

var specWildcard = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)\.\.\.\}`)

// specNormalize maps a ServeMux pattern to its spec path.
func specNormalize(pattern string) string {
	p := specWildcard.ReplaceAllString(pattern, "{$1}")
	return strings.TrimSuffix(p, "{$}")
}

// specRouteSet builds "METHOD /path" keys, dropping HEAD where GET exists.
func specRouteSet(routes [][2]string) map[string]bool {
	hasGet := map[string]bool{}
	for _, r := range routes {
		if r[0] == http.MethodGet {
			hasGet[r[1]] = true
		}
	}
	set := map[string]bool{}
	for _, r := range routes {
		if r[0] == http.MethodHead && hasGet[r[1]] {
			continue
		}
		set[r[0]+" "+r[1]] = true
	}
	return set
}

func TestSpecRoutesMatch(t *testing.T) {
	doc := specLoad(t)
	var specRoutes [][2]string
	for p, item := range doc.Paths.Map() {
		for m := range item.Operations() {
			specRoutes = append(specRoutes, [2]string{strings.ToUpper(m), p})
		}
	}
	ts := newTestServer(t, nil)
	var serverRoutes [][2]string
	for _, r := range ts.Routes() {
		m, pattern, ok := strings.Cut(r, " ")
		if !ok {
			t.Fatalf("Routes() entry %q is not \"METHOD pattern\"", r)
		}
		serverRoutes = append(serverRoutes, [2]string{m, specNormalize(pattern)})
	}
	spec, server := specRouteSet(specRoutes), specRouteSet(serverRoutes)
	var missingInSpec, missingInServer []string
	for r := range server {
		if !spec[r] {
			missingInSpec = append(missingInSpec, r)
		}
	}
	for r := range spec {
		if !server[r] {
			missingInServer = append(missingInServer, r)
		}
	}
	sort.Strings(missingInSpec)
	sort.Strings(missingInServer)
	if len(missingInSpec) > 0 {
		t.Errorf("routes served but missing from %s:\n  %s", specFile, strings.Join(missingInSpec, "\n  "))
	}
	if len(missingInServer) > 0 {
		t.Errorf("routes in %s but not served (Server.Routes):\n  %s", specFile, strings.Join(missingInServer, "\n  "))
	}
	if len(server) == 0 {
		t.Error("Server.Routes() is empty")
	}
}

// specCloseSchemas sets additionalProperties: false on every object schema
// that does not say otherwise, so that validation catches undocumented
// fields.
func specCloseSchemas(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(ref *openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if s.Type.Is("object") && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			no := false
			s.AdditionalProperties.Has = &no
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		walk(s.AdditionalProperties.Schema)
		walk(s.Not)
		for _, l := range []openapi3.SchemaRefs{s.OneOf, s.AnyOf, s.AllOf} {
			for _, x := range l {
				walk(x)
			}
		}
	}
	for _, s := range doc.Components.Schemas {
		walk(s)
	}
	media := func(c openapi3.Content) {
		for _, mt := range c {
			walk(mt.Schema)
		}
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				media(op.RequestBody.Value.Content)
			}
			for _, r := range op.Responses.Map() {
				if r.Value != nil {
					media(r.Value.Content)
				}
			}
		}
	}
	for _, r := range doc.Components.Responses {
		if r.Value != nil {
			media(r.Value.Content)
		}
	}
}

// specValidateJSON validates one JSON document against schema.
func specValidateJSON(schema *openapi3.Schema, data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("not JSON: %w: %q", err, data)
	}
	return schema.VisitJSON(v, openapi3.MultiErrors(), openapi3.VisitAsResponse(), openapi3.EnableFormatValidation())
}

// specRoute is one operation of the spec, with a matcher for its path.
type specRoute struct {
	route  *routers.Route
	segs   []string // path segments; "{x}" is a parameter
	greedy bool     // the last segment is {path}: it takes the rest of the path
	consts int      // constant segments (more wins)
}

// specRouter finds the spec operation of a request. kin-openapi's routers
// cannot match a parameter containing "/", which {path} must (the server's
// {path...}), so this one matches the last "{path}" segment greedily.
type specRouter struct {
	doc    *openapi3.T
	routes []specRoute
}

func newSpecRouter(doc *openapi3.T) *specRouter {
	r := &specRouter{doc: doc}
	for p, item := range doc.Paths.Map() {
		for m, op := range item.Operations() {
			sr := specRoute{
				route: &routers.Route{Spec: doc, Path: p, PathItem: item, Method: strings.ToUpper(m), Operation: op},
				segs:  strings.Split(strings.TrimPrefix(p, "/"), "/"),
			}
			sr.greedy = sr.segs[len(sr.segs)-1] == "{path}"
			for _, s := range sr.segs {
				if !strings.HasPrefix(s, "{") {
					sr.consts++
				}
			}
			r.routes = append(r.routes, sr)
		}
	}
	return r
}

// find returns the operation for method and path with its decoded path
// parameters; pathKnown reports whether the path has any operation.
func (r *specRouter) find(method, escapedPath string) (route *routers.Route, params map[string]string, pathKnown bool) {
	segs := strings.Split(strings.TrimPrefix(escapedPath, "/"), "/")
	best := -1
	for _, sr := range r.routes {
		p, ok := sr.match(segs)
		if !ok {
			continue
		}
		pathKnown = true
		if sr.route.Method != method || sr.consts <= best {
			continue
		}
		best, route, params = sr.consts, sr.route, p
	}
	return route, params, pathKnown
}

func (sr specRoute) match(segs []string) (map[string]string, bool) {
	if len(segs) < len(sr.segs) || (!sr.greedy && len(segs) != len(sr.segs)) {
		return nil, false
	}
	params := map[string]string{}
	for i, s := range sr.segs {
		if name, ok := strings.CutPrefix(s, "{"); ok {
			name = strings.TrimSuffix(name, "}")
			raw := segs[i]
			if sr.greedy && i == len(sr.segs)-1 {
				raw = strings.Join(segs[i:], "/")
			}
			v, err := url.PathUnescape(raw)
			if err != nil {
				return nil, false
			}
			if v == "" && sr.greedy {
				// An empty {path} is the base dir, which OpenAPI cannot
				// express (a path parameter is required and non-empty);
				// "." names the same directory.
				v = "."
			}
			if v == "" {
				return nil, false
			}
			params[name] = v
			continue
		}
		if segs[i] != s {
			return nil, false
		}
	}
	return params, true
}

// specClient sends requests to a live server and validates both directions.
type specClient struct {
	doc    *openapi3.T
	router *specRouter
	base   string
	token  string
	hc     *http.Client

	mu      sync.Mutex
	covered map[string]map[int]bool // "METHOD /spec/path" → statuses seen
	skipped map[string]string       // spec path prefix → why its part was skipped
}

func newSpecClient(doc *openapi3.T, base, token string) *specClient {
	return &specClient{
		doc: doc, router: newSpecRouter(doc), base: base, token: token,
		hc:      &http.Client{Timeout: 60 * time.Second},
		covered: map[string]map[int]bool{},
		skipped: map[string]string{},
	}
}

// specReq is one request of the scenario.
type specReq struct {
	method string
	path   string // escaped path and query, e.g. "/v1/commands?state=running"
	body   []byte
	json   any    // marshalled into body when set
	ctype  string // Content-Type of body; default application/json when there is a body
	header map[string]string
	noAuth bool // send no Authorization header
	want   int  // the status expected
	// specRejects: the request breaks the spec (e.g. an unknown field), so
	// request validation must fail; the response is validated all the same.
	specRejects bool
}

// specResp is a validated response.
type specResp struct {
	status int
	header http.Header
	body   []byte
	events []map[string]any // NDJSON lines, decoded
}

func (r *specResp) object(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v: %q", err, r.body)
	}
	return m
}

func (r *specResp) errorCode(t testing.TB) string {
	t.Helper()
	e, _ := r.object(t)["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

// isStub reports whether the answer is the 404 of a route whose handler is
// still a stub (stubs_legacy.go, stubs_ws.go).
func (r *specResp) isStub() bool {
	if r.status != http.StatusNotFound {
		return false
	}
	if string(bytes.TrimSpace(r.body)) == `{"detail":"Not Found"}` {
		return true
	}
	var e errorBody
	return json.Unmarshal(r.body, &e) == nil && e.Error.Code == "not_found" && strings.HasPrefix(e.Error.Message, "no route ")
}

func (c *specClient) authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.SecuritySchemeName != "bearerAuth" {
		return fmt.Errorf("unknown security scheme %q", in.SecuritySchemeName)
	}
	tok, ok := strings.CutPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(tok) == "" {
		return errors.New("no bearer token")
	}
	return nil
}

func (c *specClient) newRequest(t testing.TB, r *specReq) *http.Request {
	t.Helper()
	if r.json != nil {
		b, err := json.Marshal(r.json)
		if err != nil {
			t.Fatal(err)
		}
		r.body = b
	}
	req, err := http.NewRequest(r.method, c.base+r.path, bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if r.body != nil {
		ct := r.ctype
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if !r.noAuth && c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	return req
}

// validateRequest checks req (a copy with its own body) against the spec.
func (c *specClient) validateRequest(req *http.Request, body []byte) (*openapi3filter.RequestValidationInput, error) {
	route, params, pathKnown := c.router.find(req.Method, req.URL.EscapedPath())
	if route == nil {
		if pathKnown {
			return nil, fmt.Errorf("%s %s: the spec has the path but not the method", req.Method, req.URL.Path)
		}
		return nil, fmt.Errorf("%s %s: no operation in the spec", req.Method, req.URL.Path)
	}
	vreq := req.Clone(context.Background())
	vreq.Body = io.NopCloser(bytes.NewReader(body))
	in := &openapi3filter.RequestValidationInput{
		Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{
			MultiError:          true,
			SkipSettingDefaults: true,
			AuthenticationFunc:  c.authenticate,
		},
	}
	return in, openapi3filter.ValidateRequest(context.Background(), in)
}

// do sends r, checks its status, and validates request and response.
func (c *specClient) do(t testing.TB, r specReq) *specResp {
	t.Helper()
	req := c.newRequest(t, &r)
	in, verr := c.validateRequest(req, r.body)
	if in == nil {
		t.Fatalf("%v", verr)
	}
	switch {
	case r.specRejects && verr == nil:
		t.Errorf("%s %s: the spec accepts this request, but it should not (server answers %d)", r.method, r.path, r.want)
	case !r.specRejects && verr != nil:
		t.Errorf("%s %s: request does not match the spec: %v", r.method, r.path, verr)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", r.method, r.path, err)
	}
	out := &specResp{status: resp.StatusCode, header: resp.Header, body: body}
	if out.isStub() {
		return out // the caller skips
	}
	if resp.StatusCode != r.want {
		t.Fatalf("%s %s: status %d, want %d; body %.600s", r.method, r.path, resp.StatusCode, r.want, body)
	}
	c.validateResponse(t, in, out)
	return out
}

func (c *specClient) validateResponse(t testing.TB, in *openapi3filter.RequestValidationInput, out *specResp) {
	t.Helper()
	name := in.Request.Method + " " + in.Request.URL.RequestURI()
	ct := out.header.Get("Content-Type")
	ndjson := strings.HasPrefix(ct, "application/x-ndjson")
	rin := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 out.status,
		Header:                 out.header,
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
			ExcludeResponseBody:   ndjson,
			SchemaValidationOptions: []openapi3.SchemaValidationOption{
				openapi3.EnableFormatValidation(),
			},
		},
	}
	rin.SetBodyBytes(out.body)
	if err := openapi3filter.ValidateResponse(context.Background(), rin); err != nil {
		t.Errorf("%s: response %d does not match the spec: %v\nbody: %.1000s", name, out.status, err, out.body)
	}
	if out.header.Get("Sandbox-Runtime-Version") == "" || out.header.Get("X-Request-ID") == "" {
		t.Errorf("%s: Sandbox-Runtime-Version or X-Request-ID missing: %v", name, out.header)
	}
	if ndjson {
		mt := in.Route.Operation.Responses.Status(out.status).Value.Content.Get(ct)
		if mt == nil || mt.Schema == nil {
			t.Fatalf("%s: no schema for %s %d", name, ct, out.status)
		}
		sc := bufio.NewScanner(bytes.NewReader(out.body))
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if err := specValidateJSON(mt.Schema.Value, line); err != nil {
				t.Errorf("%s: event line does not match the Event schema: %v\nline: %.600s", name, err, line)
			}
			var ev map[string]any
			if err := json.Unmarshal(line, &ev); err != nil {
				t.Fatalf("%s: event line is not a JSON object: %q", name, line)
			}
			out.events = append(out.events, ev)
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		if len(out.events) == 0 {
			t.Errorf("%s: empty event stream", name)
		}
	}
	c.cover(in.Route.Method+" "+in.Route.Path, out.status)
}

func (c *specClient) cover(op string, status int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.covered[op] == nil {
		c.covered[op] = map[int]bool{}
	}
	c.covered[op][status] = true
}

// skip was for parts of the scenario whose handlers were still stubs; now
// that every handler is in, it fails the test (a stub is a regression).
func (c *specClient) skip(t *testing.T, why string, prefixes ...string) {
	t.Helper()
	c.mu.Lock()
	for _, p := range prefixes {
		c.skipped[p] = why
	}
	c.mu.Unlock()
	// Every handler is in: a route that still answers like a stub is a
	// failure, never a skip.
	t.Fatalf("%s: the handler is missing", why)
}

// raw sends a request that has no operation in the spec (405, unknown
// routes) and validates the body against a component schema.
func (c *specClient) raw(t testing.TB, method, path string, want int, schema string) *specResp {
	t.Helper()
	req := c.newRequest(t, &specReq{method: method, path: path})
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, want, body)
	}
	if err := specValidateJSON(c.doc.Components.Schemas[schema].Value, body); err != nil {
		t.Errorf("%s %s: body does not match %s: %v: %s", method, path, schema, err, body)
	}
	return &specResp{status: resp.StatusCode, header: resp.Header, body: body}
}

// specEventTypes lists the types of a stream's events.
func specEventTypes(evs []map[string]any) []string {
	var out []string
	for _, e := range evs {
		s, _ := e["type"].(string)
		out = append(out, s)
	}
	return out
}

// specClock is a runtime.Clock the test moves by hand.
type specClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *specClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *specClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func specTokenFile(t testing.TB, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte("  "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSpecResponsesValidate(t *testing.T) {
	doc := specLoad(t)
	specCloseSchemas(doc)
	const token = "spec-test-token"
	ts := newTestServer(t, func(cfg *runtime.Config, o *Options) {
		cfg.MaxRunning = 8
		cfg.MaxRetained = 32
		cfg.OutputLimit = 4096
		cfg.StdinLimit = 64
		o.HeartbeatInterval = 50 * time.Millisecond
		o.TokenFile = specTokenFile(t, token)
	})
	c := newSpecClient(doc, ts.URL, token)

	t.Run("commands", func(t *testing.T) { specScenarioCommands(t, c, ts) })
	t.Run("limits", func(t *testing.T) { specScenarioLimits(t, doc, token) })
	t.Run("attach", func(t *testing.T) { specScenarioAttach(t, c) })
	t.Run("events", func(t *testing.T) { specScenarioEvents(t, c) })
	t.Run("ports", func(t *testing.T) { specScenarioPorts(t, c) })
	t.Run("pty", func(t *testing.T) { specScenarioPTY(t, c) })
	t.Run("files", func(t *testing.T) { specScenarioFiles(t, c, ts) })
	t.Run("watch", func(t *testing.T) { specScenarioWatch(t, c, ts) }) // watch_spec_test.go
	t.Run("legacy", func(t *testing.T) { specScenarioLegacy(t, c) })
	t.Run("contexts", func(t *testing.T) { specScenarioContexts(t, c) })
	t.Run("draining", func(t *testing.T) {
		ts.SetDraining()
		c.do(t, specReq{method: "GET", path: "/v1/health", noAuth: true, want: 503})
	})

	// Every operation must have been exercised with a success status,
	// except in parts skipped because their handlers are still stubs.
	c.mu.Lock()
	defer c.mu.Unlock()
	var missing []string
	for p, item := range doc.Paths.Map() {
		for m := range item.Operations() {
			op := strings.ToUpper(m) + " " + p
			ok := false
			for st := range c.covered[op] {
				ok = ok || (st >= 200 && st < 300) || st == http.StatusSwitchingProtocols
			}
			if ok || m == http.MethodHead && c.covered[op] != nil {
				continue
			}
			why := ""
			for prefix, w := range c.skipped {
				if strings.HasPrefix(p, prefix) {
					why = w
				}
			}
			if why != "" {
				t.Logf("not covered (skipped: %s): %s", why, op)
				continue
			}
			missing = append(missing, op)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("operations of the spec never answered 2xx in the scenario:\n  %s", strings.Join(missing, "\n  "))
	}
}

// specScenarioCommands runs the v1 command endpoints on ts (limits: 8
// running, 32 retained, 4 KiB output, 64 B stdin queue, 50 ms heartbeats).
func specScenarioCommands(t *testing.T, c *specClient, ts *testServer) {
	// Public routes need no token; the others do.
	c.do(t, specReq{method: "GET", path: "/", noAuth: true, want: 200})
	c.do(t, specReq{method: "GET", path: "/v1/health", noAuth: true, want: 200})
	r := c.do(t, specReq{method: "GET", path: "/v1/info", noAuth: true, want: 401, specRejects: true})
	if r.errorCode(t) != "unauthorized" {
		t.Errorf("401 code %q", r.errorCode(t))
	}
	c.do(t, specReq{method: "GET", path: "/v1/commands", noAuth: true, want: 401, specRejects: true})

	r = c.do(t, specReq{method: "GET", path: "/v1/info", want: 200, header: map[string]string{"X-Request-ID": "spec-rid-1"}})
	if got := r.header.Get("X-Request-ID"); got != "spec-rid-1" {
		t.Errorf("X-Request-ID not echoed: %q", got)
	}
	if lim := r.object(t)["limits"].(map[string]any); lim["max_running"] != float64(8) || lim["stdin_limit_bytes"] != float64(64) {
		t.Errorf("info limits do not reflect the config: %v", lim)
	}
	r = c.do(t, specReq{method: "GET", path: "/metrics", want: 200})
	if !bytes.Contains(r.body, []byte("sandbox_runtime_commands_started_total")) {
		t.Errorf("metrics lack sandbox_runtime_commands_started_total")
	}

	// Browser refusals (protocol.md §1): a body that is not JSON, a foreign Origin.
	r = c.do(t, specReq{method: "POST", path: "/v1/commands", body: []byte(`{"argv":["true"]}`), ctype: "text/plain", want: 415, specRejects: true})
	if r.errorCode(t) != "unsupported_media_type" {
		t.Errorf("415 code %q", r.errorCode(t))
	}
	r = c.do(t, specReq{method: "POST", path: "/v1/commands", json: map[string]any{"argv": []string{"true"}}, header: map[string]string{"Origin": "http://evil.example"}, want: 403})
	if r.errorCode(t) != "forbidden" {
		t.Errorf("403 code %q", r.errorCode(t))
	}

	// A command with stdout, stderr and non-UTF-8 output.
	r = c.do(t, specReq{method: "POST", path: "/v1/commands", want: 201,
		json: map[string]any{"argv": []string{"sh", "-c", `printf 'out\n'; printf 'err\n' >&2; printf '\377\376'`}, "envs": map[string]string{"SPEC": "1"}, "timeout": 30.5}})
	first := r.object(t)["command_id"].(string)
	if loc := r.header.Get("Location"); loc != "/v1/commands/"+first {
		t.Errorf("Location %q", loc)
	}
	r = c.do(t, specReq{method: "GET", path: "/v1/commands/" + first + "?wait=10", want: 200})
	if st := r.object(t); st["state"] != "exited" || st["exit_code"] != float64(0) || st["resources"] == nil {
		t.Fatalf("after wait: %s", r.body)
	}
	r = c.do(t, specReq{method: "GET", path: "/v1/commands/" + first + "/output?follow=false", want: 200})
	types := specEventTypes(r.events)
	if types[len(types)-1] != "exit" || !slices.Contains(types, "output") {
		t.Errorf("replay events %v", types)
	}
	base64Seen := false
	for _, e := range r.events {
		base64Seen = base64Seen || e["encoding"] == "base64"
	}
	if !base64Seen {
		t.Errorf("no base64 output event for non-UTF-8 bytes: %s", r.body)
	}
	r = c.do(t, specReq{method: "GET", path: "/v1/commands/" + first + "/output?cursor=4&max_wait=5", want: 200})
	if types := specEventTypes(r.events); types[len(types)-1] != "exit" {
		t.Errorf("follow of a finished command: %v", types)
	}

	// POST ?stream=true until exit.
	r = c.do(t, specReq{method: "POST", path: "/v1/commands?stream=true&max_wait=10", want: 201,
		json: map[string]any{"command": `sh -c 'echo streamed'`}})
	if types := specEventTypes(r.events); types[0] != "started" || types[len(types)-1] != "exit" || r.events[0]["next_cursor"] != float64(0) {
		t.Errorf("stream events %v", types)
	}

	// POST ?stream=true on a command that outlives the window: started,
	// heartbeats (every 50 ms for 1 s), then end max_wait. cat waits for stdin EOF.
	r = c.do(t, specReq{method: "POST", path: "/v1/commands?stream=true&max_wait=1", want: 201,
		json: map[string]any{"argv": []string{"cat"}, "stdin": true}})
	types = specEventTypes(r.events)
	if types[0] != "started" || !slices.Contains(types, "heartbeat") || types[len(types)-1] != "end" || r.events[len(r.events)-1]["reason"] != "max_wait" {
		t.Errorf("windowed stream events %v", types)
	}
	cat := r.events[0]["status"].(map[string]any)["command_id"].(string)
	r = c.do(t, specReq{method: "GET", path: "/v1/commands/" + cat + "/output?follow=false", want: 200})
	if e := r.events[len(r.events)-1]; e["type"] != "end" || e["reason"] != "caught_up" {
		t.Errorf("follow=false on a running command: %s", r.body)
	}

	// stdin.
	r = c.do(t, specReq{method: "POST", path: "/v1/commands/" + cat + "/stdin", want: 202, json: map[string]any{"data": "hello\n"}})
	if r.object(t)["queued_bytes"] != float64(6) {
		t.Errorf("stdin: %s", r.body)
	}
	r = c.do(t, specReq{method: "POST", path: "/v1/commands/" + cat + "/stdin", want: 429, json: map[string]any{"data": strings.Repeat("x", 65)}})
	if r.errorCode(t) != "stdin_full" || r.header.Get("Retry-After") == "" {
		t.Errorf("stdin_full: %v %s", r.header, r.body)
	}
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + cat + "/stdin", want: 400, json: map[string]any{"data": "!!!", "encoding": "base64"}})
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + cat + "/stdin", want: 400, json: map[string]any{"data": "x", "bogus": true}, specRejects: true})
	r = c.do(t, specReq{method: "POST", path: "/v1/commands/" + cat + "/stdin", want: 202, json: map[string]any{"data": "aGkK", "encoding": "base64", "eof": true}})
	if r.object(t)["stdin_closed"] != true {
		t.Errorf("eof: %s", r.body)
	}
	r = c.do(t, specReq{method: "POST", path: "/v1/commands/" + cat + "/stdin", want: 409, json: map[string]any{"data": "late"}})
	if code := r.errorCode(t); code != "stdin_closed" && code != "finished" {
		t.Errorf("stdin after eof: %s", r.body)
	}
	c.do(t, specReq{method: "GET", path: "/v1/commands/" + cat + "?wait=10", want: 200})
	r = c.do(t, specReq{method: "GET", path: "/v1/commands/" + cat + "/output?follow=false", want: 200})
	if !bytes.Contains(r.body, []byte(`"data":"hello\nhi\n"`)) && !bytes.Contains(r.body, []byte(`"data":"hi\n"`)) {
		t.Errorf("cat output: %s", r.body)
	}

	// A long command: stdin_not_enabled, signal, list, kill.
	r = c.do(t, specReq{method: "POST", path: "/v1/commands", want: 201, json: map[string]any{"argv": []string{"sleep", "30"}}})
	sleeper := r.object(t)["command_id"].(string)
	if st := r.object(t); st["stdin"] != false || st["stdin_closed"] != true {
		t.Errorf("no-stdin status: %s", r.body)
	}
	r = c.do(t, specReq{method: "POST", path: "/v1/commands/" + sleeper + "/stdin", want: 409, json: map[string]any{"data": "x"}})
	if r.errorCode(t) != "stdin_not_enabled" {
		t.Errorf("stdin_not_enabled: %s", r.body)
	}
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + sleeper + "/signal", want: 200, json: map[string]any{"signal": "SIGCONT"}})
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + sleeper + "/signal", want: 200, json: map[string]any{"signal": int(syscall.SIGCONT)}})
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + sleeper + "/signal", want: 400, json: map[string]any{"signal": "SIGNOPE"}})
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + sleeper + "/signal", want: 400, json: map[string]any{"signal": true}, specRejects: true})
	r = c.do(t, specReq{method: "GET", path: "/v1/commands?state=running", want: 200})
	if !bytes.Contains(r.body, []byte(sleeper)) {
		t.Errorf("running list lacks %s: %s", sleeper, r.body)
	}
	r = c.do(t, specReq{method: "GET", path: "/v1/commands", want: 200})
	if n := len(r.object(t)["commands"].([]any)); n < 4 {
		t.Errorf("list has %d commands", n)
	}
	c.do(t, specReq{method: "GET", path: "/v1/commands?state=bogus", want: 400, specRejects: true})
	c.do(t, specReq{method: "GET", path: "/v1/commands?bogus=1", want: 400}) // unknown query parameters: OpenAPI cannot say
	r = c.do(t, specReq{method: "POST", path: "/v1/commands/" + sleeper + "/kill", want: 200})
	if st := r.object(t); st["state"] != "cancelled" || st["signal"] != "SIGTERM" || st["exit_code"] != float64(-15) {
		t.Errorf("kill: %s", r.body)
	}
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + sleeper + "/kill", want: 200, json: map[string]any{}})
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + sleeper + "/kill", want: 400, json: map[string]any{"now": true}, specRejects: true})
	r = c.do(t, specReq{method: "POST", path: "/v1/commands/" + sleeper + "/signal", want: 409, json: map[string]any{"signal": "INT"}})
	if r.errorCode(t) != "finished" {
		t.Errorf("signal after finish: %s", r.body)
	}
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + sleeper + "/stdin", want: 409, json: map[string]any{"data": "x"}})

	// Idempotent creation and conflicts.
	id := uuid.NewString()
	req := map[string]any{"argv": []string{"true"}, "command_id": id}
	c.do(t, specReq{method: "POST", path: "/v1/commands", want: 201, json: req})
	c.do(t, specReq{method: "POST", path: "/v1/commands", want: 200, json: req})
	r = c.do(t, specReq{method: "POST", path: "/v1/commands?stream=true&max_wait=10", want: 200,
		json: map[string]any{"argv": []string{"true"}, "command_id": strings.ToUpper(id)}})
	if types := specEventTypes(r.events); types[0] != "started" || types[len(types)-1] != "exit" {
		t.Errorf("idempotent stream: %v", types)
	}
	r = c.do(t, specReq{method: "POST", path: "/v1/commands", want: 409, json: map[string]any{"argv": []string{"false"}, "command_id": id}})
	if r.errorCode(t) != "conflict" {
		t.Errorf("conflict: %s", r.body)
	}

	// Refusals.
	c.do(t, specReq{method: "POST", path: "/v1/commands", want: 422, json: map[string]any{"argv": []string{"/nonexistent/spec-no-such-binary"}}})
	for _, bad := range []any{
		map[string]any{"argv": []string{"true"}, "bogus": 1},
		map[string]any{"argv": []string{"true"}, "command": "true"},
		map[string]any{"argv": []string{}},
		map[string]any{},
		map[string]any{"argv": []string{"true"}, "timeout": 0},
		map[string]any{"argv": []string{"true"}, "command_id": "not-a-uuid"},
		[]string{"true"},
	} {
		c.do(t, specReq{method: "POST", path: "/v1/commands", want: 400, json: bad, specRejects: true})
	}
	c.do(t, specReq{method: "POST", path: "/v1/commands", want: 400, body: []byte(`{"argv":`), specRejects: true})
	c.do(t, specReq{method: "POST", path: "/v1/commands", want: 400, json: map[string]any{"argv": []string{"true"}, "cwd": "relative/dir"}})
	c.do(t, specReq{method: "POST", path: "/v1/commands", want: 400, json: map[string]any{"command": `echo 'unbalanced`}})
	c.do(t, specReq{method: "POST", path: "/v1/commands?stream=maybe", want: 400, json: map[string]any{"argv": []string{"true"}}, specRejects: true})
	huge := map[string]any{"argv": []string{"true"}, "cwd": "/" + strings.Repeat("a", 1<<20)}
	r = c.do(t, specReq{method: "POST", path: "/v1/commands", want: 413, json: huge})
	if r.errorCode(t) != "too_large" {
		t.Errorf("too_large: %s", r.body)
	}
	c.do(t, specReq{method: "GET", path: "/v1/commands/" + first + "?wait=abc", want: 400, specRejects: true})
	c.do(t, specReq{method: "GET", path: "/v1/commands/" + first + "/output?cursor=-1", want: 400, specRejects: true})
	c.do(t, specReq{method: "GET", path: "/v1/commands/" + first + "/output?cursor=999999", want: 400})
	c.do(t, specReq{method: "GET", path: "/v1/commands/" + first + "/output?max_wait=-1", want: 400, specRejects: true})
	c.do(t, specReq{method: "GET", path: "/v1/commands/" + first + "/output?follow=sometimes", want: 400, specRejects: true})

	// Unknown ids.
	unknown := uuid.NewString()
	for _, p := range []string{"/v1/commands/" + unknown, "/v1/commands/not-a-uuid", "/v1/commands/" + unknown + "/output"} {
		if r := c.do(t, specReq{method: "GET", path: p, want: 404}); r.errorCode(t) != "not_found" {
			t.Errorf("%s: %s", p, r.body)
		}
	}
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + unknown + "/kill", want: 404})
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + unknown + "/signal", want: 404, json: map[string]any{"signal": 2}})
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + unknown + "/stdin", want: 404, json: map[string]any{"data": "x"}})

	// Truncated output: a gap first when replaying from 0 (4 KiB ring).
	r = c.do(t, specReq{method: "POST", path: "/v1/commands", want: 201,
		json: map[string]any{"argv": []string{"sh", "-c", "head -c 10000 /dev/zero | tr '\\0' a"}}})
	big := r.object(t)["command_id"].(string)
	r = c.do(t, specReq{method: "GET", path: "/v1/commands/" + big + "?wait=10", want: 200})
	if st := r.object(t); st["output_truncated"] != true || st["next_cursor"] != float64(10000) {
		t.Errorf("truncated status: %s", r.body)
	}
	r = c.do(t, specReq{method: "GET", path: "/v1/commands/" + big + "/output?cursor=0&follow=false", want: 200})
	if types := specEventTypes(r.events); types[0] != "gap" || types[len(types)-1] != "exit" {
		t.Errorf("gap replay: %v", types)
	}

	// No operation in the spec: 405 and unknown routes.
	r = c.raw(t, "DELETE", "/v1/info", 405, "Error")
	if r.header.Get("Allow") == "" || r.errorCode(t) != "method_not_allowed" {
		t.Errorf("405: %v %s", r.header, r.body)
	}
	c.raw(t, "PUT", "/execute", 405, "LegacyDetail")
	c.raw(t, "GET", "/v1/nope", 404, "Error")
	c.raw(t, "GET", "/nope", 404, "LegacyDetail")
}

// specScenarioLimits runs what needs tiny limits and a hand-moved clock:
// 429, 410 evicted and expired, and shutdown (end shutting_down, 503).
func specScenarioLimits(t *testing.T, doc *openapi3.T, token string) {
	clock := &specClock{t: time.Date(2026, 8, 1, 12, 0, 0, 123456789, time.UTC)}
	ts := newTestServer(t, func(cfg *runtime.Config, o *Options) {
		cfg.MaxRunning = 1
		cfg.MaxRetained = 2
		cfg.Clock = clock
		o.TokenFile = specTokenFile(t, token)
	})
	c := newSpecClient(doc, ts.URL, token)

	r := c.do(t, specReq{method: "POST", path: "/v1/commands", want: 201, json: map[string]any{"argv": []string{"cat"}, "stdin": true}})
	x := r.object(t)["command_id"].(string)
	r = c.do(t, specReq{method: "POST", path: "/v1/commands", want: 429, json: map[string]any{"argv": []string{"true"}}})
	if r.errorCode(t) != "too_many_running" || r.header.Get("Retry-After") == "" {
		t.Errorf("429: %v %s", r.header, r.body)
	}
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + x + "/stdin", want: 202, json: map[string]any{"eof": true}})
	r = c.do(t, specReq{method: "GET", path: "/v1/commands/" + x + "?wait=10", want: 200})
	if st := r.object(t); st["state"] != "exited" || st["expires_at"] == nil {
		t.Fatalf("x did not finish: %s", r.body)
	}
	clock.Advance(time.Second)

	yid := uuid.NewString()
	yreq := map[string]any{"argv": []string{"true"}, "command_id": yid}
	c.do(t, specReq{method: "POST", path: "/v1/commands", want: 201, json: yreq})
	c.do(t, specReq{method: "GET", path: "/v1/commands/" + yid + "?wait=10", want: 200})
	clock.Advance(time.Second)
	r = c.do(t, specReq{method: "POST", path: "/v1/commands", want: 201, json: map[string]any{"argv": []string{"true"}}}) // evicts x
	// Let it finish: with one running slot the shutdown step below needs it free.
	c.do(t, specReq{method: "GET", path: "/v1/commands/" + r.object(t)["command_id"].(string) + "?wait=10", want: 200})
	for _, p := range []string{"/v1/commands/" + x, "/v1/commands/" + x + "/output"} {
		r = c.do(t, specReq{method: "GET", path: p, want: 410})
		if e := r.object(t)["error"].(map[string]any); e["code"] != "gone" || e["reason"] != "evicted" {
			t.Errorf("%s: %s", p, r.body)
		}
	}
	clock.Advance(16 * time.Minute) // past the default 15 min TTL
	r = c.do(t, specReq{method: "GET", path: "/v1/commands/" + yid, want: 410})
	if e := r.object(t)["error"].(map[string]any); e["reason"] != "expired" {
		t.Errorf("expired: %s", r.body)
	}
	r = c.do(t, specReq{method: "POST", path: "/v1/commands", want: 410, json: yreq})
	if e := r.object(t)["error"].(map[string]any); e["reason"] != "expired" {
		t.Errorf("re-post of an expired id: %s", r.body)
	}
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + yid + "/kill", want: 410})

	// Shutdown: streams end with end/shutting_down, then 503.
	r = c.do(t, specReq{method: "POST", path: "/v1/commands", want: 201, json: map[string]any{"argv": []string{"cat"}, "stdin": true}})
	w := r.object(t)["command_id"].(string)
	ts.EndStreams()
	r = c.do(t, specReq{method: "GET", path: "/v1/commands/" + w + "/output?max_wait=30", want: 200})
	if e := r.events[len(r.events)-1]; e["type"] != "end" || e["reason"] != "shutting_down" {
		t.Errorf("stream at shutdown: %s", r.body)
	}
	ts.SetDraining()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ts.M.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	r = c.do(t, specReq{method: "GET", path: "/v1/commands/" + w, want: 200})
	if st := r.object(t); st["state"] != "terminated" {
		t.Errorf("after shutdown: %s", r.body)
	}
	c.do(t, specReq{method: "POST", path: "/v1/commands", want: 503, json: map[string]any{"argv": []string{"true"}}})
	c.do(t, specReq{method: "GET", path: "/v1/health", noAuth: true, want: 503})
}

// specScenarioAttach runs the WebSocket attachment: the handshake through
// openapi3filter, then every frame against the frame schemas.
func specScenarioAttach(t *testing.T, c *specClient) {
	r := c.do(t, specReq{method: "POST", path: "/v1/commands", want: 201, json: map[string]any{"argv": []string{"cat"}, "stdin": true}})
	id := r.object(t)["command_id"].(string)
	defer c.do(t, specReq{method: "POST", path: "/v1/commands/" + id + "/kill", want: 200})

	r = c.do(t, specReq{method: "GET", path: "/v1/commands/" + id + "/attach?cursor=-1", want: 400, specRejects: true})
	if r.isStub() {
		c.skip(t, "GET /v1/commands/{id}/attach is still the stub (404 \"no route\"); attach.go not in yet", "/v1/commands/{id}/attach")
	}
	c.do(t, specReq{method: "GET", path: "/v1/commands/" + id + "/attach?cursor=999999", want: 400})
	c.do(t, specReq{method: "GET", path: "/v1/commands/" + uuid.NewString() + "/attach", want: 404})

	path := "/v1/commands/" + id + "/attach?cursor=0"
	hdr := http.Header{"Authorization": {"Bearer " + c.token}}
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	conn, resp, err := d.Dial("ws"+strings.TrimPrefix(c.base, "http")+path, hdr)
	if err != nil {
		t.Fatalf("dial: %v (resp %v)", err, resp)
	}
	defer conn.Close()
	// Validate the handshake as an HTTP exchange.
	vreq, _ := http.NewRequest("GET", c.base+path, nil)
	vreq.Header = hdr.Clone()
	vreq.Header.Set("Upgrade", "websocket")
	vreq.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	vreq.Header.Set("Sec-WebSocket-Version", "13")
	in, verr := c.validateRequest(vreq, nil)
	if verr != nil {
		t.Errorf("attach handshake request: %v", verr)
	}
	if in != nil {
		c.validateResponse(t, in, &specResp{status: resp.StatusCode, header: resp.Header})
	}

	schemas := c.doc.Components.Schemas
	send := func(frame map[string]any) {
		t.Helper()
		b, _ := json.Marshal(frame)
		if err := specValidateJSON(schemas["AttachClientFrame"].Value, b); err != nil {
			t.Errorf("client frame %s does not match AttachClientFrame: %v", b, err)
		}
		if err := conn.WriteMessage(websocket.TextMessage, b); err != nil {
			t.Fatal(err)
		}
	}
	// next reads frames until one satisfies stop; every frame is validated.
	next := func(what string, stop func(map[string]any) bool) map[string]any {
		t.Helper()
		for {
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			mt, b, err := conn.ReadMessage()
			if err != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
			if mt != websocket.TextMessage {
				t.Errorf("non-text frame %d", mt)
				continue
			}
			if err := specValidateJSON(schemas["AttachServerFrame"].Value, b); err != nil {
				t.Errorf("server frame does not match AttachServerFrame: %v: %s", err, b)
			}
			var f map[string]any
			json.Unmarshal(b, &f)
			if stop(f) {
				return f
			}
		}
	}
	send(map[string]any{"type": "stdin", "data": "ping\n"})
	next("the echoed output", func(f map[string]any) bool { return f["type"] == "output" })
	send(map[string]any{"type": "signal", "signal": "SIGCONT"})
	conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"bogus"}`))
	f := next("an error frame", func(f map[string]any) bool { return f["type"] == "error" })
	if err := specValidateJSON(schemas["AttachErrorFrame"].Value, specMustJSON(f)); err != nil {
		t.Errorf("error frame: %v", err)
	}
	send(map[string]any{"type": "kill"})
	f = next("the exit event", func(f map[string]any) bool { return f["type"] == "exit" })
	if st := f["status"].(map[string]any); st["state"] != "cancelled" {
		t.Errorf("exit after kill frame: %v", f)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := conn.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Errorf("after exit: %v, want a normal close", err)
	}
}

func specMustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// specScenarioFiles runs /v1/files.
func specScenarioFiles(t *testing.T, c *specClient, ts *testServer) {
	r := c.do(t, specReq{method: "PUT", path: "/v1/files/dir/a.txt?mode=0644", body: []byte("hello"), ctype: "application/octet-stream", want: 204})
	if r.isStub() {
		c.skip(t, "/v1/files is still the stub (404 \"no route\"); files.go not in yet", "/v1/files/")
	}
	r = c.do(t, specReq{method: "GET", path: "/v1/files/dir/a.txt", want: 200})
	if string(r.body) != "hello" {
		t.Errorf("GET file: %q", r.body)
	}
	r = c.do(t, specReq{method: "GET", path: "/v1/files/dir%2Fa.txt", header: map[string]string{"Range": "bytes=1-2"}, want: 206})
	if string(r.body) != "el" {
		t.Errorf("range: %q", r.body)
	}
	c.do(t, specReq{method: "GET", path: "/v1/files/dir/a.txt", header: map[string]string{"Range": "bytes=100-200"}, want: 416})
	c.do(t, specReq{method: "HEAD", path: "/v1/files/dir/a.txt", want: 200})
	r = c.do(t, specReq{method: "GET", path: "/v1/files/dir", want: 200})
	if !bytes.Contains(r.body, []byte(`"a.txt"`)) {
		t.Errorf("listing: %s", r.body)
	}
	c.do(t, specReq{method: "GET", path: "/v1/files/", want: 200})
	c.do(t, specReq{method: "GET", path: "/v1/files/nope.txt", want: 404})
	c.do(t, specReq{method: "PUT", path: "/v1/files/dir", body: []byte("x"), ctype: "application/octet-stream", want: 400})
	c.do(t, specReq{method: "PUT", path: "/v1/files/dir/b.txt?mode=banana", body: []byte("x"), ctype: "application/octet-stream", want: 400, specRejects: true})
	if err := os.Symlink(t.TempDir(), filepath.Join(ts.BaseDir, "outside")); err != nil {
		t.Fatal(err)
	}
	c.do(t, specReq{method: "GET", path: "/v1/files/outside", want: 403})
	c.do(t, specReq{method: "GET", path: "/v1/files/..%2F..%2Fetc%2Fpasswd", want: 403})
	c.do(t, specReq{method: "PUT", path: "/v1/files/..%2Fx", body: []byte("x"), ctype: "application/octet-stream", want: 403})
	c.do(t, specReq{method: "GET", path: "/v1/files/dir/a.txt", header: map[string]string{"If-Match": `"nope"`}, want: 412})
	// All listings' budget leased: a listing is 503 too_busy.
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
	wait := ts.listWait
	ts.listWait = 10 * time.Millisecond
	c.do(t, specReq{method: "GET", path: "/v1/files/dir", want: 503})
	ts.listWait = wait
	for _, l := range leases {
		l.Release()
	}
	c.do(t, specReq{method: "DELETE", path: "/v1/files/dir", want: 409})
	c.do(t, specReq{method: "DELETE", path: "/v1/files/dir?recursive=true", want: 204})
	c.do(t, specReq{method: "DELETE", path: "/v1/files/dir", want: 404})
	c.do(t, specReq{method: "DELETE", path: "/v1/files/", want: 400})
}

// specScenarioLegacy runs the legacy API.
func specScenarioLegacy(t *testing.T, c *specClient) {
	r := c.do(t, specReq{method: "POST", path: "/execute", json: map[string]any{"command": "echo hello", "extra": 1}, want: 200})
	if r.isStub() {
		c.skip(t, "the legacy routes are still stubs (404 {\"detail\":\"Not Found\"}); legacy.go not in yet",
			"/execute", "/upload", "/download/", "/list/", "/exists/")
	}
	if m := r.object(t); m["stdout"] != "hello\n" || m["exit_code"] != float64(0) {
		t.Errorf("execute: %s", r.body)
	}
	r = c.do(t, specReq{method: "POST", path: "/execute", json: map[string]any{"command": "no-such-binary-for-spec"}, want: 200})
	if m := r.object(t); m["exit_code"] != float64(1) {
		t.Errorf("execute of a missing binary: %s", r.body)
	}
	c.do(t, specReq{method: "POST", path: "/execute", json: map[string]any{"command": "true"}, header: map[string]string{"X-Sandbox-Timeout": "5"}, want: 200})
	c.do(t, specReq{method: "POST", path: "/execute", json: map[string]any{"cmd": "true"}, want: 422, specRejects: true})
	c.do(t, specReq{method: "POST", path: "/execute", body: []byte("{"), want: 422, specRejects: true})
	c.do(t, specReq{method: "POST", path: "/execute", body: []byte(`{"command":"true"}`), ctype: "text/plain", want: 422, specRejects: true})
	c.do(t, specReq{method: "POST", path: "/execute", json: map[string]any{"command": strings.Repeat("a", 1<<20)}, want: 413})
	c.do(t, specReq{method: "POST", path: "/execute", json: map[string]any{"command": "true"}, noAuth: true, want: 401, specRejects: true})

	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	part, _ := mw.CreateFormFile("file", "sub/up.txt")
	part.Write([]byte("uploaded"))
	mw.Close()
	r = c.do(t, specReq{method: "POST", path: "/upload", body: mp.Bytes(), ctype: mw.FormDataContentType(), want: 200})
	if r.isStub() {
		c.skip(t, "POST /upload is still the stub", "/upload", "/download/", "/list/", "/exists/")
	}
	var empty bytes.Buffer
	mw = multipart.NewWriter(&empty)
	mw.WriteField("other", "x")
	mw.Close()
	c.do(t, specReq{method: "POST", path: "/upload", body: empty.Bytes(), ctype: mw.FormDataContentType(), want: 422, specRejects: true})
	c.do(t, specReq{method: "POST", path: "/upload", body: empty.Bytes(), ctype: "multipart/form-data", want: 400, specRejects: true})
	var evil bytes.Buffer
	mw = multipart.NewWriter(&evil)
	part, _ = mw.CreateFormFile("file", "../evil.txt")
	part.Write([]byte("x"))
	mw.Close()
	c.do(t, specReq{method: "POST", path: "/upload", body: evil.Bytes(), ctype: mw.FormDataContentType(), want: 403})

	r = c.do(t, specReq{method: "GET", path: "/download/sub/up.txt", want: 200})
	if r.isStub() {
		c.skip(t, "the legacy file routes are still stubs", "/download/", "/list/", "/exists/")
	}
	if string(r.body) != "uploaded" {
		t.Errorf("download: %q", r.body)
	}
	c.do(t, specReq{method: "GET", path: "/download/sub%2Fup.txt", want: 200})
	c.do(t, specReq{method: "GET", path: "/download/sub", want: 404})
	c.do(t, specReq{method: "GET", path: "/download/../etc/passwd", want: 403})
	r = c.do(t, specReq{method: "GET", path: "/list/", want: 200})
	if !bytes.Contains(r.body, []byte(`"sub"`)) {
		t.Errorf("list: %s", r.body)
	}
	c.do(t, specReq{method: "GET", path: "/list/sub", want: 200})
	c.do(t, specReq{method: "GET", path: "/list/sub/up.txt", want: 404})
	r = c.do(t, specReq{method: "GET", path: "/exists/sub/up.txt", want: 200})
	if m := r.object(t); m["exists"] != true || m["path"] != "sub/up.txt" {
		t.Errorf("exists: %s", r.body)
	}
	c.do(t, specReq{method: "GET", path: "/exists/nope", want: 200})
}
