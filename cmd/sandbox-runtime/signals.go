//go:build linux

package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// The daemon is PID 1 of the sandbox, and every command it runs can signal
// it (`kill -HUP 1`). The kernel protects init only from signals whose
// action is the default one; the Go runtime installs handlers that turn
// SIGHUP into exit and SIGQUIT, SIGABRT, SIGSEGV (sent with kill), SIGSYS,
// … into a crash with a stack dump. So the fate of every signal is decided
// here: SIGTERM and SIGINT are the graceful shutdown (signal.NotifyContext
// in main), SIGCHLD belongs to the reaper, SIGURG to the Go scheduler, and
// every other catchable signal is received on a channel and logged, never
// acted on. They are caught, not ignored: an ignored signal stays ignored
// in every command the daemon starts (execve keeps SIG_IGN), a caught one
// is reset to the default.

// straySignals are the signals that are logged and otherwise dropped.
// SIGCONT, SIGWINCH and SIGPROF are harmless by default and left alone.
// SIGKILL and SIGSTOP cannot be caught (and a command cannot send them to
// the init of its own pid namespace). Signals 32, 33 and 34 are reserved by
// the Go runtime (for the C libraries' threads) and cannot be caught; with
// their default action the kernel drops them when the daemon is PID 1.
func straySignals() []os.Signal {
	sigs := []os.Signal{
		syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP, syscall.SIGABRT,
		syscall.SIGBUS, syscall.SIGFPE, syscall.SIGUSR1, syscall.SIGSEGV, syscall.SIGUSR2,
		syscall.SIGPIPE, syscall.SIGALRM, syscall.SIGSTKFLT, syscall.SIGTSTP, syscall.SIGTTIN,
		syscall.SIGTTOU, syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGVTALRM, syscall.SIGIO,
		syscall.SIGPWR, syscall.SIGSYS,
	}
	for n := 35; n <= 64; n++ { // the real-time signals from SIGRTMIN+3 to SIGRTMAX
		sigs = append(sigs, syscall.Signal(n))
	}
	return sigs
}

// strayLogWindow is how often one signal is logged: a storm of it (a
// command looping on `kill -USR1 1`) gives one line per window, which
// counts the repeats that were not logged.
const strayLogWindow = time.Second

// catchStraySignals starts receiving the stray signals and logging them. The
// returned function stops it (the signals then get the Go runtime's default
// again, so call it only at exit).
func catchStraySignals(log *zap.Logger) (stop func()) {
	ch := make(chan os.Signal, 64) // a storm beyond that is dropped by os/signal, never blocks
	signal.Notify(ch, straySignals()...)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		type seen struct {
			last       time.Time
			suppressed int
		}
		bySignal := map[os.Signal]*seen{}
		for {
			select {
			case <-done:
				return
			case sig := <-ch:
				now := time.Now()
				s := bySignal[sig]
				if s == nil {
					s = &seen{}
					bySignal[sig] = s
				}
				if !s.last.IsZero() && now.Sub(s.last) < strayLogWindow {
					s.suppressed++
					continue
				}
				log.Warn("signal ignored", zap.String("signal", sig.String()),
					zap.Int("signal_number", int(sig.(syscall.Signal))), zap.Int("repeats_not_logged", s.suppressed))
				s.last, s.suppressed = now, 0
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
		<-finished
	}
}
