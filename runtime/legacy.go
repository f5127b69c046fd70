package runtime

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
)

// ExecResult is the outcome of a legacy one-shot execution (protocol.md §5).
// It holds one of the Manager's execution slots until Release is called.
type ExecResult struct {
	Stdout, Stderr               Capture // at most Config.LegacyOutputLimit each
	StdoutDropped, StderrDropped int64   // bytes past the cap, read and discarded
	ExitCode                     int     // exit code, or -N for a signal death
	TimedOut                     bool    // the timeout ended it (output is then meaningless)
	Terminated                   bool    // runtime shutdown ended it
	Pid                          int     // the leader's pid (for the caller's log line)

	release func()
}

// Release gives the execution slot back. Call it once the output is no
// longer needed (the answer is written or abandoned); it is idempotent and a
// zero ExecResult has nothing to release.
func (r *ExecResult) Release() {
	if r.release != nil {
		r.release()
		r.release = nil
	}
}

// Capture is the kept head of one output stream. The bytes are stored in
// the chunks they were read into (at most captureChunkMax each), never
// copied into one slice: what an execution costs is its output, once. The
// full-size chunks of an execution's capture come from pumpBufs and go
// back there on Release, so that back-to-back executions reuse the same
// memory instead of leaving it to the garbage collector.
type Capture struct {
	chunks [][]byte
	size   int
	pooled bool // the full-size chunks came from pumpBufs
}

// recycle gives the full-size chunks back to pumpBufs.
func (c Capture) recycle() {
	if !c.pooled {
		return
	}
	for _, ch := range c.chunks {
		if cap(ch) == pumpBufSize {
			b := ch[:pumpBufSize]
			pumpBufs.Put(&b)
		}
	}
}

// CaptureOf returns a Capture of the given chunks, which it keeps (not
// copied); empty ones are skipped.
func CaptureOf(chunks ...[]byte) Capture {
	var c Capture
	for _, ch := range chunks {
		if len(ch) > 0 {
			c.chunks = append(c.chunks, ch)
			c.size += len(ch)
		}
	}
	return c
}

// Chunks returns the bytes in order; the caller must not modify them.
func (c *Capture) Chunks() [][]byte { return c.chunks }

// Len is the number of bytes kept.
func (c *Capture) Len() int { return c.size }

// Bytes returns a copy of the bytes kept, in one slice.
func (c *Capture) Bytes() []byte {
	out := make([]byte, 0, c.size)
	for _, ch := range c.chunks {
		out = append(out, ch...)
	}
	return out
}

// captureChunkMin and captureChunkMax bound the chunks of a Capture: the
// first is small (most commands print little), each next one doubles, up
// to the pipe's capacity.
const (
	captureChunkMin = 4 << 10
	captureChunkMax = pumpBufSize
)

// Execute runs argv once in the base dir with stdin /dev/null, waits for the
// process and for EOF on both pipes, and returns its capped output. timeout
// is clamped to MaxTimeout (<= 0 means MaxTimeout). It is not a managed
// handle and does not count against the limits of managed commands, but it
// shares the process group, reaping and shutdown machinery.
//
// Execute is AdmitExecution then ExecuteIn: at most Config.MaxExecutions
// executions are in flight at once (ClassExecution, admission.go), from
// the admission until the caller releases the result; a call beyond that
// waits for a place, without a timeout, until ctx is done (then ctx.Err()
// is returned and nothing ran) or shutdown begins. Once the process has
// started, ctx no longer matters: a disconnecting client does not end it.
// On success the caller must call ExecResult.Release. Errors: ctx.Err(),
// ErrShuttingDown, ErrInvalid (empty argv), or an error wrapping
// ErrSpawnFailed or ErrResourceExhausted (as Create's, spawnError) that
// StartFailureOf explains.
func (m *Manager) Execute(ctx context.Context, argv []string, timeout time.Duration) (ExecResult, error) {
	if len(argv) == 0 {
		return ExecResult{}, invalidf("argv must not be empty")
	}
	slot, err := m.AdmitExecution(ctx)
	if err != nil {
		return ExecResult{}, err
	}
	return m.ExecuteIn(slot, argv, timeout)
}

// ExecuteIn is Execute in the place slot holds, which it takes over: the
// place is given back on an error, else by the result's Release. A used or
// released slot is ErrInvalid.
func (m *Manager) ExecuteIn(slot *ExecSlot, argv []string, timeout time.Duration) (ExecResult, error) {
	if slot == nil || slot.release == nil {
		return ExecResult{}, invalidf("the execution slot is released or used")
	}
	giveBack := slot.release
	slot.release = nil
	if len(argv) == 0 {
		giveBack()
		return ExecResult{}, invalidf("argv must not be empty")
	}
	if timeout <= 0 || timeout > m.cfg.MaxTimeout {
		timeout = m.cfg.MaxTimeout
	}
	res, err := m.execute(argv, timeout)
	if err != nil {
		giveBack()
		return ExecResult{}, err
	}
	var once sync.Once
	out, errOut := res.Stdout, res.Stderr
	res.release = func() {
		once.Do(func() {
			out.recycle()
			errOut.recycle()
			giveBack()
		})
	}
	return res, nil
}

// execute is Execute once a slot is held.
func (m *Manager) execute(argv []string, timeout time.Duration) (ExecResult, error) {
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return ExecResult{}, errorf(ErrShuttingDown, "the runtime is shutting down")
	}
	m.wg.Add(1)
	m.mu.Unlock()
	defer m.wg.Done()
	m.obs.LegacyExecuted()

	p, err := m.reaper.Start(procgroup.Spec{Argv: argv, Env: m.cfg.Env, Dir: m.cfg.BaseDir})
	if err != nil {
		m.obs.SpawnFailed(SpawnClassOf(err))
		return ExecResult{}, spawnError(err)
	}
	log := m.log.With(zap.String("argv0", argv[0]), zap.Int("pid", p.Pid))
	log.Debug("legacy execution started")

	limit := m.cfg.LegacyOutputLimit
	out, errOut := cappedCapture{limit: limit}, cappedCapture{limit: limit}
	var pumps pumpSet
	pumps.add(2)
	go func() { defer pumps.finished(); out.drain(p.Stdout) }()
	go func() { defer pumps.finished(); errOut.drain(p.Stderr) }()

	// The request goroutine is the owner; the rules are the supervisor's
	// (supervise.go), with subprocess.run's two: the command runs until
	// both pipes are at EOF, and a timeout kills at once.
	var why cause
	endCh := make(chan struct{})
	s := supervision{
		m: m, p: p, timeout: timeout, pumps: &pumps, files: []*os.File{p.Stdout, p.Stderr},
		untilEOF: true, killAtOnce: causes(causeTimeout),
		endCh: endCh,
		requestEnd: func(c cause) {
			if why == causeNone {
				why = c
				close(endCh)
			}
		},
	}
	res := s.run()
	p.Stdout.Close()
	p.Stderr.Close()
	if res.terminated != nil {
		<-res.terminated
	}
	exit := p.Exit()
	p.Release()
	r := ExecResult{
		Stdout: out.Capture, Stderr: errOut.Capture,
		StdoutDropped: out.dropped, StderrDropped: errOut.dropped,
		ExitCode:   exit.Code,
		TimedOut:   why == causeTimeout,
		Terminated: why == causeShutdown,
		Pid:        p.Pid,
	}
	// Debug only: the transport's request line carries the outcome (legacy:
	// httpx.NoteCommand), so an execution has one info line.
	if ce := log.Check(zap.DebugLevel, "legacy execution finished"); ce != nil {
		ce.Write(zap.Int("exit_code", exit.Code), zap.Bool("timed_out", r.TimedOut), zap.Bool("terminated", r.Terminated))
	}
	return r, nil
}

// cappedCapture keeps the first limit bytes of a stream and counts the rest.
// It reads straight into the chunks it keeps; past the limit it reads into a
// pooled scratch buffer and drops.
type cappedCapture struct {
	Capture
	limit   int
	dropped int64
}

// When the supervisor ends collection (f's read deadline passes), it takes
// what f already holds, at most maxFinalDrain bytes, and returns.
func (b *cappedCapture) drain(f *os.File) {
	b.pooled = true
	var scratch *[]byte
	defer func() {
		if scratch != nil {
			pumpBufs.Put(scratch)
		}
	}()
	final := -1    // bytes of the final drain, once the deadline passed
	var cur []byte // the last chunk, with free capacity
	next := captureChunkMin
	for {
		var buf []byte
		room := b.limit - b.size
		switch {
		case room > 0 && len(cur) < cap(cur):
			buf = cur[len(cur):cap(cur)]
		case room > 0:
			size := min(next, room)
			next = min(next*2, captureChunkMax)
			if size == pumpBufSize {
				cur = (*pumpBufs.Get().(*[]byte))[:0]
			} else {
				cur = make([]byte, 0, size)
			}
			b.chunks = append(b.chunks, nil)
			buf = cur[:size]
		default:
			if scratch == nil {
				scratch = pumpBufs.Get().(*[]byte)
			}
			buf = *scratch
		}
		var n int
		var err error
		if final >= 0 {
			n = readNow(f, buf)
			final += n
			if n == 0 || final >= maxFinalDrain {
				err = io.EOF
			}
		} else {
			n, err = f.Read(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) && f.SetReadDeadline(time.Time{}) == nil {
				final, err = 0, nil
			}
		}
		if n > 0 {
			if room > 0 {
				cur = cur[:len(cur)+n]
				b.chunks[len(b.chunks)-1] = cur
				b.size += n
			} else {
				b.dropped += int64(n)
			}
		}
		if err != nil {
			if len(b.chunks) > 0 && len(b.chunks[len(b.chunks)-1]) == 0 {
				b.chunks = b.chunks[:len(b.chunks)-1]
			}
			return
		}
	}
}
