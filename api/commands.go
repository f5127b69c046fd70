package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

const (
	maxWaitSeconds       = 20 // GET /v1/commands/{id}?wait= is clamped to this
	defaultWindowSeconds = 20 // default max_wait of an output stream
	maxWindowSeconds     = 60 // max_wait is clamped to this
)

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting_down"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// The /v1/info body is wire.Info.
type (
	infoBody      = wire.Info
	infoIsolation = wire.Isolation
	infoLimits    = wire.Limits
)

// featureList is what /v1/info announces that clients may detect: the
// features of the server's own routes, "metrics" when /metrics is served
// and the features of the routes mounted beside them (Options.Features).
func (s *Server) featureList() []string {
	out := []string{wire.FeatureCommands, wire.FeatureStream, wire.FeatureStdin, wire.FeatureSignals,
		wire.FeatureWebSocket, wire.FeatureFiles}
	out = append(out, s.opts.Features...)
	if s.metrics != nil {
		out = append(out, wire.FeatureMetrics)
	}
	out = append(out, wire.FeatureWatch) // /v1/watches (watch.go)
	return append(out, wire.FeatureIdempotentCreate, wire.FeaturePTY, wire.FeatureContexts, wire.FeatureEvents, wire.FeaturePorts)
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	c := s.m.Config()
	writeJSON(w, http.StatusOK, infoBody{
		Name:        "sandbox-runtime",
		Version:     s.opts.Version,
		APIVersions: []string{"v1"},
		StartedAt:   s.started,
		BaseDir:     s.opts.BaseDir,
		Limits: infoLimits{
			MaxRunning:            c.MaxRunning,
			MaxRetained:           c.MaxRetained,
			OutputLimitBytes:      c.OutputLimit,
			ResultTTLSeconds:      c.ResultTTL.Seconds(),
			DefaultTimeoutSeconds: c.DefaultTimeout.Seconds(),
			MaxTimeoutSeconds:     c.MaxTimeout.Seconds(),
			KillGraceSeconds:      c.KillGrace.Seconds(),
			StdinLimitBytes:       c.StdinLimit,
			RequestBodyLimitBytes: maxJSONBody,
		},
		Features: s.features,

		Isolation: s.isolation(),
	})
}

func (s *Server) isolation() infoIsolation {
	out := s.opts.Isolation
	if out.Mode == "" {
		out.Mode, out.Reason = wire.IsolationThreads, "not configured"
	}
	if out.Controllers == nil {
		out.Controllers = []string{}
	}
	return out
}

func (s *Server) createCommand(w http.ResponseWriter, r *http.Request) {
	q := parseQuery(r, "stream", "max_wait", "hold")
	stream := q.boolean("stream", false)
	window := q.seconds("max_wait", defaultWindowSeconds, maxWindowSeconds)
	hold := q.hold()
	if q.err == nil && q.has("hold") && !stream {
		q.err = badRequest(`query parameter "hold" holds the output for the stream of stream=true: without one nobody reads`)
	}
	if q.err != nil {
		fail(w, q.err)
		return
	}
	var b wire.CreateRequest
	// A large body's decode turn is held until the command has started: the
	// envs are copied twice more on the way (the runtime's spec, the environment).
	leave, m, err := decodeJSONTurn(r, &b, false)
	if err != nil {
		leave()
		fail(w, err)
		return
	}
	req, err := createRequest(&b, m)
	if err != nil {
		leave()
		fail(w, err)
		return
	}
	b = wire.CreateRequest{}
	req.RequestID = RequestID(r.Context())
	req.Hold = hold
	st, created, err := s.m.Create(req)
	req = runtime.CreateRequest{}
	leave()
	if err != nil {
		fail(w, err)
		return
	}
	code := http.StatusCreated
	if !created {
		code = http.StatusOK // a re-post: its request line is its only record
	} else {
		httpx.NoteCommandLogged(w)
	}
	w.Header().Set("Location", "/v1/commands/"+st.CommandID)
	if !stream {
		writeStatus(w, code, &st)
		return
	}
	c, err := s.m.Get(st.CommandID)
	if err != nil { // expired already: only with absurdly small TTLs
		fail(w, err)
		return
	}
	o := streamOptions{follow: true, window: secondsDur(window)}
	if hold > 0 {
		// The hold made before the process started (no byte lost before
		// this stream opened) is the creating request's; a re-post's
		// stream makes its own.
		if created {
			o.hold = c.TakeCreateHold()
		}
		if o.hold == nil {
			if o.hold, err = c.Hold(0, hold); err != nil {
				fail(w, err)
				return
			}
		}
	}
	started := wire.AppendStatusEvent(nil, wire.EventStarted, &st, 0)
	s.streamNDJSON(w, r, c, code, o, started)
}

// writeStatus answers a status as writeJSON does, encoded without
// reflection (the create answer, once per command).
func writeStatus(w http.ResponseWriter, code int, st *runtime.Status) {
	body := st.AppendJSON(make([]byte, 0, 1024))
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	w.Write(body)
}

func (s *Server) listCommands(w http.ResponseWriter, r *http.Request) {
	q := parseQuery(r, "state")
	var filter *runtime.State
	if q.has("state") {
		st, ok := runtime.ParseState(q.v.Get("state"))
		if !ok {
			q.err = badRequest("query parameter \"state\" must be one of running, exited, cancelled, timed_out, terminated")
		}
		filter = &st
	}
	if q.err != nil {
		fail(w, q.err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"commands": s.m.List(filter)})
}

func (s *Server) getCommand(w http.ResponseWriter, r *http.Request) {
	q := parseQuery(r, "wait", "wait_port")
	wait := q.seconds("wait", 0, maxWaitSeconds)
	port := q.port("wait_port")
	if q.err != nil {
		fail(w, q.err)
		return
	}
	c, err := s.m.Get(r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	if port > 0 && r.Method != http.MethodHead {
		// As ?wait: the headers at once, the status when the port
		// listens, the command ends or the wait (0: none) runs out;
		// wait_port_result says which (ports.md).
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		w.Write(marshal(c.WaitPort(r.Context(), port, secondsDur(wait))))
		return
	}
	if wait <= 0 || r.Method == http.MethodHead {
		// A HEAD has no body to wait for: its headers now, so that a
		// kept-alive connection carries the client's next request at once.
		writeJSON(w, http.StatusOK, withListeners(c))
		return
	}
	// Flush the headers at once: routers give up on headers after 30 s.
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	http.NewResponseController(w).Flush()
	st := c.Wait(r.Context(), secondsDur(wait))
	w.Write(marshal(st))
}

// withListeners is c's status with its listening sockets while it runs
// (the single GET only: a list of many commands reads no /proc).
func withListeners(c *runtime.Command) wire.Status {
	st := c.Status()
	st.Listeners = c.Listeners()
	return st
}

// ports serves GET /v1/ports: every listening socket of the sandbox's
// network namespace, with the command holding it or null.
func (s *Server) ports(w http.ResponseWriter, r *http.Request) {
	if q := parseQuery(r); q.err != nil {
		fail(w, q.err)
		return
	}
	ps, err := s.m.Ports()
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.PortsResponse{Ports: ps})
}

func (s *Server) commandOutput(w http.ResponseWriter, r *http.Request) {
	cursor, follow, window, hold, err := parseOutputQuery(r)
	if err != nil {
		fail(w, err)
		return
	}
	c, ok := s.commandAt(w, r, cursor)
	if !ok {
		return
	}
	if r.Method == http.MethodHead {
		// The stream's headers and nothing else: a HEAD that ran the
		// stream would hold its kept-alive connection for the whole window
		// while net/http drops every line.
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		return
	}
	o := streamOptions{cursor: cursor, follow: follow, window: secondsDur(window)}
	if hold > 0 {
		if o.hold, err = c.Hold(cursor, hold); err != nil {
			fail(w, err)
			return
		}
	}
	s.streamNDJSON(w, r, c, http.StatusOK, o, nil)
}

// commandAt finds the command of the request's {id} and checks that cursor
// is a place to read from; otherwise it answers the error and returns false.
func (s *Server) commandAt(w http.ResponseWriter, r *http.Request, cursor int64) (*runtime.Command, bool) {
	c, err := s.m.Get(r.PathValue("id"))
	if err == nil {
		err = c.CheckCursor(cursor)
	}
	if err != nil {
		fail(w, err)
		return nil, false
	}
	return c, true
}

func (s *Server) writeStdin(w http.ResponseWriter, r *http.Request) {
	var b wire.StdinRequest
	if _, err := decodeJSON(r, &b, false); err != nil {
		fail(w, err)
		return
	}
	data, eof, err := stdinOf(b)
	if err != nil {
		fail(w, err)
		return
	}
	c, err := s.m.Get(r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	n, closed, err := c.WriteStdin(data, eof)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"queued_bytes": n, "stdin_closed": closed})
}

func (s *Server) signalCommand(w http.ResponseWriter, r *http.Request) {
	var b wire.SignalRequest
	m, err := decodeJSON(r, &b, false)
	if err != nil {
		fail(w, err)
		return
	}
	sig, err := signalOf(b, m)
	if err != nil {
		fail(w, err)
		return
	}
	c, err := s.m.Get(r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	st, err := c.Signal(sig)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) killCommand(w http.ResponseWriter, r *http.Request) {
	if _, err := decodeJSON(r, &struct{}{}, true); err != nil {
		fail(w, err)
		return
	}
	c, err := s.m.Get(r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	st, err := c.Kill(r.Context())
	if err != nil { // the client went away; the kill goes on
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func secondsDur(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
