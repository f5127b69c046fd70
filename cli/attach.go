//go:build linux

package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"

	srclient "github.com/sandbox-runtime/sandbox-runtime/client"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// pumpOptions shape pumpStdin.
type pumpOptions struct {
	// detach, when set, is called once the detach key is read (a raw
	// terminal): reading stops, what was read before the key is sent first
	// (for up to detachDrain, saying so), and detach gets how many of those
	// bytes could not be sent (0: all were).
	detach func(unsent int64)
	// noEOF: the local EOF stops forwarding without telling the command.
	noEOF bool
	// failed, when set, is called once when a send fails for a reason
	// other than the command being done with its input.
	failed func(error)
}

// pumpStdin copies this process's stdin to send until EOF, which it sends
// too (unless o.noEOF). Reading and sending are apart: a send that waits
// (for a reconnect, or a full stdin queue) neither loses nor reorders what
// is typed meanwhile, and the detach key still works while it waits. It
// stops quietly when the command no longer takes input.
func (c *cli) pumpStdin(send func(b []byte, eof bool) error, o pumpOptions) {
	q := make(chan inputChunk, 256)
	var unsent atomic.Int64 // bytes read and not yet sent
	drained := make(chan struct{})
	go c.sendInput(q, send, &unsent, o, drained)
	closed := false
	defer func() {
		if !closed {
			close(q)
		}
	}()
	for {
		buf := make([]byte, 64<<10)
		n, err := c.stdin.Read(buf)
		if n > 0 {
			b := buf[:n]
			if o.detach != nil {
				if i := bytes.IndexByte(b, detachKey); i >= 0 {
					closed = true
					c.detachAfter(b[:i], q, &unsent, drained, o.detach)
					return
				}
			}
			unsent.Add(int64(n))
			q <- inputChunk{b: b}
		}
		if err != nil {
			if err != io.EOF {
				// The command must not take a cut input for a whole one
				// in silence; its stdin is closed all the same, as after
				// an end, so that it does not wait for ever.
				c.errorf("reading the local stdin failed, so the command's stdin was closed early: %v", pathErr(err))
				c.readFailed.Store(true)
			}
			if !o.noEOF {
				q <- inputChunk{eof: true}
			}
			return
		}
	}
}

// inputChunk is what pumpStdin read, in order, for sendInput.
type inputChunk struct {
	b   []byte
	eof bool
}

// sendInput sends what comes on q until q is closed, then closes drained;
// unsent counts the bytes read and not yet sent. After a send fails it
// keeps draining q (the reader must never block on a dead sender) and
// reports the failure once, unless the command or this side is done with
// input.
func (c *cli) sendInput(q <-chan inputChunk, send func(b []byte, eof bool) error, unsent *atomic.Int64, o pumpOptions, drained chan<- struct{}) {
	defer close(drained)
	failed := false
	for ch := range q {
		if failed {
			continue
		}
		err := send(ch.b, ch.eof)
		if err == nil {
			unsent.Add(-int64(len(ch.b)))
			continue
		}
		failed = true
		if errors.Is(err, net.ErrClosed) || isInputDone(err) {
			continue // the command, or this side, is done with input
		}
		if o.failed != nil {
			o.failed(err)
		} else {
			c.stdinError(err)
		}
	}
}

// detachAfter ends the pump at the detach key: before (what was read
// ahead of the key) is queued and q closed; the sender has up to
// detachDrain to send what is still unsent (said when there is some), and
// detach gets how many bytes it could not.
func (c *cli) detachAfter(before []byte, q chan<- inputChunk, unsent *atomic.Int64, drained <-chan struct{}, detach func(unsent int64)) {
	if len(before) > 0 {
		unsent.Add(int64(len(before)))
		q <- inputChunk{b: before}
	}
	close(q)
	if n := unsent.Load(); n > 0 {
		c.rawErrorf("detaching: sending the %d bytes read before Ctrl-] first (up to %v)", n, detachDrain)
	}
	t := time.NewTimer(detachDrain)
	select {
	case <-drained:
	case <-t.C:
	}
	t.Stop()
	detach(unsent.Load())
}

// cbreak turns off canonical input and echo on terminal fd (keys arrive
// one by one, unseen); signals and output processing stay. It returns the
// function that restores the terminal.
func cbreak(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	t := *old
	t.Lflag &^= unix.ICANON | unix.ECHO
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }) }, nil
}

// isInputDone reports an error that says the command takes no more input.
func isInputDone(err error) bool {
	switch srclient.ErrorCode(err) {
	case wire.CodeFinished, wire.CodeStdinClosed:
		return true
	}
	return false
}

func (c *cli) stdinError(err error) {
	c.errorf("forwarding stdin: %v", err)
}

// attachTo follows command st over WebSocket from cursor until it exits,
// forwarding stdin (raw, when it is a terminal and the command has one),
// window sizes and signals. It returns the exit code; the detach key
// (Ctrl-], on a terminal) returns 0 and leaves the command running.
//
// owned: this client started the command (exec -t), so it kills it when
// its output can no longer be written here.
//
// Its steps: the local terminal (raw, window size), the input (stdin or
// only the detach key), the signals, then the events until the end.
func (c *cli) attachTo(ctx context.Context, st *wire.Status, cursor int64, withStdin, owned bool, hold time.Duration) int {
	ctx, cancel := context.WithCancel(ctx) // ends the window and signal relays with the attach
	defer cancel()
	a, err := c.c.AttachHeld(ctx, st.CommandID, cursor, hold)
	if err != nil {
		return c.fail(err, st.CommandID)
	}
	defer a.Close()
	at := &attachment{c: c, a: a, st: st, in: int(c.stdin.Fd()), pty: st.PTY != nil, owned: owned,
		restore: func() {}, detached: make(chan struct{}), detachDone: make(chan struct{})}
	defer func() { at.restore() }()
	if at.pty && term.IsTerminal(at.in) {
		at.rawTerminal(ctx)
	}
	if withStdin && (at.pty || (st.Stdin && !st.StdinClosed)) {
		at.forwardStdin()
	} else if term.IsTerminal(at.in) {
		at.watchDetachKey()
	}
	started := make(chan string, 1)
	started <- st.CommandID
	// Signals go over HTTP, not as frames: a frame would wait behind the
	// stdin frames in front of it, which wait for the command to read.
	go c.forwardSignals(ctx, started, nil, func(id string, sig os.Signal) {
		if _, err := c.c.Signal(ctx, id, signalName(sig)); err != nil && !isInputDone(err) && ctx.Err() == nil {
			c.rawErrorf("%s did not reach the command: %v", signalName(sig), reason(err))
		}
	})
	return at.follow(ctx)
}

// attachment is one attachTo: the command, the local terminal, and what
// the input and detach goroutines report to the event loop.
type attachment struct {
	c     *cli
	a     *srclient.Attachment
	st    *wire.Status
	in    int  // the local stdin's descriptor
	pty   bool // the command has a terminal
	owned bool // this client started the command (attachTo)

	// restore puts the local terminal back as it was (raw or cbreak
	// mode); idempotent, a no-op when nothing was changed.
	restore func()

	detached   chan struct{} // closed when the detach key is read
	detachDone chan struct{} // closed once detachLost is set
	detachLost string        // why input read before the key may not have arrived
	// inputLost: a frame was refused or a send failed, so the command may
	// not have seen everything that was typed or piped: never exit 0.
	inputLost atomic.Bool
}

// rawTerminal makes the local terminal raw, for the command's terminal,
// gives the command this window's size and follows its changes until ctx
// is done.
func (at *attachment) rawTerminal(ctx context.Context) {
	c, in, st := at.c, at.in, at.st
	if old, err := term.MakeRaw(in); err == nil {
		var once sync.Once
		at.restore = func() { once.Do(func() { term.Restore(in, old) }) }
	}
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	resize := func() {
		if cols, rows, err := term.GetSize(in); err == nil && cols > 0 && rows > 0 {
			cols, rows = c.clampWindow(cols, rows, true)
			if _, err := c.c.Resize(ctx, st.CommandID, cols, rows); err != nil && !isInputDone(err) && ctx.Err() == nil {
				c.rawErrorf("the window size %dx%d did not reach the command: %v", cols, rows, reason(err))
			}
		}
	}
	if st.PTY.Cols != 0 {
		// This terminal's size, not the one the command had: attach
		// may come from another window than the one that started it.
		if cols, rows, err := term.GetSize(in); err == nil && (cols != st.PTY.Cols || rows != st.PTY.Rows) {
			resize()
		}
	}
	go func() {
		defer signal.Stop(winch)
		for {
			select {
			case <-winch:
				resize()
			case <-ctx.Done():
				return
			}
		}
	}()
}

// forwardStdin pumps the local stdin to the command; on a terminal, the
// detach key ends the pump once what was read before it was sent.
func (at *attachment) forwardStdin() {
	c := at.c
	// A local EOF on a pipe or /dev/null (attach ID </dev/null) says
	// that there is nothing to type, not that a person pressed
	// Ctrl-D: a terminal command is left alone.
	o := pumpOptions{noEOF: at.pty && !term.IsTerminal(at.in), failed: func(err error) {
		c.stdinError(err)
		at.inputLost.Store(true)
	}}
	if term.IsTerminal(at.in) {
		// Raw: Ctrl-] at once; a pipe command on a cooked terminal:
		// Ctrl-] then Enter (the line is the terminal's until then).
		o.detach = func(unsent int64) {
			close(at.detached)
			switch {
			case unsent > 0:
				at.detachLost = fmt.Sprintf("%d bytes read before Ctrl-] were not sent: the command did not read them within %v", unsent, detachDrain)
				at.a.Close()
			case !at.a.Detach(detachConfirm): // ends the Next of follow
				at.detachLost = fmt.Sprintf("the daemon did not confirm within %v that it read everything sent before Ctrl-]", detachConfirm)
			}
			close(at.detachDone)
		}
	}
	go c.pumpStdin(at.a.Stdin, o)
}

// watchDetachKey is for a person at a terminal with no input to forward
// (--no-stdin, or a command without stdin) who wants to stop watching
// without Ctrl-C (forwarded: it would end the command; in raw mode it is
// only a key): it reads keys one by one for Ctrl-]. A pipe command's
// terminal goes to cbreak: echo off, signals and output as they were.
func (at *attachment) watchDetachKey() {
	if !at.pty { // else already raw
		undo, err := cbreak(at.in)
		if err != nil {
			return
		}
		at.restore = undo
	}
	go func() {
		buf := make([]byte, 256)
		for {
			n, err := at.c.stdin.Read(buf)
			if bytes.IndexByte(buf[:n], detachKey) >= 0 {
				close(at.detached)
				close(at.detachDone)
				at.a.Close()
				return
			}
			if err != nil {
				return
			}
		}
	}()
}

// follow writes the command's events here until it exits (its exit code),
// the detach key is read, or the attachment fails.
func (at *attachment) follow(ctx context.Context) int {
	c, st := at.c, at.st
	var gap int64 // output bytes lost
	for {
		ev, err := at.a.Next(ctx)
		if err != nil {
			at.restore()
			select {
			case <-at.detached:
				return at.detachedExit()
			default:
			}
			return c.fail(err, st.CommandID)
		}
		switch ev.Type {
		case wire.EventOutput:
			b, _ := ev.Bytes()
			w := c.stdout
			if ev.Stream == wire.StreamStderr {
				w = c.stderr
			}
			if !c.emit(w, b) {
				at.restore()
				if at.owned {
					return c.writeFailed(st.CommandID)
				}
				return c.writeFailed("")
			}
		case wire.EventGap:
			gap += *ev.DroppedBytes
		case wire.EventError:
			if ev.Error.Code != wire.CodeFinished && ev.Error.Code != wire.CodeStdinClosed {
				c.errorf("the daemon refused a frame: %s", ev.Error.Message)
				at.inputLost.Store(true)
			}
		case wire.EventExit:
			at.restore() // before the note, which wants a cooked terminal
			code := c.lost(gap, c.finished(ev.Status))
			if at.inputLost.Load() && code == 0 {
				c.errorf("the command exited 0, but not all of the input or frames sent to it arrived (see above); exiting %d", ExitFailed)
				return ExitFailed
			}
			return code
		}
	}
}

// detachedExit says that the client detached and returns its exit code:
// 0, or 125 when input read before the detach key may not have arrived.
func (at *attachment) detachedExit() int {
	c, id := at.c, at.st.CommandID
	if f, ok := c.stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		// The cursor is wherever the command left it (after its
		// prompt): start the note on a line of its own.
		fmt.Fprintln(c.stderr)
	}
	<-at.detachDone
	c.errorf("detached from %s, which goes on running; sandbox-runtime attach %s comes back to it", id, id)
	if at.detachLost != "" {
		c.errorf("%s; exiting %d", at.detachLost, ExitFailed)
		return ExitFailed
	}
	return 0
}

func (c *cli) attach(args []string) int {
	fs, url, tok := c.flags("attach [--no-stdin] [--cursor N] [--hold S] ID", "Attaches to a running command: shows its retained output (on a terminal, the screen) and what follows, forwards stdin (when the command has it; its end closes a pipe command's stdin, and on a terminal command only stops the forwarding), signals and, on a terminal, every key and the window size; Ctrl-] detaches and leaves it running. Exits with the command's exit code.")
	noStdin := fs.Bool("no-stdin", false, "do not forward stdin (the command's stays open)")
	cursor := fs.Int64("cursor", -1, "show the output from this cursor on (default: the oldest byte still retained)")
	var hold float64
	holdFlag(fs, &hold)
	rest, code, ok := c.parse(fs, url, tok, args, 1)
	if !ok {
		return code
	}
	if !c.checkHold(fs, hold) {
		return 2
	}
	ctx := context.Background()
	st, err := c.c.Get(ctx, rest[0])
	if err != nil {
		return c.fail(err, rest[0])
	}
	from := st.RetainedFrom
	if *cursor >= 0 {
		from = *cursor
	}
	return c.attachTo(ctx, st, from, !*noStdin, false, holdDuration(hold))
}
