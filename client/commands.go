package client

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// stdinChunk is the most stdin one request carries: well under the
// daemon's 1 MiB JSON body limit even as base64.
const stdinChunk = 256 << 10

// Start creates a command and returns its status at once. When req has no
// CommandID, Start gives it a fresh one, so that the create can be retried
// safely (the daemon answers a repeated id with the existing command).
func (c *Client) Start(ctx context.Context, req wire.CreateRequest) (*wire.Status, error) {
	if req.CommandID == "" {
		req.CommandID = uuid.NewString()
	}
	body, err := createBody(req)
	if err != nil {
		return nil, err
	}
	var st wire.Status
	err = c.do(ctx, request{method: "POST", path: "/v1/commands", body: body, idempotent: true}, &st)
	if err != nil {
		return nil, err
	}
	return &st, nil
}

// createBody encodes a create request; a Timeout that JSON cannot carry
// (NaN, ±Inf) is an error, not a panic.
func createBody(req wire.CreateRequest) ([]byte, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("the create request cannot be encoded (timeout %v?): %w", req.Timeout, err)
	}
	return b, nil
}

// Get returns the status of command id.
func (c *Client) Get(ctx context.Context, id string) (*wire.Status, error) {
	var st wire.Status
	if err := c.doRetrying(ctx, request{method: "GET", path: commandPath(id), idempotent: true}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// List returns the retained commands, oldest first; state "" means all.
func (c *Client) List(ctx context.Context, state wire.State) ([]wire.Status, error) {
	q := url.Values{}
	if state != "" {
		q.Set("state", string(state))
	}
	var l wire.CommandList
	if err := c.doRetrying(ctx, request{method: "GET", path: "/v1/commands", query: q, idempotent: true}, &l); err != nil {
		return nil, err
	}
	return l.Commands, nil
}

// Wait waits until command id has finished or timeout has passed (0: no
// limit but ctx) and returns its status either way; waiting never kills.
// It asks the daemon in waits of at most 20 s (the daemon's clamp), so any
// timeout works, and a wait cut off by a disconnect is asked again.
func (c *Client) Wait(ctx context.Context, id string, timeout time.Duration) (*wire.Status, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		w := waitClamp
		if !deadline.IsZero() {
			w = min(w, time.Until(deadline))
		}
		q := url.Values{}
		if w > 0 {
			q.Set("wait", strconv.FormatFloat(w.Seconds(), 'f', 3, 64))
		}
		var st wire.Status
		if err := c.doRetrying(ctx, request{method: "GET", path: commandPath(id), query: q, idempotent: true}, &st); err != nil {
			return nil, err
		}
		if st.State.Finished() || (!deadline.IsZero() && !time.Now().Before(deadline)) {
			return &st, nil
		}
	}
}

// Kill ends command id (SIGTERM to its group, SIGKILL after the grace) and
// returns its final status; on a finished command, its status unchanged.
func (c *Client) Kill(ctx context.Context, id string) (*wire.Status, error) {
	var st wire.Status
	if err := c.doRetrying(ctx, request{method: "POST", path: commandPath(id, "kill"), idempotent: true}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Signal sends sig ("SIGINT", "INT" or "2") to the process group of
// command id. It is sent once: a signal is not safe to repeat.
func (c *Client) Signal(ctx context.Context, id string, sig string) (*wire.Status, error) {
	var st wire.Status
	body := mustJSON(wire.SignalRequest{Signal: wire.Signal(sig)})
	if err := c.do(ctx, request{method: "POST", path: commandPath(id, "signal"), body: body}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Resize sets the terminal size of a PTY command.
func (c *Client) Resize(ctx context.Context, id string, cols, rows int) (*wire.Status, error) {
	var st wire.Status
	body := mustJSON(wire.ResizeRequest{Cols: cols, Rows: rows})
	if err := c.do(ctx, request{method: "POST", path: commandPath(id, "resize"), body: body, idempotent: true}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Stdin writes data to the stdin of command id, and closes it after when
// eof is set. Data of any size is sent in order in requests of at most
// 256 KiB, as text when it is UTF-8 and as base64 otherwise; when the
// daemon's queue is full (429 stdin_full, nothing queued) the request is
// repeated after the daemon's Retry-After, until ctx ends. It returns the
// bytes queued. A request that fails in transit is not repeated (the daemon
// may have queued it): the error says so.
func (c *Client) Stdin(ctx context.Context, id string, data []byte, eof bool) (int, error) {
	total := 0
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), stdinChunk)
		if n < len(data) {
			// Do not split a character: a text chunk must be valid alone.
			for i := n; i > n-utf8.UTFMax && i > 0; i-- {
				if utf8.RuneStart(data[i]) {
					n = i
					break
				}
			}
		}
		chunk := data[:n]
		r := wire.StdinRequest{EOF: eof && n == len(data)}
		if utf8.Valid(chunk) {
			r.Data = string(chunk)
		} else {
			r.Data, r.Encoding = base64.StdEncoding.EncodeToString(chunk), wire.EncodingBase64
		}
		body := mustJSON(r)
		for {
			var resp wire.StdinResponse
			err := c.do(ctx, request{method: "POST", path: commandPath(id, "stdin"), body: body}, &resp)
			if ErrorCode(err) == wire.CodeStdinFull {
				var b backoff
				if werr := b.wait(ctx, max(retryAfter(err), 50*time.Millisecond)); werr != nil {
					return total, werr
				}
				continue
			}
			if err != nil {
				return total, err
			}
			total += resp.QueuedBytes
			break
		}
		data = data[n:]
	}
	return total, nil
}

// EventFunc is called with each output and gap event of a stream, in
// order. Returning an error stops the stream; the event then counts as not
// processed.
type EventFunc func(ev *wire.Event) error

// Output sends the retained output of command id from cursor to fn and
// returns without waiting for more: next is where to continue, st the
// final status when the command has finished (nil while it runs).
func (c *Client) Output(ctx context.Context, id string, cursor int64, fn EventFunc) (next int64, st *wire.Status, err error) {
	q := url.Values{"cursor": {strconv.FormatInt(cursor, 10)}, "follow": {"false"}}
	var b backoff
	deadline := time.Now().Add(c.retryFor)
	for {
		final, err := c.streamOnce(ctx, request{method: "GET", path: commandPath(id, "output"), query: q, idempotent: true}, &cursor, fn)
		if err == nil {
			if final.Type == wire.EventExit {
				return cursor, final.Status, nil
			}
			return cursor, nil, nil
		}
		if !c.mayResume(ctx, err, deadline) {
			return cursor, nil, err
		}
		q.Set("cursor", strconv.FormatInt(cursor, 10))
		if err := b.wait(ctx, 0); err != nil {
			return cursor, nil, err
		}
	}
}

// Follow sends every output and gap event of command id from cursor on to
// fn until the command finishes, and returns its final status. It re-opens
// the stream after each window and after any disconnect from the
// next_cursor of the last event fn accepted; it gives up after RetryFor
// without progress, or when fn or ctx fails.
func (c *Client) Follow(ctx context.Context, id string, cursor int64, fn EventFunc) (*wire.Status, error) {
	return c.follow(ctx, id, &cursor, fn, 0)
}

// follow is Follow with an output hold (RunOptions.Hold; 0: none).
func (c *Client) follow(ctx context.Context, id string, cursor *int64, fn EventFunc, hold time.Duration) (*wire.Status, error) {
	var status *wire.Status
	err := resumeByCursor(ctx, c, cursor, func() (bool, error) {
		q := url.Values{"cursor": {strconv.FormatInt(*cursor, 10)}, "max_wait": {strconv.Itoa(streamWindow)}}
		setHold(q, hold)
		final, err := c.streamOnce(ctx, request{method: "GET", path: commandPath(id, "output"), query: q, idempotent: true}, cursor, fn)
		if err == nil && final.Type == wire.EventExit {
			status = final.Status
			return true, nil
		}
		return false, err
	})
	if err != nil {
		return nil, err
	}
	return status, nil
}

// mayResume reports whether a stream that failed with err is opened again.
func (c *Client) mayResume(ctx context.Context, err error, deadline time.Time) bool {
	if ctx.Err() != nil || errors.Is(err, errCallback) || !retryable(err) || c.retryFor < 0 {
		return false
	}
	return time.Now().Before(deadline)
}

// errCallback wraps the error of an EventFunc.
var errCallback = errors.New("event callback")

type callbackError struct{ err error }

func (e *callbackError) Error() string   { return e.err.Error() }
func (e *callbackError) Unwrap() []error { return []error{e.err, errCallback} }

// streamOnce sends r (a request answered with an event stream) once, or
// as send retries it, and reads the stream until its final event, which it
// returns. *cursor follows the next_cursor of each event processed.
// Without a final event (a disconnect) it returns an error.
func (c *Client) streamOnce(ctx context.Context, r request, cursor *int64, fn EventFunc) (final *wire.Event, err error) {
	err = c.withStream(ctx, r, func(sctx context.Context, cancel context.CancelCauseFunc, body io.Reader) error {
		final, err = c.readEvents(sctx, cancel, body, cursor, fn, nil)
		return err
	})
	return final, err
}

// ErrSilent is the error of a stream that stayed silent (no event, no
// heartbeat) for 35 s: the connection is taken for dead and re-opened.
var ErrSilent = fmt.Errorf("the sandbox runtime sent nothing for %v, not even a heartbeat (is its --heartbeat-seconds over 35?)", idleTimeout)

// readEvents reads NDJSON events from body until a final event. cancel
// ends the request: it is called with ErrSilent when the stream stays
// silent for idleTimeout. onStarted, when not nil, gets the status of a
// started event.
func (c *Client) readEvents(ctx context.Context, cancel context.CancelCauseFunc, body io.Reader, cursor *int64, fn EventFunc, onStarted func(*wire.Status)) (*wire.Event, error) {
	idle := time.AfterFunc(idleTimeout, func() { cancel(ErrSilent) })
	defer idle.Stop()
	br := bufio.NewReaderSize(body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			// A line without its newline was cut off: it is read again.
			if ctx.Err() != nil && err != io.EOF {
				if cerr := context.Cause(ctx); cerr != nil && !errors.Is(cerr, context.Canceled) {
					return nil, cerr
				}
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, c.describe(fmt.Errorf("the event stream broke off: %w", err))
		}
		idle.Reset(idleTimeout)
		var ev wire.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, fmt.Errorf("%w: a line is not an event: %v", ErrStreamBroken, err)
		}
		if ev.Type == wire.EventStarted && ev.Status != nil && onStarted != nil {
			onStarted(ev.Status)
		}
		done, err := processEvent(&ev, cursor, fn)
		if err != nil || done {
			return &ev, err
		}
	}
}

// processEvent checks ev against *cursor, hands output and gap events to
// fn and advances *cursor. done reports a final event.
func processEvent(ev *wire.Event, cursor *int64, fn EventFunc) (done bool, err error) {
	switch ev.Type {
	case wire.EventOutput:
		if ev.Cursor == nil || *ev.Cursor != *cursor {
			return false, fmt.Errorf("%w: output at cursor %s, expected %d", ErrStreamBroken, fmtCursor(ev.Cursor), *cursor)
		}
		data, err := ev.Bytes()
		if err != nil {
			return false, fmt.Errorf("%w: bad base64 at cursor %d: %v", ErrStreamBroken, *cursor, err)
		}
		if ev.NextCursor != *cursor+int64(len(data)) {
			return false, fmt.Errorf("%w: output at cursor %d holds %d bytes but next_cursor is %d", ErrStreamBroken, *cursor, len(data), ev.NextCursor)
		}
	case wire.EventGap:
		if ev.DroppedBytes == nil {
			return false, fmt.Errorf("%w: gap event without dropped_bytes", ErrStreamBroken)
		}
		if ev.NextCursor < *cursor {
			return false, fmt.Errorf("%w: gap back to %d from %d", ErrStreamBroken, ev.NextCursor, *cursor)
		}
	case wire.EventExit, wire.EventEnd:
		if ev.NextCursor != *cursor {
			return false, fmt.Errorf("%w: %s event at next_cursor %d, expected %d", ErrStreamBroken, ev.Type, ev.NextCursor, *cursor)
		}
		if ev.Type == wire.EventExit && ev.Status == nil {
			return false, fmt.Errorf("%w: exit event without a status", ErrStreamBroken)
		}
		return true, nil
	case wire.EventStarted, wire.EventHeartbeat:
		return false, nil
	default: // a newer event type: skip it, keeping the cursor
		return false, nil
	}
	if err := fn(ev); err != nil {
		return false, &callbackError{err}
	}
	*cursor = ev.NextCursor
	return false, nil
}

func fmtCursor(p *int64) string {
	if p == nil {
		return "(none)"
	}
	return strconv.FormatInt(*p, 10)
}

// RunOptions shape Run.
type RunOptions struct {
	// Stdout and Stderr, when set, get each chunk of output as it arrives
	// (the slice is not retained). A PTY command's output goes to Stdout.
	Stdout, Stderr func(data []byte)
	// OnStart, when set, is called once the command exists, before any
	// output is delivered (e.g. to start writing its stdin).
	OnStart func(st *wire.Status)
	// OnGap, when set, is told of output the daemon no longer held when it
	// was read (counted in Result.GapBytes too).
	OnGap func(droppedBytes int64)
	// CollectLimit bounds the bytes Result keeps per stream (the first
	// ones; the rest is counted in Result.StdoutDropped/StderrDropped).
	// 0: 64 MiB; negative: collect nothing.
	CollectLimit int
	// Hold, when positive, asks the daemon to wait for this Run, up to Hold
	// without progress (at most 10 s), rather than evict output it has not
	// received (`?hold=`, protocol.md §4 "Holding the producer"): the
	// command then runs at the pace Run reads, and loses output only while
	// no stream is open (between reconnects) or once a wait lapses.
	Hold time.Duration
}

// Result is what Run collected.
type Result struct {
	Status         *wire.Status // the final status
	Stdout, Stderr []byte
	// StdoutDropped and StderrDropped count bytes past CollectLimit.
	StdoutDropped, StderrDropped int64
	// GapBytes counts output the daemon no longer held when it was read
	// (its ring keeps only the most recent output), delivered to nobody.
	GapBytes int64
}

// ExitCode returns the exit code as a shell reports it: the command's
// code, or 128+N when signal N ended it.
func (r *Result) ExitCode() int { return ExitCode(r.Status) }

// ExitCode returns st's exit code as a shell reports it: the code, 128+N
// for a death by signal N, -1 while the command runs.
func ExitCode(st *wire.Status) int {
	if st == nil || st.ExitCode == nil {
		return -1
	}
	if *st.ExitCode < 0 {
		return 128 - *st.ExitCode
	}
	return *st.ExitCode
}

const defaultCollectLimit = 64 << 20

// collector is Run's event callback: it keeps each stream in res up to
// o's CollectLimit (counting the rest as dropped), adds the gaps, and calls
// o's callbacks.
func (o RunOptions) collector(res *Result) func(ev *wire.Event) error {
	limit := o.CollectLimit
	if limit == 0 {
		limit = defaultCollectLimit
	}
	collect := func(dst *[]byte, dropped *int64, data []byte) {
		if limit < 0 {
			return
		}
		n := min(len(data), limit-len(*dst))
		*dst = append(*dst, data[:n]...)
		*dropped += int64(len(data) - n)
	}
	return func(ev *wire.Event) error {
		if ev.Type == wire.EventGap {
			res.GapBytes += *ev.DroppedBytes
			if o.OnGap != nil {
				o.OnGap(*ev.DroppedBytes)
			}
			return nil
		}
		data, _ := ev.Bytes() // checked by processEvent
		if ev.Stream == wire.StreamStderr {
			collect(&res.Stderr, &res.StderrDropped, data)
			if o.Stderr != nil {
				o.Stderr(data)
			}
			return nil
		}
		collect(&res.Stdout, &res.StdoutDropped, data)
		if o.Stdout != nil {
			o.Stdout(data)
		}
		return nil
	}
}

// Run creates a command, streams its output to the callbacks as it comes,
// and returns the collected result once it has finished. The stream is
// resumed after disconnects without losing or repeating a byte. When req
// has no CommandID, Run gives it one, so the create is retried safely.
// Cancelling ctx returns ctx's error and leaves the command running.
func (c *Client) Run(ctx context.Context, req wire.CreateRequest, o RunOptions) (*Result, error) {
	if req.CommandID == "" {
		req.CommandID = uuid.NewString()
	}
	res := &Result{}
	fn := o.collector(res)

	var cursor int64
	started := false
	onStart := func(st *wire.Status) {
		if !started {
			started = true
			if o.OnStart != nil {
				o.OnStart(st)
			}
		}
	}
	// Create and stream in one request. The create carries a command_id,
	// so send may repeat it until an answer arrives; once one has, the rest
	// is read with Follow from the cursor reached (a repeated create would
	// replay from 0).
	q := url.Values{"stream": {"true"}, "max_wait": {strconv.Itoa(streamWindow)}}
	setHold(q, o.Hold)
	body, err := createBody(req)
	if err != nil {
		return nil, err
	}
	r := request{method: "POST", path: "/v1/commands", query: q, body: body, idempotent: true}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	resp, err := c.send(sctx, r)
	if err != nil {
		return nil, err
	}
	final, err := c.readEvents(sctx, cancel, resp.Body, &cursor, fn, onStart)
	resp.Body.Close()
	if err == nil && final.Type == wire.EventExit {
		onStart(final.Status)
		res.Status = final.Status
		return res, nil
	}
	if err != nil && (errors.Is(err, errCallback) || errors.Is(err, ErrStreamBroken) || ctx.Err() != nil) {
		return nil, err
	}
	if !started {
		// The answer broke off before its first line: the command exists
		// (the daemon answered), so make sure OnStart sees it.
		st, gerr := c.Get(ctx, req.CommandID)
		if gerr != nil {
			return nil, gerr
		}
		onStart(st)
	}
	st, err := c.follow(ctx, req.CommandID, &cursor, fn, o.Hold)
	if err != nil {
		return nil, err
	}
	res.Status = st
	return res, nil
}

// setHold adds an output stream's hold to q (none when d <= 0).
func setHold(q url.Values, d time.Duration) {
	if d > 0 {
		q.Set("hold", strconv.FormatFloat(d.Seconds(), 'f', -1, 64))
	}
}
