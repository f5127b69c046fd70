package runtime

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
	"github.com/sandbox-runtime/sandbox-runtime/ringbuf"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// minPipeDrain is how long the pipes are read after the leader exits when
// the kill grace is shorter: output the leader wrote just before exiting is
// still in the pipe and must not be lost.
const minPipeDrain = 100 * time.Millisecond

// pumpBufSize is the read size of a pipe reader: the default pipe capacity.
const pumpBufSize = 64 << 10

// pumpBufs recycles pipe-reader buffers: fresh memory is slow to touch on
// these VMs, and a short command should not pay for 128 KiB of it.
var pumpBufs = sync.Pool{New: func() any { b := make([]byte, pumpBufSize); return &b }}

// Command is one managed command. Its exported methods are safe for
// concurrent use.
type Command struct {
	id   string
	spec spec
	m    *Manager
	log  *zap.Logger
	ring *ringbuf.Ring

	// startedCh is closed once the spawn has succeeded or failed; startErr and
	// proc are written before it is closed and never after.
	startedCh chan struct{}
	startErr  error
	proc      *procgroup.Process
	running   func() // gives back its ClassCommand place (admission.go); set at creation

	endCh chan struct{} // closed when an early end is first requested (see requestEnd)
	done  chan struct{} // closed after the final state is set and the ring closed

	mu           sync.Mutex // guards the fields below
	state        State
	cause        cause
	leaderExited bool
	endRequested bool // endCh is closed
	exit         procgroup.ExitStatus
	createdAt    time.Time
	startedAt    time.Time
	finishedAt   time.Time
	stdin        stdinQueue

	term *terminal // the PTY's size and input state; nil without a PTY. Set at creation.

	// createHold is the output hold a create asked for (CreateRequest.Hold),
	// made before the process starts so that no byte is evicted before its
	// stream is open; TakeCreateHold hands it to that stream.
	createHold atomic.Pointer[ringbuf.Hold]
}

// stdinQueue is the ordered, bounded queue in front of a command's stdin pipe.
// It is guarded by Command.mu.
type stdinQueue struct {
	enabled bool
	closed  bool         // eof requested (or never enabled, or the command finished)
	queued  int          // bytes accepted and not yet written
	chunks  []stdinChunk // in order
	broken  bool         // a write failed: later data is discarded
	wake    chan struct{}
	room    chan struct{} // closed (and replaced) each time the writer takes a chunk off
}

// stdinChunk is one write for the writer. eof (terminals only) asks it to
// type the end of file after data: what that takes is decided when it is
// written, from the terminal's state then (procgroup.EOFSequence).
type stdinChunk struct {
	data []byte
	eof  bool
}

// ID returns the canonical command id.
func (c *Command) ID() string { return c.id }

// Done is closed when the command has finished and its status is final.
func (c *Command) Done() <-chan struct{} { return c.done }

// Status returns a snapshot of the command.
func (c *Command) Status() Status { return c.status(true) }

// status is Status; look false skips the waiting_for_input look at /proc
// (answering false), for the status of a command that has just started.
func (c *Command) status(look bool) Status {
	waiting := look && c.waitingForInput()
	size, sized := c.terminalSize()
	st := c.ring.Stats()
	c.mu.Lock()
	defer c.mu.Unlock()
	if sized {
		c.term.cols, c.term.rows = size.cols, size.rows
	}
	s := Status{
		CommandID:       c.id,
		Argv:            c.spec.argv,
		Cwd:             c.spec.cwd,
		State:           c.state.Wire(),
		Stdin:           c.stdin.enabled,
		StdinClosed:     c.stdin.closed,
		TimeoutSeconds:  c.spec.timeout.Seconds(),
		CreatedAt:       utc(c.createdAt),
		StartedAt:       utcPtr(c.startedAt),
		FinishedAt:      utcPtr(c.finishedAt),
		StdoutBytes:     st.StdoutTotal,
		StderrBytes:     st.StderrTotal,
		RetainedFrom:    st.Start,
		NextCursor:      st.End,
		OutputTruncated: st.Truncated,
	}
	if c.proc != nil {
		s.PID = c.proc.Pid
	}
	c.ptyStatus(&s, waiting)
	if c.state.Finished() {
		code := c.exit.Code
		s.ExitCode = &code
		if c.exit.Signal != 0 {
			name := SignalName(c.exit.Signal)
			s.Signal = &name
		}
		s.ExpiresAt = utcPtr(c.finishedAt.Add(c.m.cfg.ResultTTL))
		s.OOMKilled = c.exit.OOMKilled
		s.Resources = &Resources{
			UserCPUMillis:   c.exit.UserCPU.Milliseconds(),
			SystemCPUMillis: c.exit.SysCPU.Milliseconds(),
			MaxRSSKB:        c.exit.MaxRSSKB,
		}
	}
	return s
}

// Read copies retained output from cursor on; see ringbuf.Ring.Read. A cursor
// beyond the output produced so far wraps ErrInvalid.
func (c *Command) Read(cursor int64, maxBytes int, dst []byte, recs []ringbuf.Record) (ringbuf.ReadResult, error) {
	res, err := c.ring.Read(cursor, maxBytes, dst, recs)
	if err != nil {
		return res, invalidf("cursor %d: %v", cursor, err)
	}
	return res, nil
}

// CheckCursor reports whether cursor is a valid place to read from now.
func (c *Command) CheckCursor(cursor int64) error {
	if end := c.ring.Stats().End; cursor < 0 || cursor > end {
		return invalidf("cursor %d is outside [0, %d]", cursor, end)
	}
	return nil
}

// MaxHold bounds the hold of an output stream (Hold, CreateRequest.Hold):
// how long the pump may wait without progress of a holding reader, when it
// would evict bytes that reader has not read yet, before it evicts them
// anyway and the hold lapses (protocol.md §4 "Holding the producer").
const MaxHold = wire.MaxHoldSeconds * time.Second

// MaxHolds bounds the holding streams of one command at once: each can
// hold the command back by its bound when its reader stops, one after the
// other.
const MaxHolds = 8

// Hold asks the command's pump to wait, up to bound (at most MaxHold)
// without progress of the caller, rather than evict output from cursor on
// that the caller has not read yet; the caller reports what it has read
// with Advance and releases the hold when its stream ends. A hold lapses
// once the pump has waited a whole bound for it with no Advance, until the
// reader has caught up (ringbuf.Hold). It never affects the command beyond
// those waits: its pipe fills and the child blocks in its writes while the
// pump waits. A command holds at most MaxHolds streams: another is an
// ErrConflict.
func (c *Command) Hold(cursor int64, bound time.Duration) (*ringbuf.Hold, error) {
	h, ok := c.ring.Hold(cursor, min(bound, MaxHold), MaxHolds)
	if !ok {
		return nil, errorf(ErrConflict, "command %s has %d holding streams already (the most it takes): open this one without hold", c.id, MaxHolds)
	}
	return h, nil
}

// TakeCreateHold returns the hold its create asked for, once (nil after
// that, or when it asked for none).
func (c *Command) TakeCreateHold() *ringbuf.Hold { return c.createHold.Swap(nil) }

// NextCursor returns the cursor just past the output produced so far.
func (c *Command) NextCursor() int64 { return c.ring.End() }

// Notify returns a channel closed at the next output or at the end of output.
// Take it before Read so that no wake-up is missed.
func (c *Command) Notify() <-chan struct{} { return c.ring.Notify() }

// Wait holds until the command finishes, d passes or ctx is done, and returns
// the status either way. It never affects the command.
func (c *Command) Wait(ctx context.Context, d time.Duration) Status {
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-c.done:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return c.Status()
}

// Kill cancels the command (SIGTERM to the group, SIGKILL after the grace) and
// returns the final status once it has finished. On a finished command it
// returns the status unchanged. If ctx ends first the current status is
// returned with ctx's error; the kill goes on regardless.
func (c *Command) Kill(ctx context.Context) (Status, error) {
	c.requestEnd(causeKill)
	select {
	case <-c.done:
		return c.Status(), nil
	case <-ctx.Done():
		return c.Status(), ctx.Err()
	}
}

// Signal sends sig to the command's process group. The state is not changed
// by itself. ErrFinished once the command has finished.
func (c *Command) Signal(sig syscall.Signal) (Status, error) {
	c.mu.Lock()
	finished := c.state.Finished()
	c.mu.Unlock()
	if finished {
		return c.Status(), errorf(ErrFinished, "command %s has finished", c.id)
	}
	// A group that is already empty (leader gone, pipes draining) is not an
	// error: the signal had nobody left to reach.
	_ = c.proc.Signal(sig)
	return c.Status(), nil
}

// WriteStdin queues data for the command's stdin, and closes it after the
// data when eof is set. It never blocks on the child. It answers the number
// of bytes accepted and whether stdin is now closed.
func (c *Command) WriteStdin(data []byte, eof bool) (int, bool, error) {
	if c.term != nil {
		return c.writeTerminal(data, eof)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	q := &c.stdin
	switch {
	case !q.enabled:
		return 0, true, errorf(ErrStdinNotEnabled, "command %s was started without stdin", c.id)
	case c.state.Finished():
		return 0, true, errorf(ErrFinished, "command %s has finished", c.id)
	case q.closed:
		return 0, true, errorf(ErrStdinClosed, "stdin of command %s is closed", c.id)
	case q.queued+len(data) > c.m.cfg.StdinLimit:
		return 0, false, errorf(ErrStdinFull, "stdin queue holds %d of %d bytes; %d more do not fit", q.queued, c.m.cfg.StdinLimit, len(data))
	}
	if len(data) > 0 {
		q.chunks = append(q.chunks, stdinChunk{data: append([]byte(nil), data...)})
		q.queued += len(data)
	}
	if eof {
		q.closed = true
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return len(data), q.closed, nil
}

// WriteStdinWait is WriteStdin for a sender that must not lose input (a
// WebSocket attachment, which has no Retry-After to offer): while the queue
// is full it waits for the writer to make room, until the command finishes
// (ErrFinished) or abort is closed (ErrStdinFull, nothing queued). It still
// answers ErrStdinFull at once for data that could never fit the queue.
func (c *Command) WriteStdinWait(abort <-chan struct{}, data []byte, eof bool) (int, bool, error) {
	for {
		c.mu.Lock()
		room := c.stdin.room
		c.mu.Unlock()
		n, closed, err := c.WriteStdin(data, eof)
		if !errors.Is(err, ErrStdinFull) || len(data)+1 > c.m.cfg.StdinLimit {
			return n, closed, err
		}
		select {
		case <-room:
		case <-c.done: // the next WriteStdin answers ErrFinished
		case <-abort:
			return n, closed, err
		}
	}
}

// requestEnd asks the owner to signal the process group (SIGTERM, then
// SIGKILL after the grace) and records why; the first request wins.
//
// The rule for the final state: it is a function of what happened, not of
// which goroutine ran first. An end requested while the leader is alive
// decides the final state (cancelled, timed_out, terminated). Once the Reaper
// has collected the leader's exit status, the leader ended on its own and the
// state is exited whatever arrives later: a kill or shutdown still reaches
// what is left of the group during the pipe grace, a timeout does nothing
// (members are not signalled when the leader exits on its own). "Collected"
// is asked of the Reaper itself (Process.Exited, ordered after its wait4), not
// of the owner goroutine, which may not have taken the exit in yet.
func (c *Command) requestEnd(why cause) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != StateRunning || c.endRequested {
		return
	}
	if !c.leaderExited && c.proc.Exited() {
		c.leaderExited = true
	}
	if c.leaderExited && why == causeTimeout {
		return
	}
	c.endRequested = true
	if !c.leaderExited {
		c.cause = why
	}
	close(c.endCh)
}

// run is the owner goroutine: it pumps output, has the supervisor
// (supervise.go) enforce the timeout and the end-of-command rules, and
// finalises the command.
func (c *Command) run(p *procgroup.Process) {
	defer c.m.wg.Done()
	var pumps pumpSet
	var files []*os.File
	if p.PTY != nil {
		// One stream, read until EIO: every holder of the terminal closed it.
		pumps.add(1)
		files = []*os.File{p.PTY}
		go c.pump(p.PTY, ringbuf.PTY, pumps.finished)
		c.m.wg.Add(1) // the owner holds a count: Shutdown's Wait cannot have returned
		go c.writeStdin(p.PTY)
	} else {
		pumps.add(2)
		files = []*os.File{p.Stdout, p.Stderr}
		go c.pump(p.Stdout, ringbuf.Stdout, pumps.finished)
		go c.pump(p.Stderr, ringbuf.Stderr, pumps.finished)
	}
	if p.Stdin != nil {
		c.m.wg.Add(1)
		go c.writeStdin(p.Stdin)
	}
	s := supervision{
		m: c.m, p: p, timeout: c.spec.timeout, pumps: &pumps, files: files,
		endCh:      c.endCh,
		requestEnd: c.requestEnd,
		endHolds:   c.ring.EndHolds,
		leaderExited: func() {
			c.mu.Lock()
			c.leaderExited = true
			c.mu.Unlock()
		},
		ending: func() {
			// The leader may have ended on its own since the end was
			// requested (it is a zombie, or reaped): then it was not the
			// request that ended it, and the state is exited. The group is
			// still signalled. What is left is the window between this look
			// and the first signal (microseconds).
			if p.Exited() {
				c.mu.Lock()
				c.leaderExited, c.cause = true, causeNone
				c.mu.Unlock()
			}
		},
	}
	res := s.run()
	if p.Stdout != nil {
		p.Stdout.Close()
		p.Stderr.Close()
	}
	if p.PTY != nil {
		// The last size is the one the program left (stty cols 50), though
		// nobody looked since: take it while the terminal is open.
		if size, ok := c.terminalSize(); ok {
			c.mu.Lock()
			c.term.cols, c.term.rows = size.cols, size.rows
			c.mu.Unlock()
		}
		p.PTY.Close() // hangs up the terminal: SIGHUP to what is left of the session
	}
	if res.terminated != nil {
		<-res.terminated
	} else {
		// An end was requested but the process ended on its own before the
		// owner signalled anything: it was not cancelled, timed out or terminated.
		c.mu.Lock()
		c.cause = causeNone
		c.mu.Unlock()
	}
	p.Release() // signalling is over: the pidfd and the cgroup go
	c.finish(p.Exit())
}

// finish sets the final state, closes the ring and then the done channel.
func (c *Command) finish(exit procgroup.ExitStatus) {
	now := c.m.cfg.Clock.Now()
	c.mu.Lock()
	c.state = transition(c.state, evEnded, c.cause)
	c.exit = exit
	c.finishedAt = now
	c.stdin.closed = true
	c.stdin.chunks, c.stdin.queued = nil, 0
	state := c.state
	c.mu.Unlock()
	if c.proc.Stdin != nil {
		c.proc.Stdin.Close() // unblocks a writer stuck on a child that never reads
	}
	c.ring.Close()
	st := c.ring.Stats()
	// Free the running slot before anyone can observe the end: a client that
	// sees exit and creates the next command at once must not get a 429.
	c.m.finished(c, state, st.Truncated)
	close(c.done)
	// The command's one info line: the start's audit fields, then the end's.
	c.log.Info("command finished",
		zap.String("argv0", c.spec.argv[0]), zap.Int("pid", c.proc.Pid),
		zap.Float64("timeout_seconds", c.spec.timeout.Seconds()),
		zap.Bool("stdin", c.spec.stdin), zap.Bool("pty", c.spec.pty != nil),
		zap.String("state", state.String()),
		zap.Int("exit_code", exit.Code),
		zap.Duration("duration", now.Sub(c.startedAt)),
		zap.Int64("stdout_bytes", st.StdoutTotal),
		zap.Int64("stderr_bytes", st.StderrTotal),
		zap.Int64("pty_bytes", st.End-st.StdoutTotal-st.StderrTotal),
		zap.Bool("truncated", st.Truncated),
		zap.Duration("output_held", st.HeldFor),
		zap.Bool("oom_killed", exit.OOMKilled))
}

// pump copies one pipe into the ring until EOF or until the pipe is closed
// (a terminal: until EIO, then terminalEIO). It never waits for a reader. A
// multi-byte UTF-8 character split by a read is held back until the next
// read (or EOF), so no chunk ends inside one.
func (c *Command) pump(f *os.File, s ringbuf.Stream, done func()) {
	defer done()
	bp := pumpBufs.Get().(*[]byte)
	defer pumpBufs.Put(bp)
	buf := *bp
	held := 0
	var total int64
	for {
		if hook := testHookPTYRead.Load(); hook != nil && s == ringbuf.PTY {
			if err := (*hook)(c, total); err != nil {
				held = c.terminalEIO(f, buf, held, total)
				c.pumpEnd(s, buf, held)
				return
			}
		}
		n, err := f.Read(buf[held:])
		if n > 0 {
			total += int64(n)
			data := buf[:held+n]
			cut := UTF8Prefix(data)
			c.ring.AppendHeld(s, data[:cut]) // waits for a holding reader (Hold); Append without one
			c.m.obs.OutputBytes(s != ringbuf.Stderr, cut)
			held = copy(buf, data[cut:])
		}
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The owner ended collection: take what the pipe already holds.
			var got int
			var eio bool
			held, got, eio, _ = c.drain(f, s, buf, held)
			if eio {
				held = c.terminalEIO(f, buf, held, total+int64(got))
			}
			err = io.EOF
		case s == ringbuf.PTY && errors.Is(err, syscall.EIO):
			held = c.terminalEIO(f, buf, held, total)
		}
		if err != nil {
			c.pumpEnd(s, buf, held)
			return
		}
	}
}

// pumpEnd appends the bytes held back at the end of a stream (an
// incomplete UTF-8 character: no more is coming).
func (c *Command) pumpEnd(s ringbuf.Stream, buf []byte, held int) {
	if held > 0 {
		c.ring.Append(s, buf[:held])
		c.m.obs.OutputBytes(s != ringbuf.Stderr, held)
	}
}

// ldiscSize is what a terminal master's line discipline holds (Linux's
// N_TTY_BUF_SIZE less one): output beyond it waits in the kernel's flip
// buffers until the reader makes room.
const ldiscSize = 4095

// terminalTailMax bounds terminalEIO's re-reads in time.
const terminalTailMax = 250 * time.Millisecond

// terminalTailWaits is the schedule on which a terminal's master is read
// again after it reported EIO (terminalEIO); about 31 ms in all.
var terminalTailWaits = [...]time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond, 16 * time.Millisecond}

// terminalEIO reads the rest of a terminal's output once its master has
// reported EIO (no process holds the terminal any more), and returns the
// bytes still held back in buf.
//
// Linux may report EIO before the end: when the reader fell behind, output
// the program wrote just before it exited can still sit in the kernel's
// flip buffers, which a worker moves into the line discipline only later
// (seen on 6.18: a read returned EIO with 11,650 bytes still to come, all of
// them read 1 ms later; 2 of 19,000 runs of a program writing 20,890 bytes).
// Such a backlog needs the line discipline to have been full, so a terminal
// that never produced ldiscSize bytes has nothing left and ends at once.
// Otherwise the master is read again after each of terminalTailWaits,
// starting over whenever more came, until a whole schedule brings nothing,
// maxFinalDrain bytes have come this way, or terminalTailMax has passed (a
// process that opened the terminal again after EIO and writes slowly).
func (c *Command) terminalEIO(f *os.File, buf []byte, held int, total int64) int {
	if total < ldiscSize {
		return held
	}
	late := 0
	end := time.Now().Add(terminalTailMax)
	for i := 0; i < len(terminalTailWaits) && late < maxFinalDrain && time.Now().Before(end); i++ {
		time.Sleep(terminalTailWaits[i])
		var got int
		var waited time.Duration
		held, got, _, waited = c.drain(f, ringbuf.PTY, buf, held)
		end = end.Add(waited) // time given to holding streams is not the tail's
		if got > 0 {
			late += got
			i = -1 // more came: the schedule starts over
		}
	}
	if late > 0 {
		c.log.Debug("terminal output after EIO", zap.Int("bytes", late))
	}
	return held
}

// testHookPTYRead, set by a test only, runs before each read of a
// terminal's master with the bytes read so far; an error makes the pump
// act as if the read had reported EIO.
var testHookPTYRead atomic.Pointer[func(c *Command, total int64) error]

// testHookStdinWriterExit, set by a test only, runs as writeStdin returns
// (before its wait-group count is given back).
var testHookStdinWriterExit atomic.Pointer[func(*Command)]

// maxFinalDrain bounds the final drain of one pipe, so that a background
// member writing without pause cannot keep the command from finishing.
const maxFinalDrain = 1 << 20

// drain appends what f holds right now (it never waits for more output),
// at most maxFinalDrain bytes, and returns the number of bytes still held
// back in buf as in pump, how many it read, whether it stopped at EIO (a
// terminal no process holds), and how long its appends waited for holding
// streams. f's read deadline may have passed; drain clears it.
func (c *Command) drain(f *os.File, s ringbuf.Stream, buf []byte, held int) (_ int, total int, eio bool, waited time.Duration) {
	if f.SetReadDeadline(time.Time{}) != nil {
		return held, 0, false, 0
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return held, 0, false, 0
	}
	_ = rc.Read(func(fd uintptr) bool {
		for total < maxFinalDrain {
			n, err := syscall.Read(int(fd), buf[held:])
			if err == syscall.EINTR {
				continue
			}
			if n <= 0 || err != nil {
				eio = err == syscall.EIO
				return true // EAGAIN (empty), EOF or an error: done either way
			}
			total += n
			data := buf[:held+n]
			cut := UTF8Prefix(data)
			// Held like the pump's appends (the final drain is at most
			// maxFinalDrain; at Shutdown's kill deadline the holds have
			// ended and this is an Append).
			waited += c.ring.AppendHeld(s, data[:cut])
			c.m.obs.OutputBytes(s != ringbuf.Stderr, cut) // a terminal's output counts as stdout, as in pump
			held = copy(buf, data[cut:])
		}
		return true
	})
	return held, total, eio, waited
}

// UTF8Prefix returns the length of the longest prefix of p that does not
// end inside a multi-byte UTF-8 character that could still be completed.
// Invalid bytes are not held back.
func UTF8Prefix(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(p[i]) {
			if p[i] >= utf8.RuneSelf && !utf8.FullRune(p[i:]) {
				return i
			}
			return len(p)
		}
	}
	return len(p)
}

// writeStdin feeds queued stdin to the pipe in order, and closes the pipe
// after eof. It exits when stdin is closed or the command is done. It counts
// in the Manager's wait group (run adds it), so Shutdown returns only once no
// writer is left touching a command's pipe or terminal.
func (c *Command) writeStdin(w *os.File) {
	defer c.m.wg.Done()
	if hook := testHookStdinWriterExit.Load(); hook != nil {
		defer (*hook)(c)
	}
	var line procgroup.InputLine // a terminal's pending line; only this goroutine touches it
	for {
		c.mu.Lock()
		q := &c.stdin
		var chunk stdinChunk
		ok := len(q.chunks) > 0
		if ok {
			chunk = q.chunks[0]
			q.chunks[0] = stdinChunk{}
			q.chunks = q.chunks[1:]
		}
		closed, broken := q.closed, q.broken
		c.mu.Unlock()
		if ok {
			data, size := chunk.data, len(chunk.data)
			if chunk.eof {
				size++
			}
			if !broken && c.term != nil {
				c.proc.TrackInput(&line, data)
				if chunk.eof {
					seq, err := c.proc.EOFSequence(&line)
					if err == nil {
						data = append(data, seq...)
					} else if !errors.Is(err, procgroup.ErrNoVEOF) {
						broken = true // the terminal is closing
					}
				}
			}
			if !broken {
				if _, err := w.Write(data); err != nil {
					broken = true
				}
			}
			c.mu.Lock()
			q.broken = q.broken || broken
			q.queued -= size
			if q.queued < 0 {
				q.queued = 0
			}
			close(q.room)
			q.room = make(chan struct{})
			c.mu.Unlock()
			continue
		}
		if closed {
			w.Close()
			return
		}
		select {
		case <-q.wake:
		case <-c.done:
			return
		}
	}
}
