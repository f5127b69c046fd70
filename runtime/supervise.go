package runtime

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
)

// supervision is the one supervisor of a started process: managed commands
// (Command.run), legacy executions (Manager.execute) and sandboxd's one-shot
// executions (Manager.executeRequest) all end through it, with one set of
// rules; what differs between them is the options below. It runs in the
// owner goroutine of the process (the command's run, or the request
// goroutine of /execute or of the gRPC Execute): the only other
// goroutines are the pipe readers and, once an end is requested, the one
// that signals the group (Terminate). When the pipes reach EOF first (the
// usual order: the kernel closes an exiting process's files before it makes
// it a zombie), the owner collects the leader's exit itself
// (procgroup.Process.Collect) instead of waiting for the Reaper's hand-off.
//
// The rules:
//
//  1. The command runs until the leader has exited (managed commands) or
//     until the leader has exited and both pipes are at EOF (legacy
//     /execute, like Python's subprocess.run: untilEOF).
//  2. While it runs, the timeout (from the start) and shutdown request its
//     end; so does an API kill (endCh) or the caller going away (cancel,
//     sandboxd's Execute: causeKill). The first request wins and decides
//     the cause. What a request does after the leader has exited on its own
//     is the class's requestEnd's to say (managed: a timeout nothing, a kill
//     or shutdown still signals what is left of the group).
//  3. An end signals the group: SIGTERM, SIGKILL after the kill grace
//     (Config.KillGrace; NoKillGrace is 0), at once when Shutdown's kill
//     deadline passes. The causes in killAtOnce skip the grace (legacy: a
//     timeout, like subprocess.run; sandboxd's Execute: a timeout or a
//     cancelled call).
//  4. Pipe grace: once the leader has exited (managed), or has exited and an
//     end was signalled (legacy), the pipes are read until EOF for one kill
//     grace, never less than minPipeDrain, so output the leader wrote just
//     before it exited is not lost; after Shutdown's kill deadline only
//     minPipeDrain. A background member holding the pipes cannot hold the
//     result longer.
//  5. When the pipe grace ends with a pipe still open, each reader takes
//     what the pipe already holds (at most maxFinalDrain) and stops: output
//     written before that moment is never lost to a reader that was
//     scheduled late. A terminal's EIO, which Linux may report before the
//     end, is confirmed by Command.terminalEIO (about 31 ms more, at most
//     terminalTailMax).
type supervision struct {
	m       *Manager
	p       *procgroup.Process
	timeout time.Duration
	pumps   *pumpSet
	files   []*os.File // the read ends the pumps read (deadline at the pipe grace's end)

	untilEOF   bool     // rule 1: legacy
	killAtOnce causeSet // rule 3: the causes whose end sends SIGKILL at once
	// cancel, if set, requests an end (causeKill) when it is closed: the
	// caller of a one-shot execution went away (rule 2).
	cancel <-chan struct{}

	// endCh is closed when an end has been requested (by requestEnd or from
	// outside, as Command.Kill does).
	endCh <-chan struct{}
	// requestEnd asks for an end for why (rule 2); it closes endCh unless it
	// decides the request does nothing.
	requestEnd func(why cause)
	// leaderExited, if set, is called in the owner goroutine when the
	// leader's exit status has been collected.
	leaderExited func()
	// ending, if set, is called when the end is about to be signalled.
	ending func()
	// endHolds, if set, is called when the readers may wait no more for
	// holding streams (Command.Hold): an end was asked for (a kill, the
	// timeout, shutdown; Shutdown asks before its kill deadline).
	endHolds func()
}

// supervised is what run reports.
type supervised struct {
	// terminated is closed when the group has been signalled (Terminate
	// returned); nil when no end was signalled.
	terminated <-chan struct{}
	// held: a pipe was still open when the pipe grace ended (rule 5).
	held bool
}

// causeSet is a set of causes.
type causeSet uint8

func causes(cs ...cause) causeSet {
	var s causeSet
	for _, c := range cs {
		s |= 1 << c
	}
	return s
}

func (s causeSet) has(c cause) bool { return s&(1<<c) != 0 }

// run supervises the process until rules 1 and 4 let it go, then stops and
// waits for the pipe readers (rule 5). It does not close the pipes.
// long: one select loop that is the rules above; its cases share the loop's
// state (the grace timer, the first cause, hurry), which a split would have to
// pass around.
func (s *supervision) run() supervised {
	m, p := s.m, s.p
	timeout := time.NewTimer(s.timeout)
	defer timeout.Stop()
	var terminated chan struct{}
	stopTerm := func() {}
	defer func() { stopTerm() }()
	leaderDone, endCh, shutdown, killNow, cancel := p.Done(), s.endCh, m.shutdownCh, m.killNow, s.cancel
	pipesDone := s.pumps.done
	pipesOpen := true
	hurry := false // Shutdown's kill deadline has passed: no more grace
	var g *time.Timer
	var grace <-chan time.Time
	graceStarted := false
	asked := causeNone // the first end this loop requested
	ask := func(why cause) {
		if asked == causeNone {
			asked = why
		}
		s.requestEnd(why)
	}
	startGrace := func() {
		if g != nil {
			g.Stop()
		}
		d := max(m.killGrace(), m.pipeFloor)
		if hurry {
			d = m.pipeFloor
		}
		g = time.NewTimer(d)
		grace, graceStarted = g.C, true
	}
	defer func() {
		if g != nil {
			g.Stop()
		}
	}()
	exited := func() {
		leaderDone = nil
		if s.leaderExited != nil {
			s.leaderExited()
		}
		if !s.untilEOF || terminated != nil {
			startGrace()
		}
	}
	for leaderDone != nil || (pipesOpen && (grace != nil || !graceStarted)) {
		select {
		case <-leaderDone:
			exited()
		case <-pipesDone:
			pipesDone, pipesOpen = nil, false
			// EOF usually means the leader is exiting: take its exit here
			// when it is already a zombie, rather than after the Reaper's
			// hand-off.
			if leaderDone != nil && p.Collect() {
				exited()
			}
		case <-grace:
			grace = nil // stop collecting: a background member holds the pipes
		case <-timeout.C:
			ask(causeTimeout)
		case <-shutdown:
			shutdown = nil
			ask(causeShutdown)
		case <-cancel:
			cancel = nil
			ask(causeKill)
		case <-killNow:
			// Terminate (termCtx) sends SIGKILL now; the pipe grace shrinks
			// to its minimum, so the command ends inside Shutdown's budget.
			killNow, hurry = nil, true
			if grace != nil {
				startGrace()
			}
		case <-endCh:
			endCh = nil
			if s.endHolds != nil {
				s.endHolds() // an end was asked for: nobody waits for a reader any more
			}
			if s.ending != nil {
				s.ending()
			}
			killGrace := m.killGrace()
			if s.killAtOnce.has(asked) {
				killGrace = 0
			}
			var termCtx context.Context
			termCtx, stopTerm = m.killContext()
			terminated = make(chan struct{})
			go func() {
				defer close(terminated)
				p.Terminate(termCtx, killGrace)
			}()
			if leaderDone == nil && !graceStarted {
				startGrace()
			}
		}
	}
	if pipesOpen {
		// The readers' last read (rule 5) is still held for holding
		// streams: it is at most maxFinalDrain per pipe, so a reader that
		// keeps up delays the end by at most that at its pace, and one
		// that stops by its hold. An end asked for ends the holds.
		now := time.Now()
		for _, f := range s.files {
			f.SetReadDeadline(now)
		}
	}
	if s.endHolds != nil && (shutdown != nil || endCh != nil) {
		// A reader may still wait for a holding stream (the final drain):
		// an end asked for now (a kill, shutdown) ends that wait too.
		select {
		case <-s.pumps.done:
		case <-shutdown:
			s.endHolds()
		case <-endCh:
			s.endHolds()
		}
	}
	s.pumps.wg.Wait()
	return supervised{terminated: terminated, held: pipesOpen}
}

// pumpSet counts the pipe readers of one process; the last to return closes
// done itself, so no goroutine waits on the WaitGroup just to close it.
type pumpSet struct {
	wg   sync.WaitGroup
	left atomic.Int32
	done chan struct{}
}

// add prepares n readers; call it before starting them.
func (ps *pumpSet) add(n int) {
	ps.done = make(chan struct{})
	ps.wg.Add(n)
	ps.left.Store(int32(n))
}

// finished is called by each reader as it returns.
func (ps *pumpSet) finished() {
	if ps.left.Add(-1) == 0 {
		close(ps.done)
	}
	ps.wg.Done()
}

// readNow reads what f holds right now into buf without waiting for more:
// 0 and nil when it is empty (or at EOF, or failed). f's read deadline has
// passed; the caller clears it first.
func readNow(f *os.File, buf []byte) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Read(func(fd uintptr) bool {
		for {
			k, err := syscall.Read(int(fd), buf)
			if err == syscall.EINTR {
				continue
			}
			if k > 0 && err == nil {
				n = k
			}
			return true // data, EAGAIN (empty), EOF or an error: done either way
		}
	})
	return n
}
