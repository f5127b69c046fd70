package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/sandbox-runtime/sandbox-runtime/pycompat"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/watch"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// File watches (docs/watch.md): POST/GET /v1/watches, GET and DELETE
// /v1/watches/{id}, GET /v1/watches/{id}/events, and
// GET /v1/files/{path}?watch=true. The watches themselves are package
// watch's; this file maps them to HTTP and streams their logs with the
// sinks and deadlines of command streams (stream.go).

// errTooManyWatches refuses a watch over watch.DefaultMaxWatches.
var errTooManyWatches = errors.New("too many watches")

// watchBatch is how many events one read of a watch's log takes.
const watchBatch = 256

// watchState is the server's watch manager, made on the first use (a
// server that never watches holds no inotify instance and no goroutine).
type watchState struct {
	mu     sync.Mutex
	m      *watch.Manager
	closed bool
}

// watches returns the manager, making it on first use.
func (s *Server) watches() (*watch.Manager, error) {
	ws := &s.watchSt
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed || s.streamsCtx.Err() != nil {
		return nil, runtime.ErrShuttingDown
	}
	if ws.m == nil {
		m, err := watch.NewManager(s.opts.BaseDir, watch.ManagerOptions{})
		if err != nil {
			return nil, s.fileError(err, "")
		}
		ws.m = m
	}
	return ws.m, nil
}

// closeWatches closes every watch (EndStreams, after the streams have been
// told to end: they end with shutting_down).
func (s *Server) closeWatches() {
	ws := &s.watchSt
	ws.mu.Lock()
	m := ws.m
	ws.closed = true
	ws.mu.Unlock()
	if m != nil {
		m.Close()
	}
}

// watchError maps package watch's errors.
func (s *Server) watchError(err error, rel string) error {
	switch {
	case errors.Is(err, watch.ErrNotFound):
		return &httpError{kind: runtime.ErrNotFound, msg: "no such watch"}
	case errors.Is(err, watch.ErrTooMany):
		return &httpError{kind: errTooManyWatches, msg: fmt.Sprintf("too many watches (at most %d at once): delete one first", watch.DefaultMaxWatches)}
	case errors.Is(err, watch.ErrClosed):
		return runtime.ErrShuttingDown
	case errors.Is(err, watch.ErrNotDir):
		return badRequest(fmt.Sprintf("%q is not a directory: a watch watches a directory (watch its parent for changes to a file)", rel))
	case errors.Is(err, watch.ErrOutside):
		return &httpError{kind: errForbidden, msg: fmt.Sprintf("%q is outside the base directory", rel)}
	}
	return s.fileError(err, rel)
}

func watchInfo(h *watch.Handle) wire.WatchInfo {
	return wire.WatchInfo{ID: h.ID, Path: h.Path(), EscapedPath: escapedPath(h.Path()), Recursive: h.Recursive(), CreatedAt: h.Created,
		Dirs: h.Dirs(), Readers: h.Readers(), NextCursor: h.NextSeq()}
}

// escapedPath is escaped_path for p: "" when p is valid UTF-8, else its
// exact bytes percent-encoded as a listing's escaped_name (pycompat.Quote,
// which keeps the slashes).
func escapedPath(p string) string {
	if utf8.ValidString(p) {
		return ""
	}
	return pycompat.Quote(p)
}

// createWatch is POST /v1/watches.
func (s *Server) createWatch(w http.ResponseWriter, r *http.Request) {
	if q := parseQuery(r); q.err != nil {
		fail(w, q.err)
		return
	}
	var b wire.WatchRequest
	m, err := decodeJSON(r, &b, false)
	switch {
	case err != nil:
	case b.Path != "" && m.has("escaped_path"):
		err = badRequest(`give "path" or "escaped_path", not both`)
	case m.has("escaped_path"):
		// A name that is not valid UTF-8, percent-encoded (escaped_path
		// of events and listings).
		if b.Path, err = url.PathUnescape(b.EscapedPath); err != nil {
			err = badRequest(fmt.Sprintf(`field "escaped_path": %v`, err))
		}
	case !m.has("path"):
		err = badRequest(`field "path" is required ("" is the base dir)`)
	}
	if err != nil {
		fail(w, err)
		return
	}
	h, err := s.openWatch(b.Path, b.Recursive)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, watchInfo(h))
}

// openWatch resolves rel as the files API does (resolveFile: symlinks
// followed, `..` applied, a result outside the base dir 403) and watches
// the resolved directory: the watch's path is where rel resolves.
func (s *Server) openWatch(rel string, recursive bool) (*watch.Handle, error) {
	in, err := s.resolveFile(rel)
	if err != nil {
		return nil, err
	}
	in.Root.Close()
	wm, err := s.watches()
	if err != nil {
		return nil, err
	}
	h, err := wm.Create(in.Rel, recursive)
	if err != nil {
		return nil, s.watchError(err, rel)
	}
	return h, nil
}

// listWatches is GET /v1/watches.
func (s *Server) listWatches(w http.ResponseWriter, r *http.Request) {
	if q := parseQuery(r); q.err != nil {
		fail(w, q.err)
		return
	}
	out := wire.WatchList{Watches: []wire.WatchInfo{}}
	s.watchSt.mu.Lock()
	wm := s.watchSt.m
	s.watchSt.mu.Unlock()
	if wm != nil {
		for _, h := range wm.List() {
			out.Watches = append(out.Watches, watchInfo(h))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) watchOf(r *http.Request) (*watch.Handle, error) {
	wm, err := s.watches()
	if err != nil {
		return nil, err
	}
	h, err := wm.Get(r.PathValue("id"))
	if err != nil {
		return nil, s.watchError(err, "")
	}
	return h, nil
}

// getWatch is GET /v1/watches/{id}.
func (s *Server) getWatch(w http.ResponseWriter, r *http.Request) {
	if q := parseQuery(r); q.err != nil {
		fail(w, q.err)
		return
	}
	h, err := s.watchOf(r)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, watchInfo(h))
}

// deleteWatch is DELETE /v1/watches/{id}: its streams end with
// watch_ended.
func (s *Server) deleteWatch(w http.ResponseWriter, r *http.Request) {
	if q := parseQuery(r); q.err != nil {
		fail(w, q.err)
		return
	}
	wm, err := s.watches()
	if err == nil {
		err = wm.Delete(r.PathValue("id"))
		if err != nil {
			err = s.watchError(err, "")
		}
	}
	if err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// watchEvents is GET /v1/watches/{id}/events: NDJSON from cursor (a
// sequence number) with follow and max_wait as command output has them.
func (s *Server) watchEvents(w http.ResponseWriter, r *http.Request) {
	cursor, follow, window, err := parseStreamQuery(r)
	if err != nil {
		fail(w, err)
		return
	}
	h, err := s.watchOf(r)
	if err != nil {
		fail(w, err)
		return
	}
	if cursor > h.NextSeq() {
		fail(w, badRequest(fmt.Sprintf("cursor %d is past the watch's next_cursor %d", cursor, h.NextSeq())))
		return
	}
	if websocket.IsWebSocketUpgrade(r) {
		s.watchWebSocket(w, r, h, cursor) // watch_ws.go
		return
	}
	s.serveWatchStream(w, r, h, http.StatusOK, cursor, follow, secondsDur(window), nil)
}

// testHookOneShotWatchDelete, set by a test only, runs in watchFile just
// before its watch is deleted.
var testHookOneShotWatchDelete atomic.Pointer[func()]

// watchFile is GET /v1/files/{path}?watch=true[&recursive=true]: a watch
// made for this stream and deleted when it ends.
func (s *Server) watchFile(w http.ResponseWriter, r *http.Request) {
	q := parseQuery(r, "watch", "recursive", "max_wait")
	q.boolean("watch", true)
	recursive := q.boolean("recursive", false)
	window := q.seconds("max_wait", defaultWindowSeconds, maxWindowSeconds)
	if q.err != nil {
		fail(w, q.err)
		return
	}
	rel := r.PathValue("path")
	h, err := s.openWatch(rel, recursive)
	if err != nil {
		fail(w, err)
		return
	}
	defer func() {
		// The `end` line out first: the removal of a recursive watch takes
		// milliseconds (4,000 dirs: ~17 ms), and the last line would
		// otherwise wait for it in net/http's buffer (ndjsonSink.last).
		http.NewResponseController(w).Flush()
		if hook := testHookOneShotWatchDelete.Load(); hook != nil {
			(*hook)()
		}
		if wm, err := s.watches(); err == nil {
			wm.Delete(h.ID)
		}
	}()
	first := marshal(watchInfoEvent(h))
	s.serveWatchStream(w, r, h, http.StatusOK, 0, true, secondsDur(window), first)
}

// watchInfoEvent is the first line of a one-shot watch stream: the watch
// made for it.
func watchInfoEvent(h *watch.Handle) any {
	return struct {
		Type  string         `json:"type"`
		Watch wire.WatchInfo `json:"watch"`
	}{"watch", watchInfo(h)}
}

// serveWatchStream answers with a watch's event stream: the headers and
// deadlines of streamNDJSON.
func (s *Server) serveWatchStream(w http.ResponseWriter, r *http.Request, h *watch.Handle, code int, cursor int64, follow bool, window time.Duration, first []byte) {
	hd := w.Header()
	hd.Set("Content-Type", "application/x-ndjson")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(code)
	if r.Method == http.MethodHead {
		return
	}
	sink, done := s.openNDJSON(w, r, window)
	defer done()
	if first != nil {
		sink.event(first)
	}
	if err := sink.flush(); err != nil {
		return
	}
	defer s.metrics.StreamOpened()()
	defer h.Reading()()
	s.streamWatch(r.Context(), h, cursor, follow, window, sink)
}

// streamWatch sends h's events from cursor to sink until the window ends,
// shutdown, the watch's end, or ctx's end; the last line is `end` with its
// reason and the cursor to resume from.
func (s *Server) streamWatch(ctx context.Context, h *watch.Handle, cursor int64, follow bool, window time.Duration, sink eventSink) error {
	return s.streamWatchEvery(ctx, h, cursor, follow, window, sink, s.opts.HeartbeatInterval)
}

// streamWatchEvery is streamWatch with a heartbeat every hbEvery (a ping
// over a WebSocket).
func (s *Server) streamWatchEvery(ctx context.Context, h *watch.Handle, cursor int64, follow bool, window time.Duration, sink eventSink, hbEvery time.Duration) error {
	timer := time.NewTimer(window)
	defer timer.Stop()
	var hbC <-chan time.Time
	var hb *time.Ticker
	if hbEvery > 0 {
		hb = time.NewTicker(hbEvery)
		defer hb.Stop()
		hbC = hb.C
	}
	var line []byte
	var buf []watch.Event
	closing := ""
	for {
		if closing == "" {
			var err error
			if closing, err = s.streamClosing(ctx, timer.C); err != nil {
				return err
			}
		}
		res, more := h.ReadFrom(cursor, watchBatch, buf)
		buf = res.Events
		if res.Gap {
			from, dropped := cursor, res.GapTo-cursor
			line = append(line[:0], marshal(wire.WatchEvent{Type: wire.EventGap, Cursor: &from, DroppedEvents: &dropped, NextCursor: res.GapTo})...)
			if err := sink.event(line); err != nil {
				return err
			}
		}
		for i := range res.Events {
			line = append(line[:0], marshal(wireWatchEvent(&res.Events[i]))...)
			if err := sink.event(line); err != nil {
				return err
			}
		}
		cursor = res.Next
		if res.Gap || len(res.Events) > 0 {
			if err := sink.flush(); err != nil {
				return err
			}
			if hb != nil {
				hb.Reset(hbEvery)
			}
		}
		switch {
		case closing != "":
			return s.endEvent(sink, &line, closing, cursor)
		case res.Ended:
			if s.streamsCtx.Err() != nil {
				return s.endEvent(sink, &line, wire.EndShuttingDown, cursor)
			}
			return s.endEvent(sink, &line, wire.EndWatchEnded, cursor)
		case len(res.Events) == watchBatch:
			continue
		case !follow:
			return s.endEvent(sink, &line, wire.EndCaughtUp, cursor)
		}
		select {
		case <-more:
		case <-hbC:
			if err := sink.heartbeat(cursor); err != nil {
				return err
			}
		case <-timer.C:
			closing = wire.EndMaxWait
		case <-s.streamsCtx.Done():
			closing = wire.EndShuttingDown
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func wireWatchEvent(e *watch.Event) wire.WatchEvent {
	seq := e.Seq
	return wire.WatchEvent{Type: e.Type, Seq: &seq, Path: e.Path, OldPath: e.OldPath,
		EscapedPath: escapedPath(e.Path), EscapedOldPath: escapedPath(e.OldPath),
		Dir: e.Dir, Reason: e.Reason, NextCursor: e.Seq + 1}
}
