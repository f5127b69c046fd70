package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// GET /v1/events (protocol.md §4 "The event feed"): the lifecycle events of
// every command, as NDJSON lines under the windows, deadlines and
// keep-alive rules of a command's output stream (ndjsonSink, the same
// bounds), or as WebSocket text frames when the request is an upgrade (the
// writer, pings and shutdown of an attachment, attach.go).

// What one feed stream holds (protocol.md §4 "The event feed": the cost
// of a subscriber that does not read). feedBatch is how many events one
// read of the log copies out (about 1 KiB each while held, 410 bytes as a
// line); the NDJSON lines are written once they reach feedFlushSize, and a
// write blocked on a client that does not read (the connection's unsent
// bound, httpx.LimitUnsent) stops the encoding. Output streams' 64 KiB flushes
// and a batch of 256 made each unread subscriber hold about 300 KiB.
const (
	feedBatch     = 16
	feedFlushSize = 4 << 10
)

// feedEvent is one line of the feed.
type feedEvent = wire.FeedEvent

// events serves GET /v1/events.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	q := parseQuery(r, "cursor", "follow", "max_wait", "type", "command_id")
	follow := q.boolean("follow", true)
	window := q.seconds("max_wait", defaultWindowSeconds, maxWindowSeconds)
	if q.err != nil {
		fail(w, q.err)
		return
	}
	filter := runtime.EventFilter{Types: splitList(q.v.Get("type")), CommandIDs: splitList(q.v.Get("command_id"))}
	if q.has("type") && len(filter.Types) == 0 || q.has("command_id") && len(filter.CommandIDs) == 0 {
		fail(w, badRequest(`query parameters "type" and "command_id" are comma-separated lists and may not be empty`))
		return
	}
	feed, err := s.m.OpenEvents(q.v.Get("cursor"), filter)
	if errors.Is(err, runtime.ErrStaleCursor) {
		// Never misread, never a gap: the client must start over.
		writeError(w, http.StatusConflict, wire.CodeStaleCursor, err.Error(), nil)
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	if websocket.IsWebSocketUpgrade(r) {
		s.eventsWebSocket(w, r, feed)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.WriteHeader(http.StatusOK)
	sink, done := s.openNDJSON(w, r, secondsDur(window))
	defer done()
	fsink := feedNDJSON{sink, s.m, s.opts.HeartbeatInterval == runtime.TickInterval}
	if err := fsink.flush(); err != nil {
		return
	}
	defer s.metrics.StreamOpened()()
	defer s.m.WatchPorts()() // listening/closed events while a subscriber is there
	s.streamFeed(r.Context(), feed, streamOptions{follow: follow, window: secondsDur(window), heartbeatEvery: s.opts.HeartbeatInterval}, fsink)
}

// feedNDJSON is the ndjsonSink of a feed whose write deadlines fall on the
// Manager's own 10 s ticks (Manager.TickAfter): the first tick at least
// half a tick from now, so every write has 5–15 s. A deadline is a Go
// runtime timer that fires (or, taken off, still wakes the runtime) at its
// time; one 10 s after each batch would wake an idle daemon with a feed
// open once more per 10 s, between its own ticks. With another heartbeat
// interval than the tick (shared false) the deadlines are the stream's
// usual 10 s.
type feedNDJSON struct {
	*ndjsonSink
	m      *runtime.Manager
	shared bool
}

// event adds one line, written once the lines held reach feedFlushSize.
func (f feedNDJSON) event(obj []byte) error {
	f.buf = append(f.buf, obj...)
	f.buf = append(f.buf, '\n')
	if len(f.buf) >= feedFlushSize {
		return f.flush()
	}
	return nil
}

func (f feedNDJSON) flush() error {
	if !f.shared {
		return f.ndjsonSink.flush()
	}
	f.bound.ArmAt(f.m.TickAfter(time.Now().Add(runtime.TickInterval / 2)))
	if len(f.buf) > 0 {
		if _, err := f.w.Write(f.buf); err != nil {
			return err
		}
		f.buf = f.buf[:0]
	}
	return f.rc.Flush()
}

// splitList splits a comma-separated query value; "" is no list.
func splitList(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// streamFeed sends the events of feed to sink until the end of the window,
// shutdown (an `end` line either way), or the end of ctx (nothing more is
// sent). Like streamEvents it checks the window and shutdown on every pass,
// so that a reader slower than the events cannot hold a stream open; with
// nothing to send it waits for the log's next event, a heartbeat, the
// window or shutdown, and wakes for nothing else.
func (s *Server) streamFeed(ctx context.Context, feed *runtime.EventFeed, o streamOptions, sink eventSink) error {
	var (
		evs  []wire.FeedEvent
		line []byte
	)
	window := time.NewTimer(o.window)
	defer window.Stop()
	hb, hbC, tickC := s.feedHeartbeats(o.heartbeatEvery)
	if hb != nil {
		defer hb.Stop()
	}
	lastLine := time.Now()
	closing := ""
	for {
		if closing == "" {
			var err error
			if closing, err = s.streamClosing(ctx, window.C); err != nil {
				return err
			}
		}
		if closing == wire.EndShuttingDown {
			if err := s.feedDrain(feed, &evs, &line, sink); err != nil {
				return err
			}
		}
		if closing != "" {
			return feedLine(sink, &line, feedEvent{Type: wire.FeedEnd, Reason: closing, NextCursor: feed.Cursor().String()}, true)
		}
		notify := feed.Notify()
		res, err := s.feedBatchOut(feed, &evs, &line, sink)
		if err != nil {
			return err
		}
		if len(res.Events) > 0 || res.Dropped > 0 {
			if hb != nil {
				hb.Reset(o.heartbeatEvery)
			}
			lastLine = time.Now()
		}
		if !feed.CaughtUp() {
			continue // more is logged already (or the filter skipped a full scan)
		}
		if !o.follow {
			return feedLine(sink, &line, feedEvent{Type: wire.FeedEnd, Reason: wire.EndCaughtUp, NextCursor: res.Next.String()}, true)
		}
		select {
		case <-notify:
		case <-hbC:
			if err := feedLine(sink, &line, feedEvent{Type: wire.FeedHeartbeat, NextCursor: feed.Cursor().String()}, true); err != nil {
				return err
			}
		case <-tickC:
			tickC = s.m.Tick()
			if time.Since(lastLine) >= o.heartbeatEvery/2 {
				if err := feedLine(sink, &line, feedEvent{Type: wire.FeedHeartbeat, NextCursor: feed.Cursor().String()}, true); err != nil {
					return err
				}
				lastLine = time.Now()
			}
		case <-window.C:
			closing = wire.EndMaxWait
		case <-s.streamsCtx.Done():
			closing = wire.EndShuttingDown
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// streamClosing is the check a stream loop makes on every pass, without
// waiting: ctx's error when it has ended (nothing more is sent), else the
// reason of the `end` line that shutdown or the end of the window calls
// for, "" when neither has come.
func (s *Server) streamClosing(ctx context.Context, window <-chan time.Time) (string, error) {
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-s.streamsCtx.Done():
		return wire.EndShuttingDown, nil
	case <-window:
		return wire.EndMaxWait, nil
	default:
		return "", nil
	}
}

// feedHeartbeats are the timers of a feed's heartbeats. At the default
// interval, which is the Manager's own timer period, they are timed by its
// ticks (tickC: a heartbeat at the first tick at least half an interval
// after the last line, 5–15 s of silence), so that an open feed adds no
// wake-up of its own to the idle daemon's one per 10 s. Any other interval
// has its own ticker (hb, hbC; the caller stops it).
func (s *Server) feedHeartbeats(every time.Duration) (hb *time.Ticker, hbC <-chan time.Time, tickC <-chan struct{}) {
	switch {
	case every == runtime.TickInterval:
		tickC = s.m.Tick()
	case every > 0:
		hb = time.NewTicker(every)
		hbC = hb.C
	}
	return hb, hbC, tickC
}

// feedDrain sends what was logged before shutdown, before the end line:
// after the restart its cursor is stale, and an event skipped here (the
// exited of a command shutdown killed) would be lost. Up to the head of
// now, so a flood cannot extend it; a client that does not read is cut by
// the shutdown grace of its writes.
func (s *Server) feedDrain(feed *runtime.EventFeed, evs *[]wire.FeedEvent, line *[]byte, sink eventSink) error {
	head := s.m.EventHead().Seq
	for feed.Cursor().Seq < head && !feed.CaughtUp() {
		if _, err := s.feedBatchOut(feed, evs, line, sink); err != nil {
			return err
		}
	}
	return nil
}

// feedBatchOut reads the next batch of feed and sends it to sink (a `gap`
// first when the reader fell behind the log), flushed.
func (s *Server) feedBatchOut(feed *runtime.EventFeed, evs *[]wire.FeedEvent, line *[]byte, sink eventSink) (runtime.EventRead, error) {
	res := feed.Read((*evs)[:0], feedBatch)
	*evs = res.Events
	if res.Dropped > 0 {
		dropped := res.Dropped
		gap := feedEvent{Type: wire.FeedGap, Cursor: res.GapFrom.String(), DroppedEvents: &dropped,
			NextCursor: wire.FeedCursor{Instance: res.GapFrom.Instance, Seq: res.GapFrom.Seq + dropped}.String()}
		if err := feedLine(sink, line, gap, false); err != nil {
			return res, err
		}
	}
	for i := range res.Events {
		if err := feedLine(sink, line, res.Events[i], false); err != nil {
			return res, err
		}
	}
	if len(res.Events) > 0 || res.Dropped > 0 {
		return res, sink.flush()
	}
	return res, nil
}

// feedLine encodes e into *line and hands it to sink, flushing when asked.
func feedLine(sink eventSink, line *[]byte, e feedEvent, flush bool) error {
	*line = append((*line)[:0], marshal(e)...)
	if err := sink.event(*line); err != nil {
		return err
	}
	if flush {
		return sink.flush()
	}
	return nil
}

// eventsWebSocket serves the feed on a WebSocket: the writer, pings,
// connection accounting and shutdown of an attachment (attach.go), with a
// reader that takes no client frames (a text or binary frame closes the
// connection with 1003) and a window that lasts until the client leaves.
func (s *Server) eventsWebSocket(w http.ResponseWriter, r *http.Request, feed *runtime.EventFeed) {
	if s.streamsCtx.Err() != nil {
		fail(w, runtime.ErrShuttingDown)
		return
	}
	ws, ok := s.openWebSocket(w, r, wsShape{readBuffer: 1 << 10, writeBuffer: 32 << 10})
	if !ok {
		return
	}
	defer ws.release()
	defer s.m.WatchPorts()() // listening/closed events while a subscriber is there
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := s.newAttachment(ws, s.log.With(zap.String("stream", "events")), cancel)
	close(a.feedDone) // no stdin
	s.runAttachment(a, func() {
		sink := &attachSink{a: a}
		err := s.streamFeed(ctx, feed, streamOptions{follow: true, window: attachWindow}, sink)
		a.closeAfter(err, sink, "event feed failed", false)
	}, a.feedReadLoop, a.writeLoop)
}

// feedReadLoop is the reader of a feed WebSocket: pings, pongs and the
// close handshake; any data frame ends the connection (close 1003).
func (a *attachment) feedReadLoop() {
	defer close(a.readDone)
	a.readControls(4 << 10)
	if _, _, err := a.conn.ReadMessage(); err != nil {
		return
	}
	a.control(wsFrame{kind: websocket.CloseMessage, data: websocket.FormatCloseMessage(websocket.CloseUnsupportedData, "the event feed takes no client frames")})
}
