package runtime

import (
	"strings"
	"sync"

	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// Terminal limits and defaults. The bound of cols and rows is the
// protocol's wire.MaxTerminalSize: one definition, which the client links
// without the runtime.
const (
	// DefaultTerm is TERM of a terminal command unless the request sets it.
	DefaultTerm = "xterm-256color"
	// maxTermLen bounds the "term" name.
	maxTermLen = 64
)

// PTYRequest asks for a command on a pseudo-terminal (CreateRequest.PTY).
type PTYRequest struct {
	Cols, Rows int    // 1..wire.MaxTerminalSize each; more is taken as that
	Term       string // TERM unless Envs sets it; "" means DefaultTerm
}

// ptySpec is a validated PTYRequest.
type ptySpec struct {
	cols, rows int
	term       string
}

// terminal is the runtime side of a command's PTY. resizeMu serialises
// resizes; it is taken before Command.mu, never after. Command.mu guards
// the other fields.
type terminal struct {
	resizeMu sync.Mutex
	// cols, rows: the kernel's size at the last look (a status, a resize),
	// reported once the terminal is closed.
	cols, rows int
	term       string // TERM the command started with: envs' TERM, else pty.term
}

type termSize struct{ cols, rows int }

// terminalSize asks the kernel for the terminal's size now; false without
// a terminal or once it is closed. It is called without Command.mu held.
func (c *Command) terminalSize() (termSize, bool) {
	if c.term == nil {
		return termSize{}, false
	}
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	if p == nil {
		return termSize{}, false
	}
	ws, err := p.Size()
	if err != nil {
		return termSize{}, false
	}
	return termSize{int(ws.Cols), int(ws.Rows)}, true
}

func newTerminal(s spec) *terminal {
	if s.pty == nil {
		return nil
	}
	term := s.pty.term
	if v, ok := s.envs["TERM"]; ok {
		term = v
	}
	return &terminal{cols: s.pty.cols, rows: s.pty.rows, term: term}
}

// clampSize brings a terminal dimension over wire.MaxTerminalSize down to it; it
// reports whether it did.
func clampSize(n *int) bool {
	if *n > wire.MaxTerminalSize {
		*n = wire.MaxTerminalSize
		return true
	}
	return false
}

func normalizePTY(r *PTYRequest) (*ptySpec, error) {
	if r == nil {
		return nil, nil
	}
	if r.Cols < 1 || r.Rows < 1 {
		return nil, invalidf("pty cols and rows must be at least 1 (got %d x %d); more than %d is taken as %d", r.Cols, r.Rows, wire.MaxTerminalSize, wire.MaxTerminalSize)
	}
	cols, rows := r.Cols, r.Rows
	clampSize(&cols)
	clampSize(&rows)
	term := r.Term
	if term == "" {
		term = DefaultTerm
	}
	if len(term) > maxTermLen || strings.ContainsFunc(term, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '=' }) {
		return nil, invalidf("pty term must be 1 to %d printable ASCII characters without spaces or '=' (got %q)", maxTermLen, r.Term)
	}
	return &ptySpec{cols: cols, rows: rows, term: term}, nil
}

func (p *ptySpec) equal(o *ptySpec) bool {
	if p == nil || o == nil {
		return p == o
	}
	return *p == *o
}

// winsize is the procgroup form of the spec; nil without a terminal.
func (p *ptySpec) winsize() *procgroup.Winsize {
	if p == nil {
		return nil
	}
	return &procgroup.Winsize{Cols: uint16(p.cols), Rows: uint16(p.rows)}
}

// environ is the environment of the command: the runtime's, the request's
// envs, and TERM for a terminal unless envs names it.
func (s spec) environ(base []string) []string {
	envs := s.envs
	if _, ok := envs["TERM"]; s.pty != nil && !ok {
		envs = make(map[string]string, len(s.envs)+1)
		for k, v := range s.envs {
			envs[k] = v
		}
		envs["TERM"] = s.pty.term
	}
	return buildEnv(base, envs)
}

// IsTerminal reports whether the command runs on a pseudo-terminal.
func (c *Command) IsTerminal() bool { return c.term != nil }

// ptyStatus adds the terminal fields to a status snapshot; c.mu is held.
// waiting is the WaitingForInput answer taken before the snapshot.
func (c *Command) ptyStatus(s *Status, waiting bool) {
	if c.term != nil {
		s.PTY = &PTYStatus{Cols: c.term.cols, Rows: c.term.rows, Term: c.term.term}
		// A terminal's output is one stream, kept in the ring as ringbuf.PTY.
		s.PTYBytes = s.NextCursor - s.StdoutBytes - s.StderrBytes
	}
	if c.term != nil || c.spec.stdin {
		w := waiting && !s.State.Finished()
		s.WaitingForInput = &w
	}
}

// waitingForInput asks the process whether it is blocked reading its
// terminal or stdin pipe (see procgroup.Process.WaitingForInput). It reads
// /proc, so it is called without Command.mu held.
func (c *Command) waitingForInput() bool {
	if c.term == nil && !c.spec.stdin {
		return false
	}
	c.mu.Lock()
	p, running := c.proc, c.state == StateRunning
	c.mu.Unlock()
	return p != nil && running && p.WaitingForInput()
}

// Resize sets the size of the command's terminal; the kernel sends SIGWINCH
// to the terminal's foreground process group. A dimension over
// wire.MaxTerminalSize is taken as that (the status shows the size
// set). ErrInvalid for a dimension under 1, ErrNotTerminal for a command
// without a PTY, ErrFinished once it has finished.
func (c *Command) Resize(cols, rows int) (Status, error) {
	if c.term == nil {
		return c.Status(), errorf(ErrNotTerminal, "command %s has no terminal (create it with \"pty\")", c.id)
	}
	if cols < 1 || rows < 1 {
		return c.Status(), invalidf("cols and rows must be at least 1 (got %d x %d); more than %d is taken as %d", cols, rows, wire.MaxTerminalSize, wire.MaxTerminalSize)
	}
	clampSize(&cols)
	clampSize(&rows)
	c.mu.Lock()
	finished := c.state.Finished()
	c.mu.Unlock()
	if finished {
		return c.Status(), errorf(ErrFinished, "command %s has finished", c.id)
	}
	c.term.resizeMu.Lock()
	err := c.proc.Resize(procgroup.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	if err == nil {
		c.mu.Lock()
		c.term.cols, c.term.rows = cols, rows
		c.mu.Unlock()
	}
	c.term.resizeMu.Unlock()
	if err != nil {
		// The master is closed only once the command is ending.
		return c.Status(), errorf(ErrFinished, "command %s is ending: %v", c.id, err)
	}
	return c.Status(), nil
}

// writeTerminal is WriteStdin for a command on a terminal: data goes to the
// terminal as raw bytes (the line discipline turns Ctrl-C into SIGINT, and
// echoes in canonical mode), and eof types the terminal's VEOF character
// rather than closing anything, so the terminal stays usable. VEOF is
// typed twice only when a partial line is certainly pending at that moment
// (procgroup.EOFSequence): the first ends the pending line, the second
// reads as end of file; once otherwise, since a needless second VEOF ends
// the next reader. The writer decides when it writes the eof,
// after everything queued before it. Stdin of a terminal is never closed;
// the answer's closed is false.
func (c *Command) writeTerminal(data []byte, eof bool) (int, bool, error) {
	if eof {
		veof, _, err := c.proc.TerminalEOF()
		if err != nil {
			return 0, false, errorf(ErrFinished, "command %s is ending: %v", c.id, err)
		}
		if veof == 0 { // _POSIX_VDISABLE: the program switched EOF off
			return 0, false, errorf(ErrConflict, "the terminal of command %s has no EOF character (VEOF is disabled)", c.id)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	size := len(data)
	if eof {
		size++ // VEOF; a second one is not counted
	}
	q := &c.stdin
	switch {
	case c.state.Finished():
		return 0, false, errorf(ErrFinished, "command %s has finished", c.id)
	case q.queued+size > c.m.cfg.StdinLimit:
		return 0, false, errorf(ErrStdinFull, "stdin queue holds %d of %d bytes; %d more do not fit", q.queued, c.m.cfg.StdinLimit, size)
	}
	if size > 0 {
		q.chunks = append(q.chunks, stdinChunk{data: append([]byte(nil), data...), eof: eof})
		q.queued += size
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return len(data), false, nil
}
