package api

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"math/bits"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/ringbuf"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// Stream sizes. A stream whose client stopped reading holds one read buffer
// and one sink buffer until it is closed, so they are kept small: seven stuck
// streams must stay within the flood bound (idle + 8 MiB).
const (
	maxEventData = 32 << 10 // output bytes in one event
	// maxEventText bounds the JSON text of one event's data: a chunk of
	// control bytes (6 bytes each as \u00XX) is cut shorter, so that an
	// event never holds more than this in a sink's buffer.
	maxEventText = 64 << 10
	maxReadBytes = 64 << 10 // output bytes copied out of the ring per read
	// holdReadBytes is a holding stream's read, each flushed before the
	// next (no batching): its Advance, which restarts its hold's bound,
	// comes once per this much sent, so a client that reads at least this
	// much per hold keeps it (protocol.md §4 "Holding the producer").
	holdReadBytes = 16 << 10
	sinkFlushSize = 64 << 10 // an NDJSON sink writes once it holds this much
	// streamUnsentLimit bounds the bytes of a stream's connection that the
	// kernel holds unsent (see httpx.LimitUnsent). With autotuning alone a
	// loopback send buffer grows to 4 MiB, 13 s of a 300 KB/s reader,
	// all of which stands between max_wait and the `end` line.
	streamUnsentLimit = 16 << 10
)

// event is one line of the event stream (protocol.md §4): the one wire
// definition. Output events are encoded by appendOutputEvent instead, which
// is much faster and writes the same JSON (FuzzOutputEvent).
type event = wire.Event

// eventSink receives encoded events: NDJSON lines or WebSocket frames.
type eventSink interface {
	// event takes one JSON object (no newline); the slice is reused after the call.
	event(obj []byte) error
	// flush ends a batch: the events so far should reach the client now.
	flush() error
	// last follows the stream's last event, after which the response
	// ends: what is buffered goes out with the end of the response (NDJSON:
	// in the write of the closing chunk, so an `echo hi` stream costs one
	// write less) or at once.
	last() error
	// heartbeat is called after heartbeatEvery of silence.
	heartbeat(nextCursor int64) error
}

// bufferedSink is a sink whose events can be encoded straight into its
// buffer: commit takes buffer() with one JSON object appended.
type bufferedSink interface {
	buffer() []byte
	commit(buf []byte) error
}

// streamOptions shapes one stream window.
type streamOptions struct {
	cursor         int64
	follow         bool
	window         time.Duration // max_wait
	heartbeatEvery time.Duration // 0: no heartbeats
	// hold, if set, is told what the stream has sent (Advance): the pump
	// waits for it rather than evict what it has not (the caller made it
	// and releases it).
	hold *ringbuf.Hold
}

// streamEvents sends the events of c from o.cursor to sink until the
// command's exit event, the end of the window, or the end of ctx (the client
// went away: nothing more is sent). It never affects the command.
//
// The window, shutdown and the client's departure are checked on every
// pass, not only once the stream has caught up: a reader slower than the
// command would otherwise keep a stream open for as long as there is
// output. The sink bounds each write (see ndjsonSink), so one pass takes
// at most one batch. Once the window or shutdown has closed the stream, one
// more read decides its last line: the exit event if the command has
// finished and the rest fits in that read (a command ended by shutdown
// still reports how it ended), `end` otherwise.
func (s *Server) streamEvents(ctx context.Context, c *runtime.Command, o streamOptions, sink eventSink) error {
	w := s.openWindow(c, o, sink)
	defer w.close()
	for {
		if err := w.pollClosing(ctx); err != nil {
			return err
		}
		notify := c.Notify()
		res, err := c.Read(w.cursor, w.readBytes, w.buf[:0], w.recs[:0])
		if err != nil {
			return err
		}
		w.buf, w.recs = res.Buf, res.Records
		if w.closing != "" && !res.Done {
			return w.end(w.closing)
		}
		sent, err := w.send(&res)
		if err != nil {
			return err
		}
		if o.hold != nil {
			o.hold.Advance(w.cursor)
		}
		if res.Done {
			return w.exit()
		}
		if sent || res.Gap {
			if w.hb != nil {
				w.hb.Reset(o.heartbeatEvery)
			}
			more := len(res.Records) > 0 && res.Next < c.NextCursor()
			if more && o.hold == nil {
				// More is retained already: keep reading (the deadlines are
				// checked above) and leave the batch to the sink, which
				// writes it once it holds sinkFlushSize; the flush comes
				// when the stream has caught up. Flushing each read cost an
				// HTTP chunk end of its own (a 2-byte write) per 64 KiB.
				continue
			}
			if err := sink.flush(); err != nil {
				return err
			}
			if more {
				// A holding stream flushes each of its smaller reads, so
				// that its Advance follows its client's pace, and reads on.
				continue
			}
		}
		if !o.follow {
			return w.end(wire.EndCaughtUp)
		}
		if err := w.wait(ctx, notify); err != nil {
			return err
		}
	}
}

// streamWindow is one streamEvents call: where it is in the command's
// output, the buffers it reuses from read to read, and its timers.
type streamWindow struct {
	s      *Server
	c      *runtime.Command
	o      streamOptions
	sink   eventSink
	cursor int64 // the next byte to send
	// readBytes is what one read copies out of the ring: maxReadBytes, or
	// holdReadBytes for a holding stream.
	readBytes int
	buf       []byte
	recs      []ringbuf.Record
	line      []byte // the event being encoded, for a sink that is not a bufferedSink
	window    *time.Timer
	hb        *time.Ticker // nil without heartbeats
	hbC       <-chan time.Time
	// closing is the reason of the `end` line, once the window or
	// shutdown closed the stream; "" before.
	closing string
}

func (s *Server) openWindow(c *runtime.Command, o streamOptions, sink eventSink) *streamWindow {
	w := &streamWindow{s: s, c: c, o: o, sink: sink, cursor: o.cursor, readBytes: maxReadBytes, window: time.NewTimer(o.window)}
	if o.hold != nil {
		w.readBytes = holdReadBytes
	}
	if o.heartbeatEvery > 0 {
		w.hb = time.NewTicker(o.heartbeatEvery)
		w.hbC = w.hb.C
	}
	return w
}

// close stops the window's timers.
func (w *streamWindow) close() {
	w.window.Stop()
	if w.hb != nil {
		w.hb.Stop()
	}
}

// pollClosing notes, without waiting, that the window or shutdown has
// closed the stream; it returns ctx's error once the client went away.
func (w *streamWindow) pollClosing(ctx context.Context) error {
	if w.closing != "" {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-w.s.streamsCtx.Done():
		w.closing = wire.EndShuttingDown
	case <-w.window.C:
		w.closing = wire.EndMaxWait
	default:
	}
	return nil
}

// send sends what one read returned: a gap event for bytes the ring no
// longer holds, then the output, and moves the cursor past it (res.Next,
// which it moves back when the read cut a UTF-8 character). sent reports
// whether there was output.
func (w *streamWindow) send(res *ringbuf.ReadResult) (sent bool, err error) {
	if res.Gap {
		dropped := res.GapFrom - w.cursor
		from := w.cursor
		w.line = append(w.line[:0], marshal(event{Type: wire.EventGap, Cursor: &from, DroppedBytes: &dropped, NextCursor: res.GapFrom})...)
		if err := w.sink.event(w.line); err != nil {
			return false, err
		}
		w.cursor = res.GapFrom
	}
	for i, r := range res.Records {
		data := r.Data
		// A read limit may cut a multi-byte character; send the complete
		// part and read the rest again next time.
		if i == len(res.Records)-1 && !res.Done && !utf8.Valid(data) {
			if cut := runtime.UTF8Prefix(data); cut > 0 && cut < len(data) && utf8.Valid(data[:cut]) {
				data = data[:cut]
				res.Next = r.Cursor + int64(cut)
			}
		}
		if err := w.sendOutput(r, data); err != nil {
			return false, err
		}
		sent = true
	}
	w.cursor = res.Next
	return sent, nil
}

// sendOutput sends data, the first bytes of record r, as output events of
// at most maxEventData bytes and maxEventText of JSON text each, cut
// between UTF-8 characters.
func (w *streamWindow) sendOutput(r ringbuf.Record, data []byte) error {
	// Positions come from the bytes sent: off is where the next event's
	// data starts in r.Data, whatever the caller cut.
	for off := 0; off < len(data); {
		at := r.Cursor + int64(off)
		var n int
		var err error
		if bs, ok := w.sink.(bufferedSink); ok { // encode in place: one copy less
			var line []byte
			line, n = nextOutputEvent(bs.buffer(), r.Stream, at, data[off:])
			err = bs.commit(line)
		} else {
			w.line, n = nextOutputEvent(w.line[:0], r.Stream, at, data[off:])
			err = w.sink.event(w.line)
		}
		if err != nil {
			return err
		}
		off += n
	}
	return nil
}

// nextOutputEvent appends to dst the output event of the first bytes of
// data (at cursor at): at most maxEventData bytes and maxEventText of JSON
// text, cut between UTF-8 characters. n is how many bytes of data it holds.
func nextOutputEvent(dst []byte, stream ringbuf.Stream, at int64, data []byte) (line []byte, n int) {
	n = min(len(data), maxEventData)
	if n < len(data) {
		n = runeBoundary(data, n)
	}
	head := len(dst)
	dst = appendOutputHead(dst, stream, at)
	if text, fit, ok := appendJSONTextFit(dst, data[:n], maxEventText); ok {
		// One pass: the text is cut where its encoding reaches the budget.
		return appendOutputTail(append(text, '"'), at, fit), fit
	}
	// Not UTF-8: base64 of what fits (binary output, the rare case, pays
	// the second scan).
	n = textFit(data[:n], maxEventText)
	return appendOutputEvent(dst[:head], stream, at, data[:n]), n
}

// exit sends the exit event with the final status, the stream's last.
func (w *streamWindow) exit() error {
	st := w.c.Status()
	w.line = wire.AppendStatusEvent(w.line[:0], wire.EventExit, &st, w.cursor) // no reflection: once per stream
	if err := w.sink.event(w.line); err != nil {
		return err
	}
	return w.sink.last()
}

// end sends the `end` line with reason, the stream's last.
func (w *streamWindow) end(reason string) error {
	return w.s.endEvent(w.sink, &w.line, reason, w.cursor)
}

// wait waits for more output (notify), a heartbeat's turn, the end of the
// window or shutdown (noted in closing), or the client's departure (ctx's
// error).
func (w *streamWindow) wait(ctx context.Context, notify <-chan struct{}) error {
	select {
	case <-notify:
	case <-w.hbC:
		return w.sink.heartbeat(w.cursor)
	case <-w.window.C:
		w.closing = wire.EndMaxWait
	case <-w.s.streamsCtx.Done():
		w.closing = wire.EndShuttingDown
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (s *Server) endEvent(sink eventSink, line *[]byte, reason string, cursor int64) error {
	*line = append((*line)[:0], marshal(event{Type: wire.EventEnd, Reason: reason, NextCursor: cursor})...)
	if err := sink.event(*line); err != nil {
		return err
	}
	return sink.last()
}

// runeBoundary moves n back (at most 3 bytes) so that data[:n] does not end
// inside a UTF-8 character; it returns n unchanged for binary data.
func runeBoundary(data []byte, n int) int {
	for i := n; i > n-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(data[i]) {
			return i
		}
	}
	return n
}

// textFit (the cut of output that is not UTF-8, sent as base64; text is cut
// by appendJSONTextFit as it is encoded) returns the length of the longest
// prefix of s whose JSON text
// (see appendJSONText) takes at most budget bytes, never less than one
// character and never inside one. Bytes that are not ASCII count once:
// the cut only has to bound escapes, which are ASCII.
func textFit(s []byte, budget int) int {
	if len(s)*6 <= budget {
		return len(s)
	}
	cost, i := 0, 0
	for i < len(s) {
		if i+8 <= len(s) && !needsEscape8(binary.LittleEndian.Uint64(s[i:])) {
			if cost+8 > budget {
				break
			}
			cost, i = cost+8, i+8
			continue
		}
		c := 1
		switch b := s[i]; {
		case b == '"' || b == '\\' || b == '\n' || b == '\r' || b == '\t':
			c = 2
		case b < 0x20:
			c = 6
		}
		if cost+c > budget {
			break
		}
		cost += c
		i++
	}
	if i >= len(s) {
		return len(s)
	}
	if n := runeBoundary(s, i); n > 0 {
		return n
	}
	_, size := utf8.DecodeRune(s)
	return size
}

// streamName is the wire name of an output stream.
func streamName(s ringbuf.Stream) string {
	switch s {
	case ringbuf.Stderr:
		return wire.StreamStderr
	case ringbuf.PTY:
		return wire.StreamPTY
	}
	return wire.StreamStdout
}

// appendOutputEvent appends an output event for data to dst: text when data
// is valid UTF-8, base64 otherwise.
func appendOutputEvent(dst []byte, stream ringbuf.Stream, cursor int64, data []byte) []byte {
	dst = appendOutputHead(dst, stream, cursor)
	if text, ok := appendJSONText(dst, data); ok {
		dst = append(text, '"')
	} else {
		dst = base64.StdEncoding.AppendEncode(dst, data)
		dst = append(dst, `","encoding":"`+wire.EncodingBase64+`"`...)
	}
	return appendOutputTail(dst, cursor, len(data))
}

// appendOutputHead appends an output event up to the opening quote of its
// data.
func appendOutputHead(dst []byte, stream ringbuf.Stream, cursor int64) []byte {
	dst = append(dst, `{"type":"`+wire.EventOutput+`","stream":"`...)
	dst = append(dst, streamName(stream)...)
	dst = append(dst, `","cursor":`...)
	dst = strconv.AppendInt(dst, cursor, 10)
	return append(dst, `,"data":"`...)
}

// appendOutputTail appends the rest of an output event of n bytes after its
// data.
func appendOutputTail(dst []byte, cursor int64, n int) []byte {
	dst = append(dst, `,"next_cursor":`...)
	dst = strconv.AppendInt(dst, cursor+int64(n), 10)
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

const (
	lsb8 = 0x0101010101010101
	msb8 = 0x8080808080808080
)

// escapeMask8 returns a mask whose lowest set bit is the high bit of the
// first of the eight bytes of x (little-endian) that is a control character,
// '"', '\\' or not ASCII; zero if there is none. Bits above the first may be
// false positives (borrows), so only the lowest one is meaningful.
func escapeMask8(x uint64) uint64 {
	zero := func(v uint64) uint64 { return (v - lsb8) &^ v & msb8 }
	return ((x-0x20*lsb8)&^x | zero(x^'"'*lsb8) | zero(x^'\\'*lsb8) | x) & msb8
}

// needsEscape8 reports whether any of the eight bytes in x needs a look.
func needsEscape8(x uint64) bool { return escapeMask8(x) != 0 }

// appendJSONTextFit is appendJSONText of the longest prefix of s whose
// JSON text takes at most budget bytes (budget >= 6: at least one
// character always fits), in one pass: n is the prefix's length, never
// inside a character. If that prefix is not valid UTF-8 it returns dst
// unchanged and false (n is then meaningless). Where the whole of s fits it
// is appendJSONText's text; the cut is where the encoded length would pass
// budget.
func appendJSONTextFit(dst, s []byte, budget int) (out []byte, n int, ok bool) {
	if len(s)*6 <= budget { // no character encodes to more than 6 bytes per byte
		out, ok = appendJSONText(dst, s)
		return out, len(s), ok
	}
	orig := len(dst)
	dst = slices.Grow(dst, min(len(s)+len(s)/16+8, budget))
	// room is what is left of the budget once s[start:i] is copied.
	room := func(start, i int) int { return budget - (len(dst) - orig) - (i - start) }
	start, i := 0, 0
	for {
		// Find the next byte that needs a look, within the budget.
		for i+8 <= len(s) && room(start, i) >= 8 {
			if m := escapeMask8(binary.LittleEndian.Uint64(s[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				goto look
			}
			i += 8
		}
		for i < len(s) && room(start, i) >= 1 && s[i] >= 0x20 && s[i] != '"' && s[i] != '\\' && s[i] < utf8.RuneSelf {
			i++
		}
	look:
		if i >= len(s) {
			return append(dst, s[start:]...), len(s), true
		}
		b := s[i]
		if b >= 0x20 && b != '"' && b != '\\' && b < utf8.RuneSelf {
			// A plain byte that did not fit.
			return append(dst, s[start:i]...), i, true
		}
		if b >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				return dst[:orig], 0, false
			}
			cost := size
			if r == '\u2028' || r == '\u2029' {
				cost = 6
			}
			if room(start, i) < cost {
				return append(dst, s[start:i]...), i, true
			}
			if cost == 6 {
				dst = append(dst, s[start:i]...)
				dst = append(dst, `\u202`...)
				dst = append(dst, hexDigits[r&0xf])
				start = i + size
			}
			i += size
			continue
		}
		if room(start, i) < escapeLen(b) {
			return append(dst, s[start:i]...), i, true
		}
		dst = append(dst, s[start:i]...)
		dst = appendEscape(dst, b)
		i++
		start = i
	}
}

// appendEscape appends the JSON escape of the ASCII byte b ('"', '\\' or a
// control character), as encoding/json writes it (wire.Event's encoding).
func appendEscape(dst []byte, b byte) []byte {
	switch b {
	case '"', '\\':
		return append(dst, '\\', b)
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
}

// escapeLen is the length of appendEscape's escape of b.
func escapeLen(b byte) int {
	switch b {
	case '"', '\\', '\n', '\r', '\t', '\b', '\f':
		return 2
	}
	return 6
}

// appendJSONText appends UTF-8 text as the inside of a JSON string. If s
// is not valid UTF-8 it returns dst unchanged and false.
// Only '"', '\\' and control characters need escaping; U+2028/U+2029 are
// escaped too, for JavaScript consumers. Plain ASCII is skipped eight bytes
// at a time.
func appendJSONText(dst, s []byte) ([]byte, bool) {
	orig := len(dst)
	dst = slices.Grow(dst, len(s)+len(s)/16+8)
	start, i := 0, 0
	for {
		// Find the next byte that needs a look.
		for i+8 <= len(s) {
			if m := escapeMask8(binary.LittleEndian.Uint64(s[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		for i < len(s) && s[i] >= 0x20 && s[i] != '"' && s[i] != '\\' && s[i] < utf8.RuneSelf {
			i++
		}
		if i >= len(s) {
			return append(dst, s[start:]...), true
		}
		b := s[i]
		if b >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				return dst[:orig], false
			}
			if r == '\u2028' || r == '\u2029' {
				dst = append(dst, s[start:i]...)
				dst = append(dst, `\u202`...)
				dst = append(dst, hexDigits[r&0xf])
				start = i + size
			}
			i += size
			continue
		}
		dst = append(dst, s[start:i]...)
		dst = appendEscape(dst, b)
		i++
		start = i
	}
}

// Deadlines of an NDJSON stream. Every write has one (httpx.WriteBound),
// so a client that stops reading costs its buffers for a bounded time and
// never holds a handler (or shutdown) beyond it.
const (
	// streamWriteWait bounds one write: a client that does not take a
	// batch (at most sinkFlushSize bytes) within it is disconnected.
	streamWriteWait = httpx.WriteWait
	// streamEndGrace is how long after its window a stream may still
	// write: a write in progress at max_wait, then the `end` line. Past it
	// the connection is cut; the client re-opens at its last next_cursor
	// and loses nothing.
	streamEndGrace = time.Second
	// streamShutdownGrace is how long a stream may still write once
	// shutdown has ended the streams (EndStreams): enough for the `end`
	// line to a reading client, short enough for a 2 s shutdown budget.
	streamShutdownGrace = 500 * time.Millisecond
)

// ndjsonSink writes events as lines of an HTTP response.
type ndjsonSink struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	buf   []byte
	bound httpx.WriteBound // the write deadlines
}

// armDeadline sets the connection's write deadline for the next write:
// streamWriteWait from now, or the stream's limit if that is sooner.
func (n *ndjsonSink) armDeadline() { n.bound.Arm() }

// lower brings the stream's limit forward to t (never back) and applies it
// at once, to a write in progress too. It may be called from any goroutine.
func (n *ndjsonSink) lower(t time.Time) { n.bound.Lower(t) }

func (n *ndjsonSink) event(obj []byte) error {
	n.buf = append(n.buf, obj...)
	n.buf = append(n.buf, '\n')
	if len(n.buf) >= sinkFlushSize {
		return n.write()
	}
	return nil
}

func (n *ndjsonSink) buffer() []byte { return n.buf }

func (n *ndjsonSink) commit(buf []byte) error {
	n.buf = append(buf, '\n')
	if len(n.buf) >= sinkFlushSize {
		return n.write()
	}
	return nil
}

// write hands the batch to the connection: a write of sinkFlushSize or
// more bypasses net/http's buffers, so all of it but the chunk's closing
// CRLF goes out at once; flush sends that too.
func (n *ndjsonSink) write() error {
	n.armDeadline()
	if len(n.buf) > 0 {
		if _, err := n.w.Write(n.buf); err != nil {
			return err
		}
		n.buf = n.buf[:0]
	}
	return nil
}

func (n *ndjsonSink) flush() error {
	if err := n.write(); err != nil {
		return err
	}
	return n.rc.Flush()
}

// last hands what is buffered to net/http without flushing it: the handler
// returns next, and net/http writes it with the closing chunk, in one write,
// under the deadline streamNDJSON arms as it returns.
func (n *ndjsonSink) last() error { return n.write() }

func (n *ndjsonSink) heartbeat(next int64) error {
	n.buf = append(n.buf, marshal(event{Type: wire.EventHeartbeat, NextCursor: next})...)
	n.buf = append(n.buf, '\n')
	return n.flush()
}

// streamNDJSON answers with the event stream: headers at once, an optional
// first line, then streamEvents with o (its heartbeats are the server's).
// It releases o.hold.
func (s *Server) streamNDJSON(w http.ResponseWriter, r *http.Request, c *runtime.Command, code int, o streamOptions, first []byte) {
	if o.hold != nil {
		defer o.hold.Release()
	}
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(code)
	sink, done := s.openNDJSON(w, r, o.window)
	defer done()
	if first != nil {
		sink.event(first)
	}
	if err := sink.flush(); err != nil {
		return
	}
	defer s.metrics.StreamOpened()()
	o.heartbeatEvery = s.opts.HeartbeatInterval
	s.streamEvents(r.Context(), c, o, sink)
}
