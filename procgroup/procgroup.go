// Package procgroup starts commands as leaders of their own process group, signals
// the whole group, and owns the only wait4 call site of the process (the Reaper), so
// that the exit status of a command can never be stolen and no orphan stays a zombie.
//
// It is the only package of the module that imports golang.org/x/sys/unix. The real
// implementation is Linux-only; on other systems every entry point returns
// ErrUnsupported so that the module still builds (for editors and go vet on macOS).
package procgroup

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var (
	// ErrReaperActive is returned by NewReaper while another Reaper of this process
	// is open (there must be exactly one wait4 call site per process).
	ErrReaperActive = errors.New("procgroup: a reaper is already active in this process")

	// ErrClosed is returned by Start after the Reaper was closed.
	ErrClosed = errors.New("procgroup: reaper closed")

	// ErrUnsupported is returned by every entry point on systems other than Linux.
	ErrUnsupported = errors.New("procgroup: unsupported on this operating system")

	// ErrGroupGone is returned by Process.Signal when the process group has no
	// members left (kill answered ESRCH), or once the Process was released.
	ErrGroupGone = errors.New("procgroup: process group has no members")
)

// StartError is returned by Reaper.Start when a command could not be started.
// It reports the raw errno (errors.Is(err, syscall.ENOENT) works: Unwrap returns
// it) and classifies nothing: what an errno means to a caller (not found, a
// retry worth making, …) is decided once, by runtime's spawn classes.
type StartError struct {
	Op    string        // "exec" or "chdir"
	Path  string        // argv[0] exactly as given (Op "exec"), or Spec.Dir (Op "chdir")
	Errno syscall.Errno // the raw errno (ENOENT, EACCES, ENOEXEC, ENOTDIR, ...)
	// Limit describes the process limits in force when the fork failed with
	// EAGAIN or ENOMEM (e.g. "pid_max 400 of the pid namespace, 400 in use"); else "".
	Limit string
}

// Error reads like `exec "nosuchcmd": no such file or directory`, or
// `exec "sh": resource temporarily unavailable (pids.max 400 …)` when a process
// limit stopped the fork.
func (e *StartError) Error() string {
	if e.Limit != "" {
		return fmt.Sprintf("%s %q: %s (%s)", e.Op, e.Path, e.Errno.Error(), e.Limit)
	}
	return fmt.Sprintf("%s %q: %s", e.Op, e.Path, e.Errno.Error())
}

// Unwrap returns the raw Errno.
func (e *StartError) Unwrap() error { return e.Errno }

// Spec describes a command for Reaper.Start.
type Spec struct {
	// Argv is the argument vector; it must not be empty. Argv[0] without a "/" is
	// searched on the PATH found in Env (the last PATH= entry), falling back to the
	// runtime's own PATH, the way Python's os.execvpe does: directories whose
	// candidate is missing are skipped; if none is executable the error is EACCES
	// when some candidate exists but cannot be executed, else ENOENT. Argv[0]
	// containing a "/" is used as is (relative to Dir).
	Argv []string
	// Env is the complete environment, "K=V" entries, passed as is.
	Env []string
	// Dir is the working directory; "" inherits the runtime's.
	Dir string
	// Stdin true gives the command a pipe (Process.Stdin is its write end); false
	// gives it /dev/null. It is ignored when PTY is set.
	Stdin bool
	// PTY, when set, runs the command on a new pseudo-terminal of that size
	// instead of pipes: the command is a session leader (sid == pgid == pid)
	// whose controlling terminal is the PTY, and stdin, stdout and stderr are
	// the terminal. The size is set before the fork. Process.PTY is the master.
	PTY *Winsize
	// ExtraFiles become the child's fds 3, 4, … in order (as os/exec's
	// ExtraFiles). The caller keeps them and closes its copies after Start;
	// Fd is called on each, which puts it in blocking mode.
	ExtraFiles []*os.File
}

// Winsize is the size of a terminal in character cells.
type Winsize struct {
	Cols, Rows uint16
}

// Process is a started command: the leader of a new process group whose pgid is Pid.
//
// The caller owns Stdin, Stdout and Stderr and must close them. The exit status is
// written once by the Reaper before done is closed and never changes afterwards.
type Process struct {
	Pid    int
	Stdin  *os.File // write end of the stdin pipe; nil when Spec.Stdin is false. Caller closes it.
	Stdout *os.File // read end (pollable: Close from another goroutine unblocks a Read). Caller closes it.
	Stderr *os.File // read end. Caller closes it.
	// PTY is the master of the terminal when Spec.PTY was set (Stdin, Stdout and
	// Stderr are nil then): read it for output (it fails with EIO once no process
	// holds the terminal open), write it for input. Pollable. Caller closes it.
	PTY *os.File

	// input identifies what the command reads its input from (the terminal or
	// the stdin pipe), for WaitingForInput; zero when it has neither.
	input fileID

	done chan struct{} // closed by the Reaper once the leader has been reaped
	exit ExitStatus    // written before done is closed

	// reaped is set by the Reaper once it has seen the leader exit (a zombie
	// it is about to collect, or collected): before its wait4, so that
	// Exited never misses an exit between the zombie and the reaped state.
	reaped atomic.Bool
	// collectMu makes the reap loop's collect and the owner's Collect
	// exclusive: exactly one of them collects and hands over the exit.
	collectMu sync.Mutex
	// reapable is false for a Process of no Reaper (Exited looks only at done).
	reapable bool
	// sigMu guards pidfd and cg against Release while a signal is sent.
	sigMu sync.Mutex
	pidfd int         // pidfd of the leader, opened before it can be reaped; -1 once released (or none)
	cg    *cmdCgroup  // the command's own cgroup (cgroup mode), nil otherwise
	oom   oomBaseline // what OOM attribution compares against at reap time
	r     *Reaper     // the Reaper that started it

	released bool        // guarded by sigMu: Release was called
	sentKill atomic.Bool // a SIGKILL or cgroup.kill was sent by us (OOM attribution)
}

// Exited reports whether the leader has exited: the Reaper has collected its
// exit status (or is collecting it), or it is a zombie the Reaper has not
// collected yet. Unlike a non-blocking receive on Done, it is ordered after
// the kernel's view, not after the Reaper's hand-off: once the leader is a zombie (it ended
// on its own), or was reaped so that kill(Pid, 0) fails with ESRCH, Exited
// returns true. It never reaps.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
	}
	if !p.reapable {
		return false
	}
	if p.reaped.Load() {
		return true
	}
	// Not reaped yet: the Reaper marks reaped before it collects the
	// leader, so either the pid is still the leader's (a zombie or alive)
	// or the mark is visible now.
	return p.zombie() || p.reaped.Load()
}

// Done returns a channel closed once the leader has been reaped. If the Reaper is
// closed while the process is still running, the channel is never closed.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exit returns the exit status of the leader. It is valid once Done is closed;
// before that it returns the zero ExitStatus.
func (p *Process) Exit() ExitStatus {
	select {
	case <-p.done:
		return p.exit
	default:
		return ExitStatus{}
	}
}

// ExitStatus is how the leader of a process group ended, as wait4 reported it.
type ExitStatus struct {
	Code     int            // exit code 0..255, or -N when killed by signal N (Python convention)
	Signal   syscall.Signal // the signal that ended it, 0 if it exited
	UserCPU  time.Duration  // from wait4's rusage (the leader plus its reaped descendants)
	SysCPU   time.Duration
	MaxRSSKB int64
	// OOMKilled reports that the kernel's OOM killer ended a process of the
	// command: exact where the command has its own cgroup with a memory
	// controller (memory.events oom_kill); otherwise the leader died of a SIGKILL
	// that procgroup did not send while the OOM kill counter of the runtime's
	// memory cgroup (or /proc/vmstat) rose.
	OOMKilled bool
}

// Signaled reports whether a signal ended the process.
func (s ExitStatus) Signaled() bool { return s.Signal != 0 }
