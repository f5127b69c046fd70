package runtime

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
)

// ExecRequest is a one-shot execution with the settings sandboxd's
// ProcessService.Execute carries (docs/protocol.md "sandboxd"): an argv, env
// overrides and a working directory, validated as a CreateRequest's are.
type ExecRequest struct {
	Argv    []string
	Envs    map[string]string // added to the runtime's environment; the request wins
	Cwd     string            // absolute existing directory; "" means the base dir
	Timeout time.Duration     // <= 0 or above MaxTimeout: MaxTimeout
}

// ExecOutcome is what ExecuteRequest returns beyond an ExecResult.
type ExecOutcome struct {
	ExecResult
	// Cancelled: ctx ended while the process ran, and the group was killed.
	Cancelled bool
	// Held: a member of the group still held stdout or stderr open when the
	// pipe grace after the leader's exit ended; what it wrote until then is
	// kept, the rest is not read.
	Held bool
}

// ExecuteRequest runs r once like Execute (no handle, not counted against
// the running limit, one of the MaxExecutions slots held until Release), but
// with r's environment and working directory, and ends like a managed
// command (protocol.md §2 "End of a command") rather than like
// subprocess.run: once the leader has exited, the pipes are read for the
// kill grace (at least 100 ms) and then collection stops, so a background
// child that keeps stdout open (sh -c 'sleep 60 & echo started') neither
// holds the answer nor loses what the leader wrote. The background child is
// not signalled (as for a managed command whose leader exits on its own).
//
// Unlike Execute, ctx matters while the process runs: when it ends (the
// client went away, its deadline passed) the group is killed at once
// (SIGTERM, SIGKILL after the kill grace) and Cancelled is set, since nobody
// can receive the result any more and no handle could find the process.
//
// Errors are Execute's, plus ErrInvalid for what normalize refuses.
func (m *Manager) ExecuteRequest(ctx context.Context, r ExecRequest) (ExecOutcome, error) {
	s, _, err := m.normalize(CreateRequest{Argv: r.Argv, Envs: r.Envs, Cwd: r.Cwd})
	if err != nil {
		return ExecOutcome{}, err
	}
	timeout := r.Timeout
	if timeout <= 0 || timeout > m.cfg.MaxTimeout {
		timeout = m.cfg.MaxTimeout
	}
	release, err := m.adm.admit(ctx, ClassExecution, 0)
	if err != nil {
		return ExecOutcome{}, err
	}
	res, err := m.executeRequest(ctx, s, timeout)
	if err != nil {
		release()
		return ExecOutcome{}, err
	}
	var once sync.Once
	out, errOut := res.Stdout, res.Stderr
	res.release = func() {
		once.Do(func() {
			out.recycle()
			errOut.recycle()
			release()
		})
	}
	return res, nil
}

func (m *Manager) executeRequest(ctx context.Context, s spec, timeout time.Duration) (ExecOutcome, error) {
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return ExecOutcome{}, errorf(ErrShuttingDown, "the runtime is shutting down")
	}
	m.wg.Add(1)
	m.mu.Unlock()
	defer m.wg.Done()
	m.obs.LegacyExecuted()

	p, err := m.reaper.Start(procgroup.Spec{Argv: s.argv, Env: s.environ(m.cfg.Env), Dir: s.cwd})
	if err != nil {
		m.obs.SpawnFailed(SpawnClassOf(err))
		return ExecOutcome{}, spawnError(err)
	}
	log := m.log.With(zap.String("argv0", s.argv[0]), zap.Int("pid", p.Pid))

	limit := m.cfg.LegacyOutputLimit
	out, errOut := cappedCapture{limit: limit}, cappedCapture{limit: limit}
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); out.drain(p.Stdout) }()
	go func() { defer pumps.Done(); errOut.drain(p.Stderr) }()
	pipesDone := make(chan struct{})
	go func() { pumps.Wait(); close(pipesDone) }()

	var why cause
	cancelled := false
	t := time.NewTimer(timeout)
	defer t.Stop()
	var grace <-chan time.Time
	leaderDone, ctxDone, shutdown := p.Done(), ctx.Done(), m.shutdownCh
collect:
	for leaderDone != nil || (pipesDone != nil && grace != nil) {
		select {
		case <-leaderDone:
			leaderDone = nil
			g := time.NewTimer(max(m.killGrace(), minPipeDrain))
			defer g.Stop()
			grace = g.C
		case <-pipesDone:
			pipesDone = nil
		case <-grace:
			grace = nil
		case <-t.C:
			why = causeTimeout
		case <-shutdown:
			shutdown, why = nil, causeShutdown
		case <-ctxDone:
			ctxDone, why, cancelled = nil, causeKill, true
		}
		if why != causeNone && leaderDone != nil {
			break collect
		}
		// The leader had exited on its own: whatever came after ends nothing.
		why, cancelled = causeNone, false
	}
	if why != causeNone {
		grace := time.Duration(0) // a timeout or a cancel kills at once, as Execute's timeout does
		if why == causeShutdown {
			grace = m.killGrace()
		}
		kctx, stop := m.killContext()
		p.Terminate(kctx, grace)
		stop()
		<-p.Done()
		select {
		case <-pipesDone:
			pipesDone = nil
		case <-time.After(max(m.killGrace(), minPipeDrain)):
		}
	}
	held := pipesDone != nil
	if held {
		// A member still holds a pipe: take what is in it now, then stop.
		now := time.Now()
		p.Stdout.SetReadDeadline(now)
		p.Stderr.SetReadDeadline(now)
	}
	pumps.Wait()
	p.Stdout.Close()
	p.Stderr.Close()
	exit := p.Exit()
	p.Release()
	res := ExecOutcome{
		ExecResult: ExecResult{
			Stdout: out.Capture, Stderr: errOut.Capture,
			StdoutDropped: out.dropped, StderrDropped: errOut.dropped,
			ExitCode:   exit.Code,
			TimedOut:   why == causeTimeout,
			Terminated: why == causeShutdown,
		},
		Cancelled: cancelled,
		Held:      held,
	}
	log.Info("sandboxd execution finished", zap.Int("exit_code", exit.Code),
		zap.Bool("timed_out", res.TimedOut), zap.Bool("terminated", res.Terminated),
		zap.Bool("cancelled", cancelled), zap.Bool("pipes_held", held))
	return res, nil
}
