package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// Attachment is a WebSocket attached to one command: its events, and
// frames for stdin, signals, kill and resize. Next must be called from one
// goroutine at a time; the send methods and Close may be called from any.
//
// When the connection breaks, Next dials again from the next_cursor of the
// last event it returned, so events are delivered exactly once. A frame
// sent while Next re-dials waits for the new connection and goes out on
// it, so frames sent one after another arrive in order; but a frame
// written just before the connection broke may be lost (WebSocket frames
// are not acknowledged): use Client.Stdin where every byte must arrive.
// Sending needs Next to be called (it is Next that re-dials).
type Attachment struct {
	c    *Client
	id   string
	hold time.Duration // the ?hold= of every dial (AttachHeld)

	sendMu  sync.Mutex      // held by a send from start to end: frames go out in order
	mu      sync.Mutex      // guards conn, broken, closed and over; never held during a write
	changed *sync.Cond      // signalled when conn, closed or over change
	conn    *websocket.Conn // the current connection
	broken  *websocket.Conn // a connection a send found broken: wait for another
	closed  bool
	over    error // set once Next has returned its last event or error
	// detaching is set by Detach: Next reads on to the daemon's answer to
	// the close frame, then closes readEnd and returns net.ErrClosed.
	detaching bool
	readEnd   chan struct{}

	// Only Next touches these.
	cursor int64 // next_cursor of the last event returned
	done   bool  // the exit event was returned
}

// Attach opens a WebSocket on command id from cursor.
func (c *Client) Attach(ctx context.Context, id string, cursor int64) (*Attachment, error) {
	return c.AttachHeld(ctx, id, cursor, 0)
}

// AttachHeld is Attach with an output hold on every connection of the
// attachment (RunOptions.Hold; 0: none).
func (c *Client) AttachHeld(ctx context.Context, id string, cursor int64, hold time.Duration) (*Attachment, error) {
	a := &Attachment{c: c, id: id, cursor: cursor, hold: hold}
	a.changed = sync.NewCond(&a.mu)
	// The first dial is retried like an idempotent request: a blip at the
	// start is no different from one later.
	var b backoff
	deadline := time.Now().Add(c.retryFor)
	for {
		conn, err := a.dial(ctx)
		if err == nil {
			a.conn = conn
			return a, nil
		}
		refusedAtFirst := !c.reached.Load() && errors.Is(err, syscall.ECONNREFUSED)
		if ctx.Err() != nil || c.retryFor < 0 || !retryable(err) || refusedAtFirst || time.Now().After(deadline) {
			return nil, err
		}
		if werr := b.wait(ctx, retryAfter(err)); werr != nil {
			return nil, werr
		}
	}
}

func (a *Attachment) dial(ctx context.Context) (*websocket.Conn, error) {
	u := *a.c.base
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	u.Path += "/v1/commands/" + a.id + "/attach"
	u.RawPath = a.c.base.Path + commandPath(a.id, "attach")
	q := url.Values{"cursor": {strconv.FormatInt(a.cursor, 10)}}
	setHold(q, a.hold)
	u.RawQuery = q.Encode()
	d := websocket.Dialer{NetDialContext: a.c.dialer.DialContext, HandshakeTimeout: 10 * time.Second}
	h := http.Header{}
	a.c.authorize(h)
	conn, resp, err := d.DialContext(ctx, u.String(), h)
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, readError(resp)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, a.c.describe(err)
	}
	a.c.reached.Store(true)
	// The daemon pings every 10 s; a longer silence is a dead connection.
	conn.SetReadDeadline(time.Now().Add(idleTimeout))
	conn.SetPingHandler(func(data string) error {
		conn.SetReadDeadline(time.Now().Add(idleTimeout))
		err := conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(10*time.Second))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	})
	return conn, nil
}

// Cursor returns the next_cursor of the last event Next returned.
func (a *Attachment) Cursor() int64 { return a.cursor }

// Next returns the next output, gap or error event, or the exit event
// (after which it returns io.EOF). An error event answers a frame this
// side sent that the daemon could not apply; the attachment stays usable.
// After a disconnect Next re-dials for up to RetryFor without progress;
// ctx bounds the re-dialing. A Next waiting for a frame is ended by Close.
func (a *Attachment) Next(ctx context.Context) (*wire.Event, error) {
	ev, err := a.next(ctx)
	if err != nil || a.done {
		// Nothing re-dials any more: senders waiting for a connection
		// must not wait for ever.
		a.mu.Lock()
		if a.over == nil {
			a.over = err
			if err == nil || err == io.EOF {
				// Coded as the daemon codes it (409 finished), so that a
				// caller tells "the command took no more" from a loss.
				a.over = &Error{StatusCode: http.StatusConflict, Code: wire.CodeFinished, Message: "the command has finished; the frame was not sent"}
			}
		}
		a.changed.Broadcast()
		a.mu.Unlock()
	}
	return ev, err
}

func (a *Attachment) next(ctx context.Context) (*wire.Event, error) {
	if a.done {
		return nil, io.EOF
	}
	var b backoff
	// The time without progress counts from the break, not from when Next
	// began waiting: a quiet attachment is as resumable as a busy one.
	var deadline time.Time
	for {
		a.mu.Lock()
		conn, closed, detaching := a.conn, a.closed, a.detaching
		a.mu.Unlock()
		if closed || detaching && conn == nil {
			return nil, net.ErrClosed
		}
		var err error
		if conn != nil {
			var ev *wire.Event
			ev, err = a.read(conn)
			if err == nil && ev != nil {
				return ev, nil
			}
			if err == nil { // a frame to skip
				continue
			}
			if errors.Is(err, ErrStreamBroken) || errors.Is(err, errCallback) {
				return nil, err
			}
			conn.Close()
			a.mu.Lock()
			closed = a.closed
			if a.detaching { // the close is answered (or the connection broke): no dial
				close(a.readEnd)
				a.detaching, a.closed, closed = false, true, true
			}
			a.mu.Unlock()
			if closed { // Close ended the read: no dial after it
				return nil, net.ErrClosed
			}
			if deadline.IsZero() {
				deadline = time.Now().Add(a.c.retryFor)
			}
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(a.c.retryFor)
		}
		// Dial again from the cursor.
		if conn != nil && !time.Now().Before(deadline) || a.c.retryFor < 0 {
			return nil, fmt.Errorf("the attachment broke off and could not be resumed: %w", err)
		}
		if werr := b.wait(ctx, 0); werr != nil {
			return nil, werr
		}
		nc, derr := a.dial(ctx)
		if derr != nil {
			if ctx.Err() != nil || !retryable(derr) || !time.Now().Before(deadline) {
				return nil, derr
			}
			a.swap(nil)
			continue
		}
		if !a.swap(nc) {
			nc.Close()
			return nil, net.ErrClosed
		}
		b.reset()
	}
}

// swap installs conn as the current connection, unless Close was called.
func (a *Attachment) swap(conn *websocket.Conn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.conn = conn
	a.changed.Broadcast()
	return true
}

// read reads one frame: an event to return, nil for one to skip, or an
// error when the connection is over.
func (a *Attachment) read(conn *websocket.Conn) (*wire.Event, error) {
	kind, data, err := conn.ReadMessage()
	if err != nil {
		return nil, err
	}
	conn.SetReadDeadline(time.Now().Add(idleTimeout))
	if kind != websocket.TextMessage {
		return nil, nil
	}
	var ev wire.Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return nil, fmt.Errorf("%w: a frame is not an event: %v", ErrStreamBroken, err)
	}
	switch ev.Type {
	case wire.EventError:
		return &ev, nil
	case wire.EventEnd:
		// The window closed (the daemon is shutting down): dial again.
		return nil, fmt.Errorf("the daemon ended the attachment: %s", ev.Reason)
	}
	var got *wire.Event
	done, err := processEvent(&ev, &a.cursor, func(e *wire.Event) error { got = e; return nil })
	if err != nil {
		return nil, err
	}
	if done {
		a.done = true
		a.cursor = ev.NextCursor
		conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		return &ev, nil
	}
	return got, nil
}

// send writes one client frame on the current connection; while Next
// re-dials, it waits for the new one. Sends go out one at a time, in order.
// A write has no deadline of its own: a daemon whose command's stdin queue
// is full stops reading until there is room (backpressure), and the frame
// waits; a dead connection is found by Next (no ping for idleTimeout), and
// Close ends the wait too.
func (a *Attachment) send(f wire.ClientFrame) error {
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		switch {
		case a.closed:
			return net.ErrClosed
		case a.conn != nil && a.conn != a.broken:
			conn := a.conn
			a.mu.Unlock()
			conn.SetWriteDeadline(time.Time{})
			err := conn.WriteMessage(websocket.TextMessage, data)
			a.mu.Lock()
			if err == nil {
				return nil
			}
			if a.closed {
				return net.ErrClosed
			}
			// The connection is breaking: Next will see it too and
			// re-dial; send the frame again on the next connection.
			a.broken = conn
			conn.Close()
			continue
		case a.over != nil:
			return a.over
		}
		a.changed.Wait()
	}
}

// Stdin sends data (and eof) to the command's stdin or terminal, in frames
// of at most 256 KiB, as text when UTF-8 and base64 otherwise.
func (a *Attachment) Stdin(data []byte, eof bool) error {
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), stdinChunk)
		if n < len(data) {
			for i := n; i > n-utf8.UTFMax && i > 0; i-- {
				if utf8.RuneStart(data[i]) {
					n = i
					break
				}
			}
		}
		f := wire.ClientFrame{Type: wire.FrameStdin, EOF: eof && n == len(data)}
		if utf8.Valid(data[:n]) {
			f.Data = string(data[:n])
		} else {
			f.Data, f.Encoding = base64.StdEncoding.EncodeToString(data[:n]), wire.EncodingBase64
		}
		if err := a.send(f); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// Signal sends sig to the command's process group as a frame. The daemon
// applies it as soon as it reads it, ahead of stdin frames waiting for the
// command to read, but it reads at most 1 MiB of those ahead: behind more,
// Client.Signal (HTTP) is the way that never waits.
func (a *Attachment) Signal(sig string) error {
	return a.send(wire.ClientFrame{Type: wire.FrameSignal, Signal: wire.Signal(sig)})
}

// Kill asks the daemon to end the command; Next then returns its exit.
func (a *Attachment) Kill() error { return a.send(wire.ClientFrame{Type: wire.FrameKill}) }

// Resize sets the terminal size of a PTY command.
func (a *Attachment) Resize(cols, rows int) error {
	return a.send(wire.ClientFrame{Type: wire.FrameResize, Cols: cols, Rows: rows})
}

// Detach ends the attachment cleanly, for a caller that has sent its last
// frame: it sends a close frame and lets Next read on until the daemon
// answers it, which the daemon does once it has read every frame sent
// before (so none is lost to a reset: closing a socket with frames unread
// resets it, and a reset drops what the daemon's kernel still holds). Next
// then returns net.ErrClosed. It reports false when the answer did not come
// within d (the daemon stopped reading: frames sent may be lost), or there
// was no connection; the connection is closed either way.
func (a *Attachment) Detach(d time.Duration) bool {
	a.sendMu.Lock() // after any frame being sent
	defer a.sendMu.Unlock()
	a.mu.Lock()
	conn := a.conn
	if a.closed || a.detaching || conn == nil || conn == a.broken {
		a.mu.Unlock()
		a.Close()
		return false
	}
	a.detaching = true
	a.readEnd = make(chan struct{})
	end := a.readEnd
	a.mu.Unlock()
	ok := conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(d)) == nil
	if ok {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-end:
		case <-t.C:
			ok = false
		}
	}
	a.Close()
	return ok
}

// Close closes the connection; the command is unaffected. A Next in
// progress returns net.ErrClosed.
func (a *Attachment) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	a.changed.Broadcast()
	if a.conn != nil {
		return a.conn.Close()
	}
	return nil
}
