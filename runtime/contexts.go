package runtime

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// Code contexts (docs/contexts.md): one Python interpreter per context, its
// own process group and cgroup (procgroup.Start, as a command), running the
// embedded pykernel/kernel.py. The kernel reads requests on its fd 3 and
// writes events on its fd 4, each a frame of a 4-byte big-endian length and
// that many bytes of JSON; the code's fd 1 and 2 are pipes read here, so the
// output of subprocesses and C extensions arrives as stdout/stderr too.
//
// Honest state: an execution that passes its timeout gets SIGINT (a
// KeyboardInterrupt); if it has not returned ContextInterruptGrace later the
// interpreter is killed, the execution ends timed_out and the context is
// state_lost (with why) until POST …/restart. An interpreter that dies
// (os._exit, a signal, the OOM killer) makes it state_lost the same way.

// The errors of code contexts (besides ErrInvalid, ErrNotFound, ErrGone,
// ErrConflict, ErrShuttingDown and the spawn errors).
var (
	// ErrStateLost: the context's interpreter is gone (timeout kill, death);
	// nothing runs on it until POST …/restart. See StateLostError.
	ErrStateLost = errors.New("state lost")
	// ErrBusy: an execution is already running in the context.
	ErrBusy = errors.New("busy")
	// ErrTooManyContexts: the context limit is reached; nothing was started.
	ErrTooManyContexts = errors.New("too many contexts")
)

//go:embed pykernel/kernel.py
var kernelSource string

// Limits of code contexts.
const (
	// ContextMaxEvent bounds one event (a result or display bundle): the
	// kernel leaves out the largest entries of a bundle above it (named
	// in the event's "omitted" with their sizes; text/plain is kept, cut
	// when it alone is too large).
	ContextMaxEvent = 512 << 10
	// contextFrameMax is the largest frame read from a kernel: a larger one
	// is a broken kernel (it is killed, the context state_lost).
	contextFrameMax = 2 * ContextMaxEvent
	// contextExecutions is how many executions a context retains (their
	// events readable); an older n answers 410.
	contextExecutions = 32
	// contextReadyTimeout bounds an interpreter's start-up (its ready frame).
	contextReadyTimeout = 30 * time.Second
	// contextKillWait bounds the wait for a killed interpreter to be reaped
	// (delete, restart).
	contextKillWait = 5 * time.Second
	// contextFenceReads bounds the reads of a pipe before an event (32 KiB
	// each): what the code wrote before the event, at most 2 MiB.
	contextFenceReads = 64
	// contextWriteTimeout bounds the write of a request frame: an idle
	// kernel reads it at once; one that does not (its code forged a done
	// frame and still runs) is killed, the context state_lost.
	contextWriteTimeout = 5 * time.Second
)

// ContextInterruptGrace is how long a timed-out execution has to return
// after its SIGINT before the interpreter is killed: the kill grace
// (Config.KillGrace, 2 s by default), at least 100 ms.
func (m *Manager) contextInterruptGrace() time.Duration {
	return max(m.killGrace(), 100*time.Millisecond)
}

// Contexts is the table of code contexts of a Manager.
type Contexts struct {
	m   *Manager
	log *zap.Logger

	mu        sync.Mutex
	ctxs      map[string]*CodeContext
	order     []*CodeContext
	tombs     map[string]string // id → why it is gone ("deleted", "expired")
	tombOrder []string
	spare     *CodeContext // the spare interpreter (contexts_spare.go), nil when none
	refilling bool         // a spare is being started
}

// Contexts returns the Manager's code contexts (made at the first call).
func (m *Manager) Contexts() *Contexts {
	m.ctxOnce.Do(func() {
		m.ctxs = &Contexts{m: m, log: m.log.Named("contexts"), ctxs: map[string]*CodeContext{}, tombs: map[string]string{}}
		go m.ctxs.janitor()
	})
	return m.ctxs
}

// ContextRequest is a request to create a context.
type ContextRequest struct {
	ContextID string
	Language  string
	Cwd       string
	Envs      map[string]string
}

// CodeContext is one context: its interpreter (when alive) and executions.
type CodeContext struct {
	id    string
	cs    *Contexts
	log   *zap.Logger
	cwd   string
	envs  map[string]string
	sum   [32]byte
	place func() // its ClassContext place

	mu        sync.Mutex
	in        *interp // the live interpreter; nil when state_lost or deleted
	state     string
	lost      *wire.StateLost
	cur       *execution
	execs     map[int]*execution
	byClient  map[string]*execution
	execOrder []int
	nextN     int
	restarts  int
	python    string
	created   time.Time
	lastUsed  time.Time
	deleted   bool
	// started is closed once the first interpreter's start has ended
	// (startErr says how); restarting is non-nil while a restart starts a
	// fresh interpreter (concurrent restarts wait on it: they coalesce).
	// Starts run without mu held, so nobody else waits on a slow start.
	started    chan struct{}
	startErr   error
	restarting chan struct{}
}

// interp is one interpreter process of a context.
type interp struct {
	proc    *procgroup.Process
	req     *os.File      // our end of its fd 3
	ev      *os.File      // our end of its fd 4
	eof     [2]bool       // stdout, stderr at their end (under the context's mu)
	buf     [2][]byte     // their read buffers
	carry   [2][]byte     // an incomplete UTF-8 sequence at the end of the last read
	done    chan struct{} // closed once reaped and every reader has ended
	killWhy string        // set before a deliberate kill: the state_lost reason
	version string
	pipes   []string // its stdout and stderr pipes as /proc names them (killPipeHolders)
}

// execution is one execution of code in a context.
type execution struct {
	n        int
	clientID string
	code     string
	timeout  time.Duration
	log      *ctxLog
	status   string
	started  time.Time
	finished time.Time
	timedOut bool // its timeout passed (SIGINT sent)
	timer    *time.Timer
	done     chan struct{}
}

// checkRequest validates a create's language, context_id, envs and cwd; it
// answers the id in its canonical form ("" when the client gave none) and
// the working directory (the base dir when none was given).
func (cs *Contexts) checkRequest(r ContextRequest) (id, cwd string, err error) {
	if r.Language != "" && r.Language != "python" {
		return "", "", invalidf("language must be \"python\" (got %q)", r.Language)
	}
	if r.ContextID != "" {
		u, err := uuid.Parse(r.ContextID)
		if err != nil || len(r.ContextID) != 36 {
			return "", "", invalidf("context_id must be a UUID (got %q)", r.ContextID)
		}
		id = u.String()
	}
	for k, v := range r.Envs {
		if err := checkEnvName(k); err != nil {
			return "", "", err
		}
		if slices.Contains([]byte(v), 0) {
			return "", "", invalidf("an envs value contains a NUL byte")
		}
	}
	cwd = r.Cwd
	if cwd == "" {
		cwd = cs.m.cfg.BaseDir
	}
	if !filepath.IsAbs(cwd) {
		return "", "", invalidf("cwd must be an absolute path (got %q)", cwd)
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return "", "", invalidf("cwd %q is not an existing directory", cwd)
	}
	return id, cwd, nil
}

// Create makes a context and starts its interpreter. It answers the
// context's status and whether it was created (false: an idempotent re-post).
func (cs *Contexts) Create(r ContextRequest) (wire.Context, bool, error) {
	m := cs.m
	id, cwd, err := cs.checkRequest(r)
	if err != nil {
		return wire.Context{}, false, err
	}
	sum := envsDigest(r.Envs)
	cs.mu.Lock()
	cs.sweepLocked()
	select {
	case <-m.shutdownCh:
		cs.mu.Unlock()
		return wire.Context{}, false, errorf(ErrShuttingDown, "the runtime is shutting down")
	default:
	}
	if id != "" {
		if c, ok := cs.ctxs[id]; ok {
			cs.mu.Unlock()
			if c.cwd != cwd || c.sum != sum {
				return wire.Context{}, false, errorf(ErrConflict, "context_id %s is in use by a different request", id)
			}
			if err := c.waitStarted(); err != nil {
				return wire.Context{}, false, err
			}
			return c.Status(), false, nil
		}
		if why, ok := cs.tombs[id]; ok {
			cs.mu.Unlock()
			return wire.Context{}, false, &ContextGoneError{ID: id, Reason: why}
		}
	} else {
		id = uuid.NewString()
	}
	place, err := m.adm.admit(context.Background(), ClassContext, 0)
	if err != nil {
		cs.mu.Unlock()
		return wire.Context{}, false, err
	}
	if c := cs.takeSpareLocked(id, cwd, r.Envs, place); c != nil {
		cs.ctxs[id] = c
		cs.order = append(cs.order, c)
		cs.mu.Unlock()
		c.log.Info("context created from the spare interpreter")
		return c.Status(), true, nil
	}
	if m.cfg.ContextSpare {
		go cs.refill()
	}
	now := m.cfg.Clock.Now()
	c := &CodeContext{
		id: id, cs: cs, log: cs.log.With(zap.String("context_id", id)),
		cwd: cwd, envs: maps.Clone(r.Envs), sum: sum, place: place,
		state: wire.ContextReady, execs: map[int]*execution{}, byClient: map[string]*execution{},
		nextN: 1, created: now, lastUsed: now, started: make(chan struct{}),
	}
	cs.ctxs[id] = c
	cs.order = append(cs.order, c)
	cs.mu.Unlock()
	// The start holds no lock: a re-post, a Get of this id wait on
	// c.started; List and the sweep skip a context still starting.
	err = c.start()
	c.mu.Lock()
	c.startErr = err
	c.mu.Unlock()
	close(c.started)
	if err != nil {
		cs.mu.Lock()
		cs.removeLocked(c)
		cs.mu.Unlock()
		place()
		return wire.Context{}, false, err
	}
	return c.Status(), true, nil
}

// ContextGoneError is the error of a context id that was deleted or
// expired; it wraps ErrGone.
type ContextGoneError struct {
	ID, Reason string
}

func (e *ContextGoneError) Error() string {
	return fmt.Sprintf("context %s is gone (%s); create a new one", e.ID, e.Reason)
}

// Unwrap returns ErrGone.
func (e *ContextGoneError) Unwrap() error { return ErrGone }

// python is the interpreter to run: Config.Python, else python3 on the
// commands' PATH.
func (m *Manager) python() string {
	if m.cfg.Python != "" {
		return m.cfg.Python
	}
	return "python3"
}

// waitStarted waits for the first start of c to end: its error, if any.
func (c *CodeContext) waitStarted() error {
	if c.started == nil {
		return nil
	}
	<-c.started
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.startErr
}

// isStarting reports whether c's first start is still under way.
func (c *CodeContext) isStarting() bool {
	if c.started == nil {
		return false
	}
	select {
	case <-c.started:
		return false
	default:
		return true
	}
}

// start starts an interpreter, waits for its ready frame (without c.mu
// held: a slow start blocks nobody else) and installs it under c.mu.
func (c *CodeContext) start() error {
	m := c.cs.m
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return errorf(ErrResourceExhausted, "cannot make a pipe: %v", err)
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return errorf(ErrResourceExhausted, "cannot make a pipe: %v", err)
	}
	extra := map[string]string{
		"MPLBACKEND":            "Agg", // used only when the code imports matplotlib
		"PYTHONUNBUFFERED":      "1",
		"SANDBOX_CTX_MAX_EVENT": strconv.Itoa(ContextMaxEvent),
	}
	if m.cfg.ContextMemory > 0 {
		extra["SANDBOX_CTX_MEMORY"] = strconv.FormatInt(m.cfg.ContextMemory, 10)
	}
	maps.Copy(extra, c.envs)
	// Registered with the Manager's WaitGroup under its lock, as commands
	// are: Shutdown's Wait never races an Add.
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		reqR.Close()
		reqW.Close()
		evR.Close()
		evW.Close()
		return errorf(ErrShuttingDown, "the runtime is shutting down")
	}
	m.wg.Add(1)
	m.mu.Unlock()
	p, err := m.reaper.Start(procgroup.Spec{
		Argv:       []string{m.python(), "-u", "-c", kernelSource},
		Env:        buildEnv(m.cfg.Env, extra),
		Dir:        c.cwd,
		ExtraFiles: []*os.File{reqR, evW},
	})
	reqR.Close()
	evW.Close()
	if err != nil {
		reqW.Close()
		evR.Close()
		m.wg.Done()
		return spawnError(err)
	}
	in := &interp{proc: p, req: reqW, ev: evR, done: make(chan struct{}), pipes: pipeIDs(p.Stdout, p.Stderr)}
	br := bufio.NewReaderSize(evR, 64<<10)
	version, err := c.awaitReady(p, br, evR, reqW)
	if err != nil {
		m.wg.Done()
		return err
	}
	in.version = version
	c.mu.Lock()
	defer c.mu.Unlock()
	c.in = in
	c.python = in.version
	c.state = wire.ContextReady
	c.lost = nil
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); c.readPipe(in, 0, p.Stdout) }()
	go func() { defer wg.Done(); c.readPipe(in, 1, p.Stderr) }()
	go func() { defer wg.Done(); c.readEvents(in, br) }()
	go c.supervise(in, &wg)
	c.log.Info("context interpreter started", zap.Int("pid", p.Pid), zap.String("python", in.version))
	if c.deleted { // deleted while it started (the start holds no lock)
		in.killWhy = "the context was deleted"
		p.Signal(syscall.SIGKILL)
		return &ContextGoneError{ID: c.id, Reason: "deleted"}
	}
	return nil
}

// awaitReady reads the interpreter's first frame, bounded: a python3 that
// is not Python 3 (or hangs) must not hold the create forever. It answers
// the interpreter's version; on failure the process is killed and reaped
// and its pipes closed.
func (c *CodeContext) awaitReady(p *procgroup.Process, br *bufio.Reader, evR, reqW *os.File) (string, error) {
	m := c.cs.m
	type ready struct {
		ev  map[string]any
		err error
	}
	rc := make(chan ready, 1)
	go func() {
		b, err := readFrame(br)
		var ev map[string]any
		if err == nil {
			err = json.Unmarshal(b, &ev)
		}
		rc <- ready{ev, err}
	}()
	var rd ready
	select {
	case rd = <-rc:
	case <-time.After(contextReadyTimeout):
		rd.err = fmt.Errorf("no ready frame within %s", contextReadyTimeout)
	}
	if rd.err != nil || rd.ev["type"] != "ready" {
		p.Signal(syscall.SIGKILL)
		evR.Close() // ends the reader above
		reqW.Close()
		p.Stdout.Close()
		p.Stderr.Close()
		<-p.Done()
		p.Release()
		why := fmt.Sprintf("%v", rd.err)
		if rd.err == nil {
			why = fmt.Sprintf("unexpected first frame %v", rd.ev)
		}
		st := p.Exit()
		return "", errorf(ErrSpawnFailed, "the interpreter %s did not start (%s; exit code %d)", m.python(), why, st.Code)
	}
	v, _ := rd.ev["python"].(string)
	return v, nil
}

// readFrame reads one frame: a 4-byte big-endian length and the bytes.
func readFrame(r io.Reader) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > contextFrameMax {
		return nil, fmt.Errorf("a frame of %d bytes (limit %d)", n, contextFrameMax)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// readPipe reads the code's stdout (i 0) or stderr (1) into the running
// execution. Every read of the pipe happens with the context's mu held
// (drainLocked, from the poller's callback or from fenceLocked), so that
// what the pipe held when an event arrived is read before the event is
// added. Bytes read while no execution runs (a background process of an
// earlier one) are dropped.
func (c *CodeContext) readPipe(in *interp, i int, f *os.File) {
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		c.mu.Lock()
		in.eof[i] = true
		c.mu.Unlock()
		return
	}
	for {
		var done bool
		err := rc.Read(func(fd uintptr) bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			var again bool
			done, again = c.drainLocked(in, i, fd, 4)
			return !again
		})
		if done || err != nil {
			c.mu.Lock()
			in.eof[i] = true
			c.mu.Unlock()
			return
		}
	}
}

// drainLocked reads the pipe (non-blocking) at most reads times: done at
// its end (EOF or an error), again when it is empty for now.
func (c *CodeContext) drainLocked(in *interp, i int, fd uintptr, reads int) (done, again bool) {
	if in.eof[i] {
		return true, false
	}
	typ := [2]string{wire.CtxEventStdout, wire.CtxEventStderr}[i]
	if in.buf[i] == nil {
		in.buf[i] = make([]byte, 32<<10)
	}
	buf := in.buf[i]
	for ; reads > 0; reads-- {
		carry := len(in.carry[i])
		copy(buf, in.carry[i])
		n, err := syscall.Read(int(fd), buf[carry:])
		switch {
		case err == syscall.EINTR:
			reads++
			continue
		case err == syscall.EAGAIN:
			return false, true
		case err != nil || n == 0:
			in.eof[i] = true
			return true, false
		}
		data := buf[:carry+n]
		cut := utf8Cut(data)
		if c.cur != nil && c.in == in && cut > 0 {
			c.cur.log.add(wire.ContextEvent{Type: typ, Text: string(data[:cut])})
		}
		if c.cur == nil { // output between executions is dropped, its tail too
			cut = len(data)
		}
		in.carry[i] = append(in.carry[i][:0], data[cut:]...)
	}
	return false, false
}

// utf8Cut is the length of data without an incomplete UTF-8 sequence at its
// end (at most 3 bytes are held back; invalid bytes pass as they are).
func utf8Cut(data []byte) int {
	for k := 1; k <= 3 && k <= len(data); k++ {
		b := data[len(data)-k]
		if b < 0x80 {
			return len(data)
		}
		if b >= 0xC0 { // a start byte: complete?
			if utf8.FullRune(data[len(data)-k:]) {
				return len(data)
			}
			return len(data) - k
		}
	}
	return len(data)
}

// fenceLocked reads what the pipes hold now into the execution, so that
// output the code wrote before an event comes before it (the kernel flushes
// before each event). It reads at most contextFenceReads times a pipe: a
// background process that writes without end cannot hold the event.
func (c *CodeContext) fenceLocked(in *interp) {
	for i, f := range []*os.File{in.proc.Stdout, in.proc.Stderr} {
		rc, err := f.SyscallConn()
		if err != nil {
			continue
		}
		rc.Control(func(fd uintptr) { c.drainLocked(in, i, fd, contextFenceReads) })
	}
}

// kernelEvent is a frame of the kernel.
type kernelEvent struct {
	Type      string                     `json:"type"`
	Data      map[string]json.RawMessage `json:"data"`
	Omitted   map[string]int             `json:"omitted"`
	Name      string                     `json:"name"`
	Value     string                     `json:"value"`
	Traceback []string                   `json:"traceback"`
	Status    string                     `json:"status"`
	Text      string                     `json:"text"`
}

// readEvents reads the kernel's frames until it ends.
func (c *CodeContext) readEvents(in *interp, br *bufio.Reader) {
	defer in.ev.Close()
	for {
		b, err := readFrame(br)
		if err != nil {
			if err != io.EOF && err != io.ErrUnexpectedEOF && !isClosed(err) && !errors.Is(err, os.ErrDeadlineExceeded) {
				c.mu.Lock()
				if in.killWhy == "" {
					in.killWhy = "the interpreter broke its protocol: " + err.Error()
				}
				c.mu.Unlock()
				in.proc.Signal(syscall.SIGKILL)
			}
			return
		}
		var ev kernelEvent
		bad := json.Unmarshal(b, &ev)
		c.mu.Lock()
		c.fenceLocked(in)
		e := c.cur
		if bad != nil {
			// Never dropped silently: the running execution says so (the
			// kernel itself never sends one; the code can, on fd 4).
			c.log.Warn("an undecodable frame from the interpreter", zap.Int("bytes", len(b)), zap.Error(bad))
			if e != nil && c.in == in {
				e.log.add(wire.ContextEvent{Type: wire.CtxEventStderr, Text: fmt.Sprintf("[sandbox-runtime: an undecodable frame of %d bytes from the interpreter was left out: %v]\n", len(b), bad)})
			}
			c.mu.Unlock()
			continue
		}
		if e == nil || c.in != in {
			c.mu.Unlock()
			continue
		}
		switch ev.Type {
		case "result", "display":
			e.log.add(wire.ContextEvent{Type: ev.Type, Data: ev.Data, Omitted: ev.Omitted})
		case "error":
			e.log.add(wire.ContextEvent{Type: wire.CtxEventError, Name: ev.Name, Value: ev.Value, Traceback: ev.Traceback})
		case "stderr_note":
			e.log.add(wire.ContextEvent{Type: wire.CtxEventStderr, Text: ev.Text + "\n"})
		case "done":
			status := ev.Status
			reason := ""
			if e.timedOut {
				status, reason = wire.ExecTimedOut, "the timeout passed; the code returned after SIGINT, the state is kept"
			}
			c.flushCarryLocked(in, e)
			c.finishLocked(e, status, reason)
		}
		c.mu.Unlock()
	}
}

func isClosed(err error) bool { return errors.Is(err, os.ErrClosed) }

// killAll kills everything of the interpreter: SIGKILL to its group and
// cgroup.kill in cgroup mode (procgroup's Terminate with its deadline
// passed), and every process still holding its output pipes (the best
// there is without a cgroup for what left the group).
func (in *interp) killAll() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	in.proc.Terminate(ctx, 0)
	killPipeHolders(in.pipes)
}

// flushCarryLocked ends e's output: an incomplete UTF-8 sequence held back
// at the end of a pipe's last read is e's (as U+FFFD), never the next
// execution's.
func (c *CodeContext) flushCarryLocked(in *interp, e *execution) {
	for i, typ := range [2]string{wire.CtxEventStdout, wire.CtxEventStderr} {
		if len(in.carry[i]) > 0 {
			e.log.add(wire.ContextEvent{Type: typ, Text: strings.ToValidUTF8(string(in.carry[i]), "\uFFFD")})
			in.carry[i] = in.carry[i][:0]
		}
	}
}

// finishLocked ends execution e with status.
func (c *CodeContext) finishLocked(e *execution, status, reason string) {
	if e.status != wire.ExecRunning {
		return
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	e.status = status
	e.finished = c.cs.m.cfg.Clock.Now()
	d := e.finished.Sub(e.started).Seconds()
	e.log.add(wire.ContextEvent{Type: wire.CtxEventEnd, Status: status, DurationSeconds: &d, Reason: reason})
	e.log.close()
	close(e.done)
	if c.cur == e {
		c.cur = nil
	}
	if c.state == wire.ContextBusy {
		c.state = wire.ContextReady
	}
	c.lastUsed = e.finished
}

// supervise waits for the interpreter's end: then the context is
// state_lost (unless it was deleted or restarted on purpose), and the
// running execution ends.
func (c *CodeContext) supervise(in *interp, readers *sync.WaitGroup) {
	m := c.cs.m
	defer m.wg.Done()
	select {
	case <-in.proc.Done():
	case <-m.shutdownCh:
		ctx, stop := m.killContext()
		in.proc.Terminate(ctx, m.killGrace())
		stop()
		c.mu.Lock()
		if in.killWhy == "" {
			in.killWhy = "the runtime shut down"
		}
		c.mu.Unlock()
		<-in.proc.Done()
	}
	st := in.proc.Exit()
	// What the code started dies with the interpreter, so that the pipes
	// reach EOF: the group and, in cgroup mode, the whole cgroup
	// (cgroup.kill, which reaches what left the group); without a cgroup
	// every process still holding the output pipes (contexts_escape_linux.go).
	in.killAll()
	in.req.Close()
	// The pipes are drained for one pipe grace after the leader's end, as
	// commands do (supervise.go rule 4): something that holds them still
	// cannot hold the end of the execution.
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	pipeGrace := time.NewTimer(max(m.killGrace(), m.pipeFloor))
	select {
	case <-drained:
	case <-pipeGrace.C:
		now := time.Now()
		for _, f := range []*os.File{in.proc.Stdout, in.proc.Stderr, in.ev} {
			f.SetReadDeadline(now)
		}
		<-drained
	}
	pipeGrace.Stop()
	in.proc.Release()
	c.mu.Lock()
	why := in.killWhy
	if why == "" {
		why = "the interpreter ended: " + describeExit(st)
	}
	if c.in == in {
		c.in = nil
		c.lost = &wire.StateLost{Reason: why, OOMKilled: st.OOMKilled, At: m.cfg.Clock.Now()}
		c.state = wire.ContextStateLost
		if e := c.cur; e != nil {
			status := wire.ExecStateLost
			if e.timedOut {
				status = wire.ExecTimedOut
			}
			c.flushCarryLocked(in, e)
			c.finishLocked(e, status, why)
		}
		c.state = wire.ContextStateLost
		c.log.Info("context state lost", zap.String("reason", why), zap.Bool("oom_killed", st.OOMKilled))
	}
	close(in.done)
	c.mu.Unlock()
}

func describeExit(st procgroup.ExitStatus) string {
	switch {
	case st.OOMKilled:
		return fmt.Sprintf("killed by the OOM killer (signal %d)", st.Signal)
	case st.Signal != 0:
		return fmt.Sprintf("killed by signal %d (%s)", int(st.Signal), st.Signal)
	default:
		return fmt.Sprintf("exited with code %d", st.Code)
	}
}

// Get returns the context with id. Errors: ErrNotFound, *ContextGoneError.
func (cs *Contexts) Get(id string) (*CodeContext, error) {
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 {
		return nil, errorf(ErrNotFound, "no context %q", id)
	}
	id = u.String()
	cs.mu.Lock()
	cs.sweepLocked()
	c, ok := cs.ctxs[id]
	why, gone := cs.tombs[id]
	cs.mu.Unlock()
	switch {
	case ok:
		if err := c.waitStarted(); err != nil {
			return nil, errorf(ErrNotFound, "no context %s (its create failed)", id)
		}
		return c, nil
	case gone:
		return nil, &ContextGoneError{ID: id, Reason: why}
	}
	return nil, errorf(ErrNotFound, "no context %s", id)
}

// List returns every context's status, oldest first.
func (cs *Contexts) List() []wire.Context {
	cs.mu.Lock()
	cs.sweepLocked()
	all := slices.Clone(cs.order)
	cs.mu.Unlock()
	out := make([]wire.Context, 0, len(all))
	for _, c := range all {
		if c.isStarting() { // not created until its create answers
			continue
		}
		out = append(out, c.Status())
	}
	return out
}

// Count is how many contexts are held (the ClassContext places).
func (cs *Contexts) Count() int { return cs.m.adm.held(ClassContext) }

// Status is the context's status.
func (c *CodeContext) Status() wire.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := wire.Context{
		ContextID: c.id, Language: "python", State: c.state, Python: c.python, Cwd: c.cwd,
		Executions: c.nextN - 1, Restarts: c.restarts, CreatedAt: c.created, LastUsedAt: c.lastUsed,
	}
	if c.lost != nil {
		l := *c.lost
		st.StateLost = &l
	}
	if c.in != nil {
		st.Pid = c.in.proc.Pid
	}
	if c.cur == nil {
		exp := c.lastUsed.Add(c.cs.m.cfg.ContextIdle)
		st.ExpiresAt = &exp
	}
	return st
}

// ID is the context's id.
func (c *CodeContext) ID() string { return c.id }

// ExecuteRequest is a request to run code in a context.
type ExecuteRequest struct {
	Code        string
	Timeout     *float64
	ExecutionID string
}

// executionTimeout is an execution's timeout: the command rules (the
// default when none is given, capped by the maximum).
func executionTimeout(cfg Config, t *float64) (time.Duration, error) {
	if t == nil {
		return cfg.DefaultTimeout, nil
	}
	if math.IsNaN(*t) || *t <= 0 {
		return 0, invalidf("timeout must be > 0 seconds")
	}
	timeout := min(time.Duration(*t*float64(time.Second)), cfg.MaxTimeout)
	if timeout <= 0 {
		return 0, invalidf("timeout must be > 0 seconds")
	}
	return timeout, nil
}

// retainLocked numbers e as the context's next execution and keeps it,
// forgetting the oldest beyond contextExecutions (their ids answer 410).
func (c *CodeContext) retainLocked(e *execution) {
	c.nextN++
	c.execs[e.n] = e
	c.execOrder = append(c.execOrder, e.n)
	if e.clientID != "" {
		c.byClient[e.clientID] = e
	}
	for len(c.execOrder) > contextExecutions {
		old := c.execs[c.execOrder[0]]
		delete(c.execs, old.n)
		if old.clientID != "" {
			delete(c.byClient, old.clientID)
		}
		c.execOrder = c.execOrder[1:]
	}
}

// Execute starts code in the context. It answers the execution and whether
// it was started (false: a retried request with the same ExecutionID, which
// answers the execution it started). One execution runs at a time: another
// one gets ErrBusy (409 busy); a state_lost context gets ErrStateLost (409
// state_lost) until Restart.
func (c *CodeContext) Execute(r ExecuteRequest) (*Execution, bool, error) {
	m := c.cs.m
	timeout, err := executionTimeout(m.cfg, r.Timeout)
	if err != nil {
		return nil, false, err
	}
	if len(r.ExecutionID) > 128 {
		return nil, false, invalidf("execution_id must be at most 128 bytes")
	}
	c.mu.Lock()
	locked := true
	defer func() {
		if locked {
			c.mu.Unlock()
		}
	}()
	if r.ExecutionID != "" {
		if e, ok := c.byClient[r.ExecutionID]; ok {
			if e.code != r.Code {
				return nil, false, errorf(ErrConflict, "execution_id %q is in use by different code", r.ExecutionID)
			}
			return &Execution{c: c, e: e}, false, nil
		}
	}
	switch {
	case c.deleted:
		return nil, false, &ContextGoneError{ID: c.id, Reason: "deleted"}
	case c.state == wire.ContextStateLost || c.in == nil:
		reason := "its interpreter is restarting"
		if c.lost != nil {
			reason = c.lost.Reason
		}
		return nil, false, &StateLostError{ID: c.id, Reason: reason}
	case c.cur != nil:
		return nil, false, errorf(ErrBusy, "context %s is running execution %d; one runs at a time (interrupt it, or wait for its end)", c.id, c.cur.n)
	}
	body, _ := json.Marshal(map[string]string{"code": r.Code})
	if len(body) > contextFrameMax*4 {
		return nil, false, invalidf("code too large")
	}
	now := m.cfg.Clock.Now()
	e := &execution{
		n: c.nextN, clientID: r.ExecutionID, code: r.Code, timeout: timeout,
		log: newCtxLog(m.cfg.OutputLimit), status: wire.ExecRunning, started: now, done: make(chan struct{}),
	}
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	frame = append(frame, body...)
	c.retainLocked(e)
	c.cur = e
	c.state = wire.ContextBusy
	c.lastUsed = now
	in := c.in
	e.timer = time.AfterFunc(timeout, func() { c.timeout(in, e) })
	// The frame is written without c.mu held (the execution is already
	// the context's one, so no other write races it), bounded: an idle
	// kernel reads it at once; one whose code still runs (it forged a done
	// frame) does not, and a frame half written cannot be taken back, so
	// the interpreter is killed and the execution ends state_lost.
	c.mu.Unlock()
	locked = false
	in.req.SetWriteDeadline(time.Now().Add(contextWriteTimeout))
	_, err = in.req.Write(frame)
	in.req.SetWriteDeadline(time.Time{})
	if err != nil {
		c.mu.Lock()
		if in.killWhy == "" {
			in.killWhy = fmt.Sprintf("the interpreter did not take the code of execution %d (%v): it was killed", e.n, err)
		}
		c.mu.Unlock()
		c.cs.log.Warn("context interpreter does not read its requests", zap.String("context_id", c.id), zap.Error(err))
		in.proc.Signal(syscall.SIGKILL)
	}
	return &Execution{c: c, e: e}, true, nil
}

// timeout interrupts e, and kills the interpreter if e has not returned
// after the grace.
func (c *CodeContext) timeout(in *interp, e *execution) {
	c.mu.Lock()
	if e.status != wire.ExecRunning || c.in != in {
		c.mu.Unlock()
		return
	}
	e.timedOut = true
	c.mu.Unlock()
	in.proc.Signal(syscall.SIGINT)
	grace := c.cs.m.contextInterruptGrace()
	select {
	case <-e.done:
		return
	case <-time.After(grace):
	}
	c.mu.Lock()
	if e.status == wire.ExecRunning && c.in == in && in.killWhy == "" {
		in.killWhy = fmt.Sprintf("execution %d passed its timeout of %s and did not return within %s of SIGINT: the interpreter was killed", e.n, e.timeout, grace)
	}
	c.mu.Unlock()
	in.proc.Signal(syscall.SIGKILL)
}

// Interrupt sends SIGINT to the running execution (a KeyboardInterrupt; the
// state is kept). ErrConflict when none runs.
func (c *CodeContext) Interrupt() (int, error) {
	c.mu.Lock()
	e, in := c.cur, c.in
	c.mu.Unlock()
	if e == nil || in == nil {
		return 0, errorf(ErrConflict, "context %s has no running execution", c.id)
	}
	in.proc.Signal(syscall.SIGINT)
	return e.n, nil
}

// Restart kills the interpreter (if alive; its running execution ends
// state_lost) and starts a fresh one with empty state.
func (c *CodeContext) Restart() (wire.Context, error) {
	if err := c.kill("restarted by the client"); err != nil {
		return wire.Context{}, err
	}
	c.mu.Lock()
	if c.deleted {
		c.mu.Unlock()
		return wire.Context{}, &ContextGoneError{ID: c.id, Reason: "deleted"}
	}
	select {
	case <-c.cs.m.shutdownCh:
		c.mu.Unlock()
		return wire.Context{}, errorf(ErrShuttingDown, "the runtime is shutting down")
	default:
	}
	if c.in != nil { // a concurrent restart won
		c.mu.Unlock()
		return c.Status(), nil
	}
	if ch := c.restarting; ch != nil { // one is starting: they coalesce
		c.mu.Unlock()
		<-ch
		c.mu.Lock()
		alive := c.in != nil
		c.mu.Unlock()
		if !alive {
			return wire.Context{}, errorf(ErrSpawnFailed, "context %s: the concurrent restart did not start an interpreter", c.id)
		}
		return c.Status(), nil
	}
	ch := make(chan struct{})
	c.restarting = ch
	c.mu.Unlock()
	err := c.start() // without c.mu: a slow start blocks nobody else
	c.mu.Lock()
	c.restarting = nil
	if err == nil {
		c.restarts++
		c.lastUsed = c.cs.m.cfg.Clock.Now()
	}
	c.mu.Unlock()
	close(ch)
	if err != nil {
		return wire.Context{}, err
	}
	return c.Status(), nil
}

// kill kills the live interpreter, if any, and waits until it is reaped and
// its readers are done.
func (c *CodeContext) kill(why string) error {
	c.mu.Lock()
	in := c.in
	if in != nil && in.killWhy == "" {
		in.killWhy = why
	}
	c.mu.Unlock()
	if in == nil {
		return nil
	}
	in.proc.Signal(syscall.SIGKILL)
	select {
	case <-in.done:
		return nil
	case <-time.After(contextKillWait):
		return errorf(ErrResourceExhausted, "context %s: the interpreter was not reaped within %s of SIGKILL", c.id, contextKillWait)
	}
}

// Delete kills the context's interpreter and forgets it: its id answers 410
// from now on.
func (cs *Contexts) Delete(id string) error {
	c, err := cs.Get(id)
	if err != nil {
		return err
	}
	return cs.drop(c, "deleted")
}

func (cs *Contexts) drop(c *CodeContext, why string) error {
	c.mu.Lock()
	if c.deleted {
		c.mu.Unlock()
		return nil
	}
	c.deleted = true
	c.mu.Unlock()
	err := c.kill("the context was " + why)
	cs.mu.Lock()
	cs.removeLocked(c)
	cs.tombs[c.id] = why
	cs.tombOrder = append(cs.tombOrder, c.id)
	for len(cs.tombOrder) > cs.m.cfg.Tombstones {
		delete(cs.tombs, cs.tombOrder[0])
		cs.tombOrder = cs.tombOrder[1:]
	}
	cs.mu.Unlock()
	c.place()
	c.log.Info("context dropped", zap.String("reason", why))
	return err
}

func (cs *Contexts) removeLocked(c *CodeContext) {
	delete(cs.ctxs, c.id)
	if i := slices.Index(cs.order, c); i >= 0 {
		cs.order = slices.Delete(cs.order, i, i+1)
	}
}

// sweepLocked drops the contexts idle for Config.ContextIdle (a context
// with a running execution is never idle). The kill runs apart: a lookup
// never waits for it, and sees the id gone at once.
func (cs *Contexts) sweepLocked() {
	now := cs.m.cfg.Clock.Now()
	for _, c := range slices.Clone(cs.order) {
		// Never wait on a context's lock here (every lookup sweeps): one
		// that is held is in use, not idle.
		if c.isStarting() || !c.mu.TryLock() {
			continue
		}
		idle := c.cur == nil && !c.deleted && !now.Before(c.lastUsed.Add(cs.m.cfg.ContextIdle))
		if idle {
			c.deleted = true
		}
		c.mu.Unlock()
		if !idle {
			continue
		}
		cs.removeLocked(c)
		cs.tombs[c.id] = "expired"
		cs.tombOrder = append(cs.tombOrder, c.id)
		go func() {
			c.kill("the context expired after being idle for " + cs.m.cfg.ContextIdle.String())
			c.place()
		}()
	}
}

func (cs *Contexts) janitor() {
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			cs.mu.Lock()
			cs.sweepLocked()
			cs.mu.Unlock()
		case <-cs.m.stopJanitor:
			return
		}
	}
}

// Execution is a handle on one execution.
type Execution struct {
	c *CodeContext
	e *execution
}

// Execution returns the context's execution n. ErrNotFound for one never
// started, ErrGone for one no longer retained.
func (c *CodeContext) Execution(n int) (*Execution, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.execs[n]; ok {
		return &Execution{c: c, e: e}, nil
	}
	if n >= 1 && n < c.nextN {
		return nil, errorf(ErrGone, "execution %d of context %s is gone (a context keeps its last %d)", n, c.id, contextExecutions)
	}
	return nil, errorf(ErrNotFound, "no execution %d in context %s", n, c.id)
}

// Status is the execution's status.
func (x *Execution) Status() wire.Execution {
	c, e := x.c, x.e
	c.mu.Lock()
	defer c.mu.Unlock()
	st := wire.Execution{ContextID: c.id, N: e.n, ExecutionID: e.clientID, Status: e.status, StartedAt: e.started,
		Events: e.log.end(), Truncated: e.log.truncated()}
	if e.status != wire.ExecRunning {
		f := e.finished
		st.FinishedAt = &f
		st.DurationSeconds = f.Sub(e.started).Seconds()
	} else {
		st.DurationSeconds = c.cs.m.cfg.Clock.Now().Sub(e.started).Seconds()
	}
	return st
}

// N is the execution's number in its context.
func (x *Execution) N() int { return x.e.n }

// Read returns the events from cursor on (a gap first when some are gone),
// the next cursor, whether the execution's events are over, and a channel
// closed at the next event.
func (x *Execution) Read(cursor int64) ([]wire.ContextEvent, int64, bool, <-chan struct{}) {
	return x.e.log.read(cursor)
}

// CheckCursor refuses a cursor past the last event.
func (x *Execution) CheckCursor(cursor int64) error {
	if end := x.e.log.end(); cursor > end {
		return invalidf("cursor %d is past the execution's last event (%d events so far)", cursor, end)
	}
	return nil
}

// Done is closed when the execution has ended.
func (x *Execution) Done() <-chan struct{} { return x.e.done }

// StateLostError is the error of an execution on a context whose
// interpreter is gone; it wraps ErrStateLost.
type StateLostError struct{ ID, Reason string }

func (e *StateLostError) Error() string {
	return fmt.Sprintf("context %s lost its state (%s); POST /v1/contexts/%s/restart starts a fresh interpreter", e.ID, e.Reason, e.ID)
}

// Unwrap returns ErrStateLost.
func (e *StateLostError) Unwrap() error { return ErrStateLost }

// Executions lists the statuses of the retained executions, oldest first.
func (c *CodeContext) Executions() []wire.Execution {
	c.mu.Lock()
	xs := make([]*Execution, 0, len(c.execOrder))
	for _, n := range c.execOrder {
		xs = append(xs, &Execution{c: c, e: c.execs[n]})
	}
	c.mu.Unlock()
	out := make([]wire.Execution, 0, len(xs))
	for _, x := range xs {
		out = append(out, x.Status())
	}
	return out
}
