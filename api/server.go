// Package api is the v1 protocol of sandbox-runtime over HTTP and WebSocket
// (commands, streams, attach, files, health, info) and the one server that
// serves it: the middleware every route goes through (request ids and logs,
// panics, origin check, body limits, connection cap, auth) lives here, and
// other groups of handlers (the legacy API, package legacy) are mounted on it
// as routes (Options.Routes). It decodes requests, calls the runtime.Manager,
// and encodes answers (the types of package wire). The protocol is
// docs/protocol.md; openapi.yaml beside this file is its machine-readable
// form and is checked against the route table in tests.
package api

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/fsroot"
	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/metrics"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// Options configures a Server.
type Options struct {
	Version string // reported in /v1/info and the Sandbox-Runtime-Version header
	BaseDir string // SANDBOX_BASE_DIR, the root of /v1/files
	// TokenFile, when set, holds the bearer token every route but GET / and
	// GET /v1/health requires. It is re-read every 2 s until EndStreams
	// (auth.go).
	TokenFile string
	// HeartbeatInterval is the silence after which a stream sends a heartbeat
	// line (and the WebSocket ping period). Default 10 s.
	HeartbeatInterval time.Duration
	Logger            *zap.Logger
	Metrics           *metrics.Metrics // from metrics.New; nil: nothing counted, no /metrics, no "metrics" feature

	// AllowedOrigins is a comma-separated list of the browser origins
	// (scheme://host[:port], or "*") allowed besides the daemon's own host,
	// as SANDBOX_ALLOWED_ORIGINS; see origin.go. Entries that
	// ParseAllowedOrigins refuses are ignored.
	AllowedOrigins string
	// Isolation is how commands are kept from starving the runtime, as
	// /v1/info announces it (main reads it of the reaper). An empty Mode
	// is announced as threads mode, "not configured".
	Isolation wire.Isolation

	// Routes are the routes another group of handlers adds (the legacy API
	// of package legacy), served behind the same middleware as the v1 ones.
	Routes []httpx.Route
	// Features are the /v1/info features of Routes (legacy.Feature), which
	// /v1/info announces beside the server's own: a feature is listed only
	// where its routes are mounted.
	Features []string
	// Refuse writes the server's own error answers outside /v1 (404 for an
	// unknown path, 503 when too many bodies are in flight) in the shape
	// the clients of those paths expect; nil means the v1 error body.
	Refuse func(w http.ResponseWriter, status int, code, msg string)
}

// Server serves the routes of protocol.md §3 and §5. Create it with New.
type Server struct {
	m        *runtime.Manager
	opts     Options
	log      *zap.Logger
	auth     *tokenAuth
	metrics  *metrics.Metrics
	features []string // announced by /v1/info: features() of the mounted routes
	routes   []httpx.Route
	raw      []rawRoute // the Raw routes, served before the mux
	handler  http.Handler
	draining atomic.Bool
	started  time.Time // when this server was made: /v1/info started_at
	// streamsCtx is cancelled when open streams must end at once (the last
	// step of shutdown); they then send their final line.
	streamsCtx  context.Context
	stopStreams context.CancelFunc
	hijacked    *connSet
	bodies      *bodyGate      // requests reading a body (bodylimit.go)
	conns       *connLimiter   // open connections (conncap.go)
	listings    *fsroot.Budget // the names all v1 listings hold (files.go)
	listWait    time.Duration  // how long a listing waits for its share (listWait; tests lower it)
	origins     originPolicy
	watchSt     watchState // the file watches (watch.go)
}

// rawRoute is a Raw route with its handler.
type rawRoute struct {
	prefix  string // RawPrefix, e.g. "/list/"
	pattern string
	h       http.Handler
}

// New returns a Server for m.
func New(m *runtime.Manager, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 10 * time.Second
	}
	s := &Server{m: m, opts: opts, log: opts.Logger.Named("api"), metrics: opts.Metrics, hijacked: newConnSet(), bodies: newBodyGate(), started: time.Now().UTC()}
	s.bodies.refuse = s.refuse
	s.listings, s.listWait = fsroot.NewBudget(fsroot.ListBudgetBytes), listWait
	s.conns = newConnLimiter(fdSoftLimit(), s.log.Named("conns"))
	s.streamsCtx, s.stopStreams = context.WithCancel(context.Background())
	s.auth = newTokenAuth(s.streamsCtx, opts.TokenFile, s.log.Named("auth"))
	s.origins = newOriginPolicy(opts.AllowedOrigins)
	s.routes = s.routeTable()
	s.features = s.featureList()
	mux := http.NewServeMux()
	for _, r := range s.routes {
		if r.Raw {
			// Not in the mux: the middleware serves every path under
			// the prefix before ServeMux could clean or redirect it (a
			// mux entry would never be reached).
			s.raw = append(s.raw, rawRoute{prefix: r.RawPrefix(), pattern: r.Pattern, h: s.methodHandler(r)})
			continue
		}
		mux.Handle(r.Pattern, s.methodHandler(r))
	}
	s.handler = s.middleware(mux)
	return s
}

func (s *Server) routeTable() []httpx.Route {
	type route = httpx.Route
	v1 := []route{
		{Pattern: "/v1/health", Methods: map[string]http.HandlerFunc{"GET": s.health}, Public: true},
		{Pattern: "/v1/info", Methods: map[string]http.HandlerFunc{"GET": s.info}},
		{Pattern: "/v1/commands", Methods: map[string]http.HandlerFunc{"GET": s.listCommands, "POST": s.createCommand}},
		{Pattern: "/v1/commands/{id}", Methods: map[string]http.HandlerFunc{"GET": s.getCommand}},
		{Pattern: "/v1/commands/{id}/output", Methods: map[string]http.HandlerFunc{"GET": s.commandOutput}},
		{Pattern: "/v1/commands/{id}/attach", Methods: map[string]http.HandlerFunc{"GET": s.attach}, NoHead: true},
		{Pattern: "/v1/commands/{id}/stdin", Methods: map[string]http.HandlerFunc{"POST": s.writeStdin}},
		{Pattern: "/v1/commands/{id}/signal", Methods: map[string]http.HandlerFunc{"POST": s.signalCommand}},
		{Pattern: "/v1/commands/{id}/kill", Methods: map[string]http.HandlerFunc{"POST": s.killCommand}},
		{Pattern: "/v1/commands/{id}/resize", Methods: map[string]http.HandlerFunc{"POST": s.resizeCommand}},
		{Pattern: "/v1/events", Methods: map[string]http.HandlerFunc{"GET": s.events}},
		{Pattern: "/v1/ports", Methods: map[string]http.HandlerFunc{"GET": s.ports}},
		{Pattern: "/v1/watches", Methods: map[string]http.HandlerFunc{"GET": s.listWatches, "POST": s.createWatch}},
		{Pattern: "/v1/watches/{id}", Methods: map[string]http.HandlerFunc{"GET": s.getWatch, "DELETE": s.deleteWatch}},
		{Pattern: "/v1/watches/{id}/events", Methods: map[string]http.HandlerFunc{"GET": s.watchEvents}},
		{Pattern: "/v1/files/{path...}", Methods: map[string]http.HandlerFunc{"GET": s.getFile, "HEAD": s.getFile, "PUT": s.putFile, "DELETE": s.deleteFile}},
	}
	// code contexts (contexts.go)
	v1 = append(v1, s.contextRoutes()...)
	if s.metrics != nil { // without metrics /metrics is not a route: the JSON 404 of any other
		v1 = append(v1, route{Pattern: "/metrics", Methods: map[string]http.HandlerFunc{"GET": s.metrics.ServeHTTP}})
	}
	out := append(v1, s.opts.Routes...)
	return append(out, route{Pattern: "/", Methods: nil}) // everything else: 404
}

// Routes lists "METHOD pattern" for every served route, for the spec test.
func (s *Server) Routes() []string {
	var out []string
	for _, r := range s.routes {
		for m := range r.Methods {
			out = append(out, m+" "+r.Pattern)
		}
	}
	return out
}

// Handler returns the root handler.
func (s *Server) Handler() http.Handler { return s.handler }

// SetDraining makes /v1/health answer 503 (the first step of shutdown).
func (s *Server) SetDraining() { s.draining.Store(true) }

// EndStreams ends every open NDJSON stream and WebSocket with a final
// `end` event (reason shutting_down) and closes hijacked connections, which
// http.Server.Shutdown does not track.
func (s *Server) EndStreams() {
	s.stopStreams() // also ends the token file's re-reads
	s.closeWatches()
	s.hijacked.closeAll()
	s.auth.stop()
}

func (s *Server) methodHandler(r httpx.Route) http.Handler {
	var allow []string
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "DELETE"} {
		if _, ok := r.Methods[m]; ok {
			allow = append(allow, m)
		}
	}
	allowHeader := strings.Join(allow, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.Methods == nil {
			s.notFound(w, req)
			return
		}
		h, ok := r.Methods[req.Method]
		if !ok && req.Method == http.MethodHead && !r.NoHead {
			h, ok = r.Methods["GET"]
		}
		if !ok {
			w.Header().Set("Allow", allowHeader)
			if r.Refuse != nil {
				r.Refuse(w, http.StatusMethodNotAllowed, "method_not_allowed", "Method Not Allowed")
			} else {
				writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", req.Method+" is not allowed here; allowed: "+allowHeader, nil)
			}
			return
		}
		if !r.Public && !s.auth.allowed(req) {
			writeError(w, http.StatusUnauthorized, "unauthorized", "a valid bearer token is required", nil)
			return
		}
		h(w, req)
	})
}

// notFound answers an unknown route (Options.Refuse's shape outside /v1).
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	if isV1(r.URL.Path) || s.opts.Refuse == nil {
		writeError(w, http.StatusNotFound, "not_found", "no route "+r.URL.Path, nil)
		return
	}
	s.opts.Refuse(w, http.StatusNotFound, "not_found", "Not Found")
}

// refuse writes one of the server's own error answers: the v1 body under
// /v1 (code names the error), Options.Refuse's shape elsewhere.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	if isV1(r.URL.Path) || s.opts.Refuse == nil {
		writeError(w, status, code, msg, nil)
		return
	}
	s.opts.Refuse(w, status, code, msg)
}

func isV1(p string) bool { return strings.HasPrefix(p, "/v1/") || p == "/v1" }

// middleware adds the version and request-id headers, logs each request,
// recovers from panics, and keeps ServeMux from ever redirecting.
func (s *Server) middleware(mux *http.ServeMux) http.Handler {
	files := s.filesHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rid := r.Header.Get("X-Request-ID")
		if rid == "" || len(rid) > 200 {
			rid = uuid.NewString()
		}
		h := w.Header()
		h.Set("Sandbox-Runtime-Version", s.opts.Version)
		h.Set("X-Request-ID", rid)
		rec := &statusRecorder{ResponseWriter: w}
		route := "" // set for the routes served outside the mux
		// The large-decode turns are the Manager's (runtime's ClassDecode).
		r = r.WithContext(httpx.WithDecodeTurns(context.WithValue(r.Context(), requestIDKey{}, rid), s.m))
		defer func() {
			if p := recover(); p != nil {
				s.handlerPanicked(rec, rid, p)
			}
			s.logRequest(rec, r, rid, route, time.Since(start))
		}()
		if !s.browserGate(rec, r) {
			return
		}
		r, release, ok := s.bodies.admit(rec, r)
		if !ok {
			return
		}
		defer release()
		s.dispatch(mux, files, rec, r, &route)
	})
}

// handlerPanicked answers a handler's panic p with a 500 (unless a status
// was written) and logs it; http.ErrAbortHandler goes on up.
func (s *Server) handlerPanicked(rec *statusRecorder, rid string, p any) {
	if p == http.ErrAbortHandler {
		panic(p)
	}
	s.log.Error("handler panic", zap.Any("panic", p), zap.String("request_id", rid), zap.Stack("stack"))
	if !rec.wroteHeader {
		writeError(rec, http.StatusInternalServerError, "internal", "internal error", nil)
	}
}

// logRequest writes the request's log line and its metrics.
func (s *Server) logRequest(rec *statusRecorder, r *http.Request, rid, route string, took time.Duration) {
	status := rec.status()
	fields := []zap.Field{
		zap.String("request_id", rid),
		zap.String("method", r.Method),
		zap.String("path", r.URL.Path),
		zap.Int("status", status),
		zap.Int64("bytes", rec.bytes),
		zap.Duration("duration", took),
	}
	if c := rec.cmd; c != nil {
		fields = append(fields, zap.String("argv0", c.Argv0), zap.Int("pid", c.Pid), zap.Int("exit_code", c.ExitCode),
			zap.Bool("timed_out", c.TimedOut), zap.Bool("terminated", c.Terminated))
	}
	level := zap.InfoLevel
	if rec.cmdLogged && status < 400 {
		level = zap.DebugLevel // the command's own line is its record
	}
	if status >= 400 {
		if rec.errCode == "" {
			rec.errCode = httpx.StatusCode(status)
		}
		fields = append(fields, zap.String("error_code", rec.errCode), zap.String("error_message", rec.errMsg))
		if status == http.StatusInternalServerError && rec.err != nil {
			// An error no status was mapped for: a bug, logged as one
			// with its cause (the client saw only "internal error").
			// Expected 5xx answers (503 while draining, the legacy
			// upload's 500) stay at info.
			fields = append(fields, zap.NamedError("cause", rec.err))
			level = zap.ErrorLevel
		}
	}
	s.log.Log(level, "request", fields...)
	s.metrics.ObserveRequest(routeLabel(r, route), r.Method, status, took, rec.errCode)
}

// dispatch hands r to its handler: the raw-path routes, the files handler
// for unclean file paths, a 404 for other unclean paths, else the mux. It
// sets *route (before the handler runs) for the routes outside the mux.
func (s *Server) dispatch(mux *http.ServeMux, files http.Handler, rec *statusRecorder, r *http.Request, route *string) {
	p := r.URL.Path
	for _, raw := range s.raw {
		// Served with the raw path: ServeMux would redirect `..`, `.`
		// and `//` (protocol.md §1: never redirect); the handler
		// answers those itself.
		if strings.HasPrefix(p, raw.prefix) || p == strings.TrimSuffix(raw.prefix, "/") {
			*route = raw.pattern
			raw.h.ServeHTTP(rec, r)
			return
		}
	}
	if p == "/v1/files" {
		// The base dir itself; ServeMux would redirect to "/v1/files/".
		r.URL.Path, r.URL.RawPath = "/v1/files/", ""
	} else if strings.HasPrefix(p, "/v1/files/") && !isClean(p) {
		// `..` (also percent-encoded), `.` and `//` in a file path are
		// resolved by the files handler (403 outside the base dir).
		r.SetPathValue("path", p[len("/v1/files/"):])
		files.ServeHTTP(rec, r)
		return
	} else if !isClean(p) {
		s.notFound(rec, r)
		return
	}
	mux.ServeHTTP(rec, r)
}

// requestIDKey is the context key of the request id (RequestID).
type requestIDKey struct{}

// RequestID returns the X-Request-ID of the request whose context ctx is
// ("" outside a request).
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// routeLabel is the metrics label of r: the route pattern that served it
// (route, or the mux's pattern), "unmatched" for an unknown path.
func routeLabel(r *http.Request, route string) string {
	switch {
	case route != "":
		return route
	case r.Pattern == "" || r.Pattern == "/":
		return "unmatched"
	}
	return r.Pattern
}

// isClean reports whether ServeMux would serve p without a redirect.
func isClean(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// statusRecorder remembers the status and size of a response for the log.
type statusRecorder struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
	bytes       int64
	errCode     string // the error code of a 4xx/5xx answer (writeError, httpx.NoteError)
	errMsg      string // and its message
	err         error  // the error behind it (fail), for 500s and spawn failures

	cmd *httpx.CommandNote // the command the request ran to its end (httpx.NoteCommand)
	// cmdLogged: the request started a command that logs its own line
	// (httpx.NoteCommandLogged); a success is then logged at debug.
	cmdLogged bool
}

// NoteError implements httpx.ErrorNoter.
func (r *statusRecorder) NoteError(code, msg string) { r.errCode, r.errMsg = code, msg }

// NoteCommand implements httpx.CommandNoter.
func (r *statusRecorder) NoteCommand(c httpx.CommandNote) { r.cmd = &c }

// NoteCommandLogged implements httpx.CommandNoter.
func (r *statusRecorder) NoteCommandLogged() { r.cmdLogged = true }

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.code, r.wroteHeader = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	if !r.wroteHeader {
		r.code, r.wroteHeader = http.StatusOK, true
	}
	if r.code >= 400 && r.errCode == "" && len(r.errMsg) < 200 {
		// An error body written by net/http itself (http.Error, ServeContent's
		// 416): its text is the message for the log.
		r.errMsg += strings.TrimSpace(string(p[:min(len(p), 200-len(r.errMsg))]))
	}
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	return n, err
}

// ReadFrom lets a file body reach net/http's own ReadFrom, and through it
// the connection's sendfile (httpx.ProgressWriter and io.Copy hand it the
// file); without it every body was copied 32 KiB at a time through user
// space.
func (r *statusRecorder) ReadFrom(src io.Reader) (int64, error) {
	rf, ok := r.ResponseWriter.(io.ReaderFrom)
	if !ok {
		return io.Copy(struct{ io.Writer }{r}, src)
	}
	if !r.wroteHeader {
		r.code, r.wroteHeader = http.StatusOK, true
	}
	n, err := rf.ReadFrom(src)
	r.bytes += n
	return n, err
}

func (r *statusRecorder) status() int {
	if !r.wroteHeader {
		return http.StatusOK
	}
	return r.code
}

// Hijack hands the connection to a WebSocket upgrade and records 101 for
// the request log.
func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err == nil {
		r.code, r.wroteHeader = http.StatusSwitchingProtocols, true
	}
	return conn, rw, err
}

// Unwrap lets http.ResponseController reach Flush.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
