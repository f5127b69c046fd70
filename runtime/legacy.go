package runtime

import (
	"context"
	"io"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
)

// ExecResult is the outcome of a legacy one-shot execution (protocol.md §5).
type ExecResult struct {
	Stdout, Stderr               []byte // at most Config.LegacyOutputLimit each
	StdoutDropped, StderrDropped int64  // bytes past the cap, read and discarded
	ExitCode                     int    // exit code, or -N for a signal death
	TimedOut                     bool   // the timeout ended it (output is then meaningless)
	Terminated                   bool   // runtime shutdown ended it
}

// Execute runs argv once in the base dir with stdin /dev/null, waits for the
// process and for EOF on both pipes, and returns its capped output. timeout
// is clamped to MaxTimeout (<= 0 means MaxTimeout). It is not a managed
// handle and does not count against the limits, but it shares the process
// group, reaping and shutdown machinery. A disconnecting client does not end
// it. Errors: ErrShuttingDown, ErrInvalid (empty argv), or a
// *procgroup.StartError wrapped with ErrSpawnFailed.
func (m *Manager) Execute(argv []string, timeout time.Duration) (ExecResult, error) {
	if len(argv) == 0 {
		return ExecResult{}, invalidf("argv must not be empty")
	}
	if timeout <= 0 || timeout > m.cfg.MaxTimeout {
		timeout = m.cfg.MaxTimeout
	}
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
		return ExecResult{}, errorf(ErrSpawnFailed, "%v", err).(*classified).wrap(err)
	}
	log := m.log.With(zap.String("argv0", argv[0]), zap.Int("pid", p.Pid))
	log.Debug("legacy execution started")

	limit := m.cfg.LegacyOutputLimit
	out, errOut := cappedBuffer{limit: limit}, cappedBuffer{limit: limit}
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); out.drain(p.Stdout) }()
	go func() { defer pumps.Done(); errOut.drain(p.Stderr) }()
	pipesDone := make(chan struct{})
	go func() { pumps.Wait(); close(pipesDone) }()

	var res ExecResult
	var why cause
	t := time.NewTimer(timeout)
	defer t.Stop()
	leaderDone := p.Done()
	// Wait for the leader and for EOF on both pipes, like subprocess.run.
	for leaderDone != nil || pipesDone != nil {
		select {
		case <-leaderDone:
			leaderDone = nil
		case <-pipesDone:
			pipesDone = nil
		case <-t.C:
			why = causeTimeout
		case <-m.shutdownCh:
			why = causeShutdown
		}
		if why != causeNone {
			break
		}
	}
	if why != causeNone {
		grace := time.Duration(0) // like subprocess.run: kill at once on timeout
		if why == causeShutdown {
			grace = m.cfg.KillGrace
		}
		p.Terminate(context.Background(), grace)
		<-p.Done()
		// Processes that left the group may still hold the pipes; give them
		// the grace, then stop reading.
		select {
		case <-pipesDone:
		case <-time.After(m.cfg.KillGrace):
		}
	}
	p.Stdout.Close()
	p.Stderr.Close()
	pumps.Wait()
	exit := p.Exit()
	res = ExecResult{
		Stdout: out.buf, Stderr: errOut.buf,
		StdoutDropped: out.dropped, StderrDropped: errOut.dropped,
		ExitCode:   exit.Code,
		TimedOut:   why == causeTimeout,
		Terminated: why == causeShutdown,
	}
	log.Info("legacy execution finished", zap.Int("exit_code", exit.Code),
		zap.Bool("timed_out", res.TimedOut), zap.Bool("terminated", res.Terminated))
	return res, nil
}

// cappedBuffer keeps the first limit bytes of a stream and counts the rest.
type cappedBuffer struct {
	limit   int
	buf     []byte
	dropped int64
}

func (b *cappedBuffer) drain(r io.Reader) {
	bp := pumpBufs.Get().(*[]byte)
	defer pumpBufs.Put(bp)
	chunk := *bp
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			keep := min(n, b.limit-len(b.buf))
			b.buf = append(b.buf, chunk[:keep]...)
			b.dropped += int64(n - keep)
		}
		if err != nil {
			return
		}
	}
}
