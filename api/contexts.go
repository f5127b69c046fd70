package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// Code contexts (docs/contexts.md): the routes under /v1/contexts, behind the
// same middleware (auth, Origin, body and connection bounds) as commands.

// contextWriteTimeout bounds each write of an execution stream: a client
// that reads nothing for this long loses its stream (it resumes by cursor).
const contextWriteTimeout = 30 * time.Second

func (s *Server) contextRoutes() []httpx.Route {
	type route = httpx.Route
	return []route{
		{Pattern: "/v1/contexts", Methods: map[string]http.HandlerFunc{"GET": s.listContexts, "POST": s.createContext}},
		{Pattern: "/v1/contexts/{id}", Methods: map[string]http.HandlerFunc{"GET": s.getContext, "DELETE": s.deleteContext}},
		{Pattern: "/v1/contexts/{id}/executions", Methods: map[string]http.HandlerFunc{"GET": s.listExecutions, "POST": s.createExecution}},
		{Pattern: "/v1/contexts/{id}/executions/{n}", Methods: map[string]http.HandlerFunc{"GET": s.executionEvents}},
		{Pattern: "/v1/contexts/{id}/interrupt", Methods: map[string]http.HandlerFunc{"POST": s.interruptContext}},
		{Pattern: "/v1/contexts/{id}/restart", Methods: map[string]http.HandlerFunc{"POST": s.restartContext}},
	}
}

func (s *Server) createContext(w http.ResponseWriter, r *http.Request) {
	if q := parseQuery(r); q.err != nil {
		fail(w, q.err)
		return
	}
	var b wire.ContextCreateRequest
	if _, err := decodeJSON(r, &b, true); err != nil {
		fail(w, err)
		return
	}
	st, created, err := s.m.Contexts().Create(runtime.ContextRequest{ContextID: b.ContextID, Language: b.Language, Cwd: b.Cwd, Envs: b.Envs})
	if err != nil {
		fail(w, err)
		return
	}
	code := http.StatusCreated
	if !created {
		code = http.StatusOK
	}
	w.Header().Set("Location", "/v1/contexts/"+st.ContextID)
	writeJSON(w, code, st)
}

func (s *Server) listContexts(w http.ResponseWriter, r *http.Request) {
	if q := parseQuery(r); q.err != nil {
		fail(w, q.err)
		return
	}
	writeJSON(w, http.StatusOK, wire.ContextList{Contexts: s.m.Contexts().List()})
}

func (s *Server) codeContext(w http.ResponseWriter, r *http.Request) (*runtime.CodeContext, bool) {
	c, err := s.m.Contexts().Get(r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return nil, false
	}
	return c, true
}

func (s *Server) getContext(w http.ResponseWriter, r *http.Request) {
	if q := parseQuery(r); q.err != nil {
		fail(w, q.err)
		return
	}
	if c, ok := s.codeContext(w, r); ok {
		writeJSON(w, http.StatusOK, c.Status())
	}
}

func (s *Server) deleteContext(w http.ResponseWriter, r *http.Request) {
	if q := parseQuery(r); q.err != nil {
		fail(w, q.err)
		return
	}
	if err := s.m.Contexts().Delete(r.PathValue("id")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) interruptContext(w http.ResponseWriter, r *http.Request) {
	if q := parseQuery(r); q.err != nil {
		fail(w, q.err)
		return
	}
	c, ok := s.codeContext(w, r)
	if !ok {
		return
	}
	n, err := c.Interrupt()
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"n": n})
}

func (s *Server) restartContext(w http.ResponseWriter, r *http.Request) {
	if q := parseQuery(r); q.err != nil {
		fail(w, q.err)
		return
	}
	c, ok := s.codeContext(w, r)
	if !ok {
		return
	}
	st, err := c.Restart()
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) listExecutions(w http.ResponseWriter, r *http.Request) {
	if q := parseQuery(r); q.err != nil {
		fail(w, q.err)
		return
	}
	c, ok := s.codeContext(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"executions": c.Executions()})
}

func (s *Server) createExecution(w http.ResponseWriter, r *http.Request) {
	q := parseQuery(r, "stream", "max_wait")
	stream := q.boolean("stream", false)
	window := q.seconds("max_wait", defaultWindowSeconds, maxWindowSeconds)
	if q.err != nil {
		fail(w, q.err)
		return
	}
	var b wire.ExecutionRequest
	m, err := decodeJSON(r, &b, false)
	if err != nil {
		fail(w, err)
		return
	}
	if !m.has("code") {
		fail(w, badRequest(`"code" is required`))
		return
	}
	c, ok := s.codeContext(w, r)
	if !ok {
		return
	}
	x, created, err := c.Execute(runtime.ExecuteRequest{Code: b.Code, Timeout: b.Timeout, ExecutionID: b.ExecutionID})
	if err != nil {
		fail(w, err)
		return
	}
	code := http.StatusCreated
	if !created {
		code = http.StatusOK
	}
	w.Header().Set("Location", "/v1/contexts/"+c.ID()+"/executions/"+strconv.Itoa(x.N()))
	if !stream {
		writeJSON(w, code, x.Status())
		return
	}
	s.streamExecution(w, r, x, code, 0, true, secondsDur(window))
}

func (s *Server) executionEvents(w http.ResponseWriter, r *http.Request) {
	cursor, follow, window, err := parseStreamQuery(r)
	if err != nil {
		fail(w, err)
		return
	}
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 {
		fail(w, badRequest("the execution number must be a positive integer"))
		return
	}
	c, ok := s.codeContext(w, r)
	if !ok {
		return
	}
	x, err := c.Execution(n)
	if err == nil {
		err = x.CheckCursor(cursor)
	}
	if err != nil {
		fail(w, err)
		return
	}
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		return
	}
	s.streamExecution(w, r, x, http.StatusOK, cursor, follow, secondsDur(window))
}

// streamExecution writes x's events from cursor as NDJSON: every event
// once, in order, until the end event (the stream's last line). It ends
// sooner with a stream_end event {reason, next_cursor} when the window
// passes ("max_wait"), follow is false and everything retained was sent
// ("caught_up"), or the server shuts down ("shutting_down"); the client
// resumes with GET …/executions/{n}?cursor=next_cursor. A heartbeat line
// {type: heartbeat, next_cursor} follows each HeartbeatInterval of silence.
func (s *Server) streamExecution(w http.ResponseWriter, r *http.Request, x *runtime.Execution, code int, cursor int64, follow bool, window time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(code)
	rc := http.NewResponseController(w)
	rc.Flush()
	ctx, cancel := context.WithTimeout(r.Context(), window)
	defer cancel()
	write := func(ev *wire.ContextEvent) bool {
		b, _ := json.Marshal(ev)
		b = append(b, '\n')
		rc.SetWriteDeadline(time.Now().Add(contextWriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return true
	}
	endWith := func(reason string, next int64) {
		write(&wire.ContextEvent{Type: wire.CtxEventStreamEnd, Cursor: next, Reason: reason, NextCursor: &next})
		rc.Flush()
	}
	beat := time.NewTicker(s.opts.HeartbeatInterval)
	defer beat.Stop()
	for {
		evs, next, done, notify := x.Read(cursor)
		for i := range evs {
			if !write(&evs[i]) {
				return
			}
		}
		if len(evs) > 0 {
			if rc.Flush() != nil {
				return
			}
		}
		cursor = next
		if done {
			return // the end event was the last line
		}
		if !follow {
			endWith("caught_up", cursor)
			return
		}
		select {
		case <-notify:
		case <-beat.C:
			c := cursor
			if !write(&wire.ContextEvent{Type: wire.CtxEventHeartbeat, Cursor: c, NextCursor: &c}) || rc.Flush() != nil {
				return
			}
		case <-ctx.Done():
			if r.Context().Err() == nil {
				endWith("max_wait", cursor)
			}
			return
		case <-s.streamsCtx.Done():
			endWith("shutting_down", cursor)
			return
		}
	}
}
