package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/ringbuf"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// GET /v1/commands/{id}/attach (protocol.md §3, §4): the event stream of
// streamEvents as WebSocket text frames, plus client frames for stdin,
// signals and kill.
//
// Each attachment has four goroutines:
//
//   - the handler goroutine runs streamEvents (the same generator as the
//     NDJSON stream) with an attachSink, then asks for the close frame;
//   - the reader owns every read: it applies the read limit and the read
//     deadline, writes nothing itself, and turns client frames into
//     runtime calls and error events for the writer. Signal, kill and
//     resize frames act as soon as they are read; stdin frames go, in
//     order, to the feeder;
//   - the feeder writes stdin frames to the command in order, waiting while
//     the command's stdin queue is full (backpressure, not loss). The reader
//     reads ahead of it up to attachStdinAhead bytes of stdin frames, so a
//     kill or signal behind them is not held up; beyond that the reader
//     stops reading (TCP holds the client back) until the feeder has taken
//     a frame. The feeder goes on after the connection is gone, until it
//     has written every frame read or the command has finished (or the
//     attachment is aborted: shutdown, a client too slow): a frame read is
//     never dropped because the client closed;
//   - the writer owns every write: event frames, error events, pings, pongs
//     and the close frame, each with a write deadline. It is the one that
//     closes the connection. (One exception, inside gorilla: a frame over
//     the read limit makes the reader send close 1009 itself, through
//     WriteControl, which gorilla allows concurrently with the writer.)
//
// The generator hands its frames to the writer one at a time (an
// unbuffered channel), so a client that does not read holds at most two
// event frames (one being written, one waiting) besides the generator's
// read buffer: the backlog stays in the ring, not in memory per client.
// The reader hands error events through a small bounded queue. A client
// that does not take its frames for writeWait is disconnected; the
// generator never waits for longer than that, and nothing else waits at
// all. Whatever happens to the socket, the command is unaffected: only a
// kill frame ends it.
//
// Server → client frames are the event objects of protocol.md §4, plus
//
//	{"type":"error","error":{"code":"invalid_request","message":"…"},"next_cursor":N}
//
// in answer to a client frame that could not be applied (bad JSON, unknown
// type or field, binary frame, bad base64 or signal, stdin_full only for a
// frame larger than the whole queue, stdin_closed, stdin_not_enabled,
// finished). The connection stays usable
// after an error event; its next_cursor repeats that of the event frame
// before it (or the attach cursor), so "re-open with the next_cursor of the
// last frame" still holds.
//
// A browser Origin other than the daemon's own host is refused (403) before
// the upgrade unless it is allowed (origin.go); the optional bearer token is
// checked before the upgrade like on every route.

const (
	// attachReadLimit bounds one client frame: a stdin frame as large as the
	// largest POST /stdin body, plus room for the JSON around it. A larger
	// frame ends the connection (close code 1009).
	attachReadLimit = maxJSONBody + 4<<10
	// attachQueue is how many error events from the reader wait for the
	// writer per attachment (event frames do not queue: see events).
	attachQueue = 4
	// attachShutdownGrace is how long closeAll lets attachments send their
	// final frames before it closes their connections: that of NDJSON
	// streams, so that both fit a 2 s shutdown budget together.
	attachShutdownGrace = streamShutdownGrace
	// attachSendBuffer is the kernel send buffer of an attached socket. A
	// small one bounds how much output sits between the writer and the
	// client, and so how long a ping waits behind it and how soon a client
	// that stopped reading blocks the writer (256 KiB still carries
	// 25 MB/s at a 10 ms round trip).
	attachSendBuffer = 256 << 10
	// attachStdinAhead is how many bytes of stdin frames the reader holds
	// for the feeder beyond the frame it is writing: what a kill or signal
	// frame may have in front of it and still act at once.
	attachStdinAhead = 1 << 20
	// attachRecvBuffer is the kernel receive buffer of an attached socket:
	// small, so that what a client has sent and the reader has not read
	// stays small too.
	attachRecvBuffer = 128 << 10
	// attachWindow is the streamEvents window of an attachment: WebSockets
	// are exempt from the routers' timeouts, so it lasts until the exit.
	attachWindow = time.Duration(math.MaxInt64)
)

// attachTimings derives the keep-alive timings from the heartbeat interval
// (protocol.md §4: ping/pong every 10 s). pingPeriod is how often the writer
// pings; pongWait is how long the reader waits for any frame (a pong
// included) before it gives the client up; writeWait bounds each write and
// how long a full queue is tolerated.
func attachTimings(heartbeat time.Duration) (pingPeriod, pongWait, writeWait time.Duration) {
	return heartbeat, 2 * heartbeat, heartbeat
}

// attachWriteBuffers is shared by every attachment: a write buffer is held
// only while a frame is being written.
var attachWriteBuffers sync.Pool

var errAttachClosed = errors.New("attachment closed")

// wsFrame is one frame for the writer. For an error event, data is the
// errorDetail JSON and the writer adds the next_cursor.
type wsFrame struct {
	kind int // a websocket message type (text, close, ping, pong) or frameError
	data []byte
	// closeCode is the status of a close frame.
	closeCode int
	// pooled, when set, is the framePool buffer data lives in; the writer
	// returns it after the write.
	pooled *[]byte
}

// framePool recycles event frame buffers: a stream at full speed would
// otherwise touch fresh memory for every 64 KiB frame.
var framePool = sync.Pool{New: func() any { b := make([]byte, 0, maxEventData+512); return &b }}

// frameError marks a wsFrame holding an error event.
const frameError = -1

// attachment is one WebSocket attach. The fields are set before its
// goroutines start and not changed after; the channels carry the rest.
type attachment struct {
	s    *Server
	c    *runtime.Command
	conn *websocket.Conn
	log  *zap.Logger

	pingPeriod, pongWait, writeWait time.Duration

	cursor int64         // where the stream starts: next_cursor of error events before any event
	hold   *ringbuf.Hold // the stream's hold (protocol.md §4); nil: none

	events chan wsFrame // generator → writer: event frames and the close frame, in order; unbuffered
	out    chan wsFrame // reader → writer: error events; bounded
	ctl    chan wsFrame // reader → writer: pongs and the close echo; dropped when full

	feed      stdinFeed     // reader → feeder: stdin frames, in order
	feedDone  chan struct{} // closed when the feeder has ended
	stop      chan struct{} // closed by abort: the writer ends at once
	stopOnce  sync.Once
	slowOnce  sync.Once
	readDone  chan struct{} // closed when the reader has ended
	writeDone chan struct{} // closed when the writer has ended and the conn is closed
	finished  chan struct{} // closed when the handler is done with the attachment

	cancel context.CancelFunc // ends the generator's streamEvents
}

// attach serves GET /v1/commands/{id}/attach. It returns when the
// attachment is over: all three goroutines have ended and the connection is
// closed. Its steps: refuse what can be refused (as plain JSON), admit the
// connection, upgrade, run the attachment.
func (s *Server) attach(w http.ResponseWriter, r *http.Request) {
	c, cursor, hold, ok := s.attachable(w, r)
	if !ok {
		return
	}
	var h *ringbuf.Hold
	if hold > 0 {
		// Before the upgrade, so that a refusal is a plain JSON error; the
		// handler returns once the attachment is over.
		var err error
		if h, err = c.Hold(cursor, hold); err != nil {
			fail(w, err)
			return
		}
		defer h.Release()
	}
	ws, ok := s.openWebSocket(w, r, wsShape{readBuffer: 4 << 10, writeBuffer: 32 << 10, recvBuffer: true})
	if !ok {
		return // refused or the upgrade failed: answered
	}
	defer ws.release() // the connection stays counted until the attachment ends
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := s.newAttachment(ws, s.log.With(zap.String("command_id", c.ID())), cancel)
	a.c, a.cursor, a.hold = c, cursor, h
	a.feed = stdinFeed{wake: make(chan struct{}, 1), room: make(chan struct{})}
	s.runAttachment(a, func() { a.generate(ctx) }, a.readLoop, a.writeLoop, a.feedLoop)
}

// attachable refuses, before the upgrade and as a plain JSON error,
// everything an attach can be refused for but the connection limit: a bad
// cursor, an unknown command, a request that is not a WebSocket upgrade,
// shutdown. ok: the command and the cursor to attach at.
func (s *Server) attachable(w http.ResponseWriter, r *http.Request) (c *runtime.Command, cursor int64, hold time.Duration, ok bool) {
	q := parseQuery(r, "cursor", "hold")
	cursor = q.cursor("cursor")
	hold = q.hold()
	if q.err != nil {
		fail(w, q.err)
		return nil, 0, 0, false
	}
	c, ok = s.commandAt(w, r, cursor)
	if !ok {
		return nil, 0, 0, false
	}
	if !websocket.IsWebSocketUpgrade(r) {
		w.Header().Set("Sec-Websocket-Version", "13")
		writeError(w, http.StatusBadRequest, "invalid_request", "this route is a WebSocket: send a GET with Connection: Upgrade and Upgrade: websocket", nil)
		return nil, 0, 0, false
	}
	if s.streamsCtx.Err() != nil {
		fail(w, runtime.ErrShuttingDown)
		return nil, 0, 0, false
	}
	return c, cursor, hold, true
}

// generate runs the event generator until the exit event (or the end of the
// stream at shutdown), then asks the writer for the close frame.
func (a *attachment) generate(ctx context.Context) {
	sink := &attachSink{a: a}
	o := streamOptions{cursor: a.cursor, follow: true, window: attachWindow, hold: a.hold}
	err := a.s.streamEvents(ctx, a.c, o, sink)
	a.closeAfter(err, sink, "attach stream failed", true)
}

// attachSink is the eventSink of an attachment: each event becomes a text
// frame handed to the writer. heartbeat and flush do nothing (the writer
// sends every frame at once, and pings keep the connection alive). Output
// events are encoded straight into a pooled frame (bufferedSink).
type attachSink struct {
	a     *attachment
	ended bool    // the last event was an `end`
	cur   *[]byte // the pooled frame buffer() handed out, until commit
}

func (k *attachSink) event(obj []byte) error {
	k.ended = bytes.HasPrefix(obj, []byte(`{"type":"end"`))
	return k.commit(append(k.buffer(), obj...))
}

func (k *attachSink) buffer() []byte {
	if k.cur == nil {
		k.cur = framePool.Get().(*[]byte)
	}
	return (*k.cur)[:0]
}

func (k *attachSink) commit(buf []byte) error {
	bp := k.cur
	k.cur = nil
	*bp = buf
	err := k.a.enqueue(k.a.events, wsFrame{kind: websocket.TextMessage, data: buf, pooled: bp})
	if err != nil { // never reached the writer
		*bp = buf[:0]
		framePool.Put(bp)
	}
	return err
}

func (k *attachSink) flush() error          { return nil }
func (k *attachSink) last() error           { return nil }
func (k *attachSink) heartbeat(int64) error { return nil }

// enqueue hands f to the writer through ch (a.events or a.out). It waits
// at most writeWait; a client that has not taken its frames by then is
// disconnected.
func (a *attachment) enqueue(ch chan<- wsFrame, f wsFrame) error {
	select {
	case ch <- f:
		return nil
	case <-a.writeDone:
		return errAttachClosed
	default:
	}
	t := time.NewTimer(a.writeWait)
	defer t.Stop()
	select {
	case ch <- f:
		return nil
	case <-a.writeDone:
		return errAttachClosed
	case <-t.C:
		a.tooSlow()
		a.abort()
		return errAttachClosed
	}
}

// abort ends the attachment at once: the writer stops, and closing the
// connection interrupts a write or read in progress. The command is not
// touched.
func (a *attachment) abort() {
	a.stopOnce.Do(func() {
		// stop also ends the feeder: what it still holds is dropped.
		close(a.stop)
		a.conn.Close()
	})
}

// control hands a pong or close echo to the writer without waiting.
func (a *attachment) control(f wsFrame) {
	select {
	case a.ctl <- f:
	default: // the writer is behind; a lost pong or echo is harmless
	}
}

// writeLoop is the only goroutine that writes to the connection. It ends
// after the close frame (once the client answered it, or writeWait passed),
// on a write error, when the reader ends, or on abort; it then closes the
// connection and stops the generator.
func (a *attachment) writeLoop() {
	defer close(a.writeDone)
	defer a.cancel()
	defer a.conn.Close()
	ping := time.NewTicker(a.pingPeriod)
	defer ping.Stop()
	w := frameWriter{a: a, next: a.cursor}
	for {
		select {
		case f := <-a.events:
			if !w.frame(f) {
				return
			}
		case f := <-a.out:
			if !w.frame(f) {
				return
			}
		case f := <-a.ctl:
			if a.write(f.kind, f.data) != nil {
				return
			}
		case <-ping.C:
			if a.write(websocket.PingMessage, nil) != nil {
				return
			}
		case <-a.readDone:
			// The client left, or broke the protocol. Echo its close if it sent one.
			select {
			case f := <-a.ctl:
				if f.kind == websocket.CloseMessage {
					a.write(f.kind, f.data)
				}
			default:
			}
			return
		case <-a.stop:
			return
		}
	}
}

// frameWriter is the writer's state for event, error and close frames.
type frameWriter struct {
	a    *attachment
	next int64  // next_cursor of the last event frame written
	line []byte // error event encoding buffer
}

// frame writes f; false when the writer must end (after the close frame,
// or on a write error).
func (w *frameWriter) frame(f wsFrame) bool {
	a := w.a
	switch f.kind {
	case websocket.TextMessage:
		if n, ok := frameNextCursor(f.data); ok {
			w.next = n
		}
		err := a.write(websocket.TextMessage, f.data)
		if f.pooled != nil {
			*f.pooled = f.data[:0]
			framePool.Put(f.pooled)
		}
		return err == nil
	case frameError:
		w.line = appendErrorEvent(w.line[:0], f.data, w.next)
		return a.write(websocket.TextMessage, w.line) == nil
	case websocket.CloseMessage:
		if a.write(websocket.CloseMessage, websocket.FormatCloseMessage(f.closeCode, "")) != nil {
			return false
		}
		// Let the client answer the close, then hang up.
		t := time.NewTimer(a.writeWait)
		defer t.Stop()
		select {
		case <-a.readDone:
		case <-a.stop:
		case <-t.C:
		}
		return false
	}
	return true
}

// write sends one frame within writeWait. A client that does not take it
// in time is too slow: the writer ends and the connection is closed.
func (a *attachment) write(kind int, data []byte) error {
	a.conn.SetWriteDeadline(time.Now().Add(a.writeWait))
	err := a.conn.WriteMessage(kind, data)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		a.tooSlow()
	}
	return err
}

// tooSlow logs, once, that the client is disconnected for not reading.
func (a *attachment) tooSlow() {
	a.slowOnce.Do(func() {
		a.log.Info("attach client too slow; disconnecting", zap.Duration("write_wait", a.writeWait))
	})
}

// readLoop is the only goroutine that reads from the connection. It ends
// when the connection fails or closes, the client sends a close frame, or
// the client is silent (no frame, not even a pong) for pongWait.
func (a *attachment) readLoop() {
	defer close(a.readDone)
	defer a.feed.end()
	a.readControls(attachReadLimit) // pongs and the close echo are written by the writer
	for {
		kind, data, err := a.conn.ReadMessage()
		if err != nil {
			return
		}
		a.conn.SetReadDeadline(time.Now().Add(a.pongWait))
		if kind != websocket.TextMessage {
			err = badRequest("binary frames are not accepted; send JSON text frames")
		} else {
			err = a.apply(data)
			// A stdin frame may have waited for room ahead: the client
			// was not silent meanwhile, this side was not reading.
			a.conn.SetReadDeadline(time.Now().Add(a.pongWait))
			if errors.Is(err, errAttachClosed) {
				return
			}
		}
		if err != nil {
			_, code := statusOf(err)
			if a.enqueue(a.out, errorFrame(code, err.Error())) != nil {
				return
			}
		}
	}
}

// Client frames: the wire request of the route each stands for, with the
// frame's type. Each is decoded strictly (decodeFrame) and mapped as its
// route's body is (requests.go); wire.ClientFrame, the one type a client
// sends them with, has exactly their fields (TestWireRequestsMatchTheSpec).
type (
	frameType struct {
		Type string `json:"type"`
	}
	stdinFrame struct {
		Type string `json:"type"`
		wire.StdinRequest
	}
	signalFrame struct {
		Type string `json:"type"`
		wire.SignalRequest
	}
	resizeFrame struct {
		Type string `json:"type"`
		wire.ResizeRequest
	}
)

// apply carries out one client frame. Only a stdin frame may wait: for
// room ahead of the feeder (attachStdinAhead); the other calls never block.
func (a *attachment) apply(data []byte) error {
	var t frameType
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&t); err != nil {
		return badRequest(frameMessage(describeJSONError(err, &t)))
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("the frame holds more than one JSON value")
	}
	switch t.Type {
	case "stdin":
		var f stdinFrame
		if _, err := decodeFrame(data, &f); err != nil {
			return err
		}
		b, eof, err := stdinOf(f.StdinRequest)
		if err != nil {
			return err
		}
		// A full queue is waited out by the feeder, not refused: nothing
		// typed or piped is lost (the HTTP route answers 429 with
		// Retry-After instead).
		return a.feed.put(stdinJob{data: b, eof: eof}, a.stop)
	case "signal":
		var f signalFrame
		m, err := decodeFrame(data, &f)
		if err != nil {
			return err
		}
		sig, err := signalOf(f.SignalRequest, m)
		if err != nil {
			return err
		}
		_, err = a.c.Signal(sig)
		return err
	case "kill":
		if _, err := decodeFrame(data, &frameType{}); err != nil {
			return err
		}
		// Start the kill without waiting for it: with a context that is
		// already done, Kill requests the end and returns at once. The exit
		// event follows on the stream.
		done, cancel := context.WithCancel(context.Background())
		cancel()
		a.c.Kill(done)
		return nil
	case "resize":
		return a.applyResize(data)
	case "":
		return badRequest(`field "type" is required: "stdin", "signal", "kill" or "resize"`)
	}
	return badRequest(`unknown frame type ` + strconv.Quote(t.Type) + `; expected "stdin", "signal", "kill" or "resize"`)
}

// decodeFrame decodes exactly one JSON object into v as strictly as a
// request body (decodeStrict): unknown, case-variant and repeated keys are
// refused. It returns the members the frame gave.
func decodeFrame(data []byte, v any) (members, error) {
	m, err := decodeStrict(data, v)
	if err != nil {
		return m, badRequest(frameMessage(err.Error()))
	}
	return m, nil
}

// frameMessage is a decode message of describeJSONError, which speaks of a
// request body, said of a frame.
func frameMessage(msg string) string {
	return strings.Replace(msg, "the body", "the frame", 1)
}

// errorFrame queues an error event; the writer adds its next_cursor.
func errorFrame(code, msg string) wsFrame {
	return wsFrame{kind: frameError, data: marshal(errorDetail{Code: code, Message: msg})}
}

func appendErrorEvent(dst, detail []byte, next int64) []byte {
	dst = append(dst, `{"type":"error","error":`...)
	dst = append(dst, detail...)
	dst = append(dst, `,"next_cursor":`...)
	dst = strconv.AppendInt(dst, next, 10)
	return append(dst, '}')
}

// frameNextCursor reads the top-level next_cursor of an event object: the
// last member of every event (see event and appendOutputEvent). A quote
// inside a JSON string is escaped, so the last `"next_cursor":` is the
// top-level one even when the status or the data mentions it.
func frameNextCursor(obj []byte) (int64, bool) {
	const key = `"next_cursor":`
	i := bytes.LastIndex(obj, []byte(key))
	if i < 0 {
		return 0, false
	}
	rest := bytes.TrimSuffix(obj[i+len(key):], []byte("}"))
	n, err := strconv.ParseInt(string(rest), 10, 64)
	return n, err == nil
}

// upgradeError answers a refused handshake with a v1 JSON error.
func upgradeError(w http.ResponseWriter, r *http.Request, status int, reason error) {
	code := "invalid_request"
	switch status {
	case http.StatusForbidden:
		code = "forbidden"
	case http.StatusMethodNotAllowed:
		code = "method_not_allowed"
	case http.StatusInternalServerError:
		code = "internal"
	}
	w.Header().Set("Sec-Websocket-Version", "13")
	writeError(w, status, code, reason.Error(), nil)
}

// connSet tracks the attachments on hijacked connections, which
// http.Server.Shutdown does not know about, so that shutdown can end them.
type connSet struct {
	mu     sync.Mutex // guards the fields below
	m      map[*attachment]struct{}
	closed bool // closeAll has run: no more attachments
}

func newConnSet() *connSet { return &connSet{m: map[*attachment]struct{}{}} }

// add registers a; false once closeAll has run.
func (cs *connSet) add(a *attachment) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		return false
	}
	cs.m[a] = struct{}{}
	return true
}

func (cs *connSet) remove(a *attachment) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	delete(cs.m, a)
}

// closeAll ends every attachment and refuses new ones. The caller cancels
// the streams context first, so that each attachment sends its final `end`
// event and close frame; closeAll gives them attachShutdownGrace for that,
// then closes the connections that are left, and returns once every
// attachment has finished (or after another grace period).
func (cs *connSet) closeAll() {
	cs.mu.Lock()
	cs.closed = true
	all := make([]*attachment, 0, len(cs.m))
	for a := range cs.m {
		all = append(all, a)
	}
	cs.mu.Unlock()
	if !waitFinished(all, attachShutdownGrace) {
		for _, a := range all {
			a.abort()
		}
		waitFinished(all, attachShutdownGrace)
	}
}

// waitFinished waits up to d for every attachment of all to finish.
func waitFinished(all []*attachment, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for _, a := range all {
		select {
		case <-a.finished:
		case <-t.C:
			return false
		}
	}
	return true
}

// stdinJob is one stdin frame for the feeder.
type stdinJob struct {
	data []byte
	eof  bool
}

// stdinFeed is the queue from the reader to the feeder: stdin frames in
// order, at most attachStdinAhead bytes of them (one frame always fits).
type stdinFeed struct {
	mu    sync.Mutex
	jobs  []stdinJob
	bytes int
	ended bool          // the reader has ended: no more jobs
	wake  chan struct{} // cap 1: a job arrived, or the reader ended
	room  chan struct{} // closed and replaced when the feeder takes a job
}

// put queues j, waiting while the queue holds attachStdinAhead bytes,
// until stop is closed (errAttachClosed).
func (f *stdinFeed) put(j stdinJob, stop <-chan struct{}) error {
	for {
		f.mu.Lock()
		if f.bytes == 0 || f.bytes+len(j.data) <= attachStdinAhead {
			f.jobs = append(f.jobs, j)
			f.bytes += len(j.data)
			f.mu.Unlock()
			f.signal()
			return nil
		}
		room := f.room
		f.mu.Unlock()
		select {
		case <-room:
		case <-stop:
			return errAttachClosed
		}
	}
}

// end tells the feeder that no job follows.
func (f *stdinFeed) end() {
	f.mu.Lock()
	f.ended = true
	f.mu.Unlock()
	f.signal()
}

func (f *stdinFeed) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// take returns the next job; ok false once the reader has ended and every
// job is taken.
func (f *stdinFeed) take(stop <-chan struct{}) (j stdinJob, ok bool) {
	for {
		f.mu.Lock()
		if len(f.jobs) > 0 {
			j = f.jobs[0]
			f.jobs[0] = stdinJob{}
			f.jobs = f.jobs[1:]
			f.bytes -= len(j.data)
			close(f.room)
			f.room = make(chan struct{})
			f.mu.Unlock()
			return j, true
		}
		ended := f.ended
		f.mu.Unlock()
		if ended {
			return stdinJob{}, false
		}
		select {
		case <-f.wake:
		case <-stop:
			return stdinJob{}, false
		}
	}
}

// feedLoop is the feeder: it writes the stdin frames the reader read to
// the command, in order, waiting while the command's stdin queue is full.
// It ends once the reader has ended and every frame is written, when the
// command finishes (what is left is refused at once), or on abort. A
// refusal goes to the client as an error event while the connection lasts.
func (a *attachment) feedLoop() {
	defer close(a.feedDone)
	for {
		j, ok := a.feed.take(a.stop)
		if !ok {
			return
		}
		_, _, err := a.c.WriteStdinWait(a.stop, j.data, j.eof)
		if err != nil {
			select {
			case <-a.stop:
				return
			default:
			}
			_, code := statusOf(err)
			a.enqueue(a.out, errorFrame(code, err.Error()))
		}
	}
}
