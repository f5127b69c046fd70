package runtime

import (
	"context"
	"os"
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
// (SIGTERM and SIGKILL without a kill grace, as for its timeout) and
// Cancelled is set, since nobody can receive the result any more and no
// handle could find the process. It runs on the one supervisor
// (supervise.go) with the options executeRequest sets.
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
	var pumps pumpSet
	pumps.add(2)
	go func() { defer pumps.finished(); out.drain(p.Stdout) }()
	go func() { defer pumps.finished(); errOut.drain(p.Stderr) }()

	// The request goroutine is the owner; the rules are the supervisor's
	// (supervise.go), with a managed command's end (the leader's exit, then
	// the pipe grace) and these differences: the call going away ends it
	// (cancel), a timeout or a cancel kills at once, and once the leader has
	// exited on its own nothing ends it any more (the background child is
	// not signalled).
	var why cause
	requested := false // endCh is closed
	endCh := make(chan struct{})
	sv := supervision{
		m: m, p: p, timeout: timeout, pumps: &pumps, files: []*os.File{p.Stdout, p.Stderr},
		killAtOnce: causes(causeTimeout, causeKill),
		cancel:     ctx.Done(),
		endCh:      endCh,
		requestEnd: func(c cause) {
			if !requested && !p.Exited() {
				why, requested = c, true
				close(endCh)
			}
		},
		ending: func() {
			// The leader may have exited on its own since the end was
			// requested: then the request did not end it (the group is
			// still signalled; the window is microseconds).
			if p.Exited() {
				why = causeNone
			}
		},
	}
	sup := sv.run()
	p.Stdout.Close()
	p.Stderr.Close()
	if sup.terminated != nil {
		<-sup.terminated
	}
	cancelled, held := why == causeKill, sup.held
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
