//go:build linux

package procgroup

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	sysErrno "github.com/sandbox-runtime/sandbox-runtime/internal/errno"
)

const (
	// safetyReapInterval bounds how long a child can stay a zombie if a SIGCHLD
	// was lost. None is lost in practice: coalesced signals are drained by the
	// wait4 loop, one that arrived while no Reaper was listening is covered by
	// the loop's first pass, and sigCh is buffered so one that arrives during a
	// pass leaves a pass pending. It is 10 s rather than 1 s because every tick
	// wakes an idle daemon (issue 16: no timer more often than once per 10 s;
	// measured by `sandbox-bench -scenarios idle`).
	safetyReapInterval = 10 * time.Second

	// groupPollInterval is how often Terminate checks whether a group whose leader
	// has been reaped still has members.
	groupPollInterval = 20 * time.Millisecond

	// maxConcurrentForks bounds the forks in progress at once: each holds an
	// OS thread until the child has exec'd, and the threads made up front
	// (ReserveThreads) must cover every thread that can block at once.
	maxConcurrentForks = 16

	// defaultPath is used when neither Spec.Env nor the runtime has a PATH
	// (Python's os.defpath).
	defaultPath = "/bin:/usr/bin"
)

// active is true while a Reaper of this process is open.
var active atomic.Bool

// Reaper is the only place of the process that calls wait4. It marks the process
// a child subreaper and runs one goroutine that, on every SIGCHLD (and every
// 10 s as a safety net), reaps every child that has exited: exit statuses of
// processes started with Start are dispatched to their Process, unless the
// Process's owner collected it first (Process.Collect); any other child (an
// orphan reparented to us) is reaped and counted.
//
// Nothing else in the process may wait for children: exec.Cmd.Wait, os.Process.Wait
// or signal.Ignore(SIGCHLD) would steal or discard exit statuses.
type Reaper struct {
	log *zap.Logger

	// forkMu is read-locked by Start across fork+registration and write-locked by the
	// reap loop only to collect a zombie that nobody registered (an orphan), so a
	// child can never be reaped before it is registered; registered children are
	// collected without it. It also guards closed.
	forkMu sync.RWMutex
	closed bool

	// procsMu guards procs and held (Starts holding forkMu's read lock register concurrently).
	procsMu sync.Mutex
	procs   map[int]*Process      // started and not yet reaped, by pid
	held    map[*Process]struct{} // started and not yet released (pidfd or cgroup open)

	forkSlots chan struct{} // maxConcurrentForks tokens

	// cg and iso are set by UseCgroups (under forkMu's write lock) before the
	// first Start; cg is nil in process-group mode.
	cg  *cgroupTree
	iso Isolation

	orphans atomic.Uint64

	// notifyMu guards notify, a channel closed (and replaced) after every reap pass
	// that reaped an orphan; WaitOrphans waits on it.
	notifyMu sync.Mutex
	notify   chan struct{}

	sigCh     chan os.Signal
	stop      chan struct{} // closed by Close
	exited    chan struct{} // closed when the loop goroutine returns
	closeOnce sync.Once
}

// NewReaper marks the process a child subreaper (PR_SET_CHILD_SUBREAPER), subscribes
// to SIGCHLD and starts the reap loop. Only one Reaper may be open per process: a
// second call returns ErrReaperActive until the first is closed. A nil log is
// allowed.
func NewReaper(log *zap.Logger) (*Reaper, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if !active.CompareAndSwap(false, true) {
		return nil, ErrReaperActive
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		active.Store(false)
		return nil, os.NewSyscallError("prctl(PR_SET_CHILD_SUBREAPER)", err)
	}
	r := &Reaper{
		log:    log.Named("reaper"),
		procs:  make(map[int]*Process),
		held:   make(map[*Process]struct{}),
		notify: make(chan struct{}),
		sigCh:  make(chan os.Signal, 1),
		stop:   make(chan struct{}),
		exited: make(chan struct{}),

		forkSlots: make(chan struct{}, maxConcurrentForks),
	}
	signal.Notify(r.sigCh, syscall.SIGCHLD)
	go r.loop()
	return r, nil
}

// Close stops the reap loop and waits for it to return; it is idempotent and always
// returns nil. Running processes are not signalled; their Done channels will not be
// closed. The process stays a child subreaper, so orphans wait as zombies for the
// next Reaper (whose first pass reaps them).
func (r *Reaper) Close() error {
	r.closeOnce.Do(func() {
		r.forkMu.Lock()
		r.closed = true
		r.forkMu.Unlock()
		signal.Stop(r.sigCh)
		close(r.stop)
		<-r.exited
		r.releaseReaped()
		active.Store(false)
		r.log.Debug("reaper closed")
	})
	return nil
}

// OrphansReaped returns how many children this Reaper has reaped that were not
// started with Start.
func (r *Reaper) OrphansReaped() uint64 { return r.orphans.Load() }

// WaitOrphans blocks until OrphansReaped() >= n. It returns ctx.Err() if ctx is done
// first, or ErrClosed if the Reaper is closed first.
func (r *Reaper) WaitOrphans(ctx context.Context, n uint64) error {
	for {
		r.notifyMu.Lock()
		ch := r.notify
		r.notifyMu.Unlock()
		if r.orphans.Load() >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.stop:
			return ErrClosed
		}
	}
}

func (r *Reaper) loop() {
	defer close(r.exited)
	tick := time.NewTicker(safetyReapInterval)
	defer tick.Stop()
	r.reap() // children that exited before we subscribed
	for {
		select {
		case <-r.stop:
			return
		case <-r.sigCh:
		case <-tick.C:
		}
		r.reap()
	}
}

// reap collects every child that has exited. It looks at the next zombie
// without collecting it (waitid WNOWAIT): a child registered by Start is
// collected at once, without forkMu, since its pid cannot be anyone else's
// until it is collected, and only the reap loop and the owner's Collect
// (exclusive per process: collectMu) collect registered children. Only a zombie nobody registered (an orphan, or a child whose
// Start is between fork and registration) takes forkMu's write lock, which
// waits out the forks in progress; what is still unregistered then is an
// orphan. The work of a registered exit (OOM attribution, the group and
// cgroup check, Release) runs under no lock.
func (r *Reaper) reap() {
	orphans := 0
	for {
		pid := nextZombie()
		if pid <= 0 {
			break
		}
		r.procsMu.Lock()
		p := r.procs[pid]
		r.procsMu.Unlock()
		if p != nil {
			r.collect(p)
			continue
		}
		r.forkMu.Lock()
		r.procsMu.Lock()
		p = r.procs[pid]
		r.procsMu.Unlock()
		if p != nil {
			r.forkMu.Unlock()
			r.collect(p)
			continue
		}
		st, ok := wait4(pid)
		r.forkMu.Unlock()
		if ok {
			orphans++
			r.orphans.Add(1)
			r.log.Debug("orphan reaped", zap.Int("pid", pid), zap.Int("code", st.Code))
		}
	}
	if orphans > 0 && r.cg != nil {
		r.cg.sweep() // an orphan that left may have been a cgroup's last member
	}
	if orphans > 0 {
		r.notifyMu.Lock()
		close(r.notify)
		r.notify = make(chan struct{})
		r.notifyMu.Unlock()
	}
}

// nextZombie returns the pid of a child that has exited and waits to be
// collected, or 0 when there is none (or no child at all).
func nextZombie() int {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || info.Signo == 0 {
			return 0
		}
		return int(siginfoPid(&info))
	}
}

// siginfoPid is si_pid of a SIGCHLD siginfo: the first field of the union,
// which follows si_signo, si_errno and si_code (and, on 64-bit Linux, 4
// bytes of padding that align the union to 8).
func siginfoPid(info *unix.Siginfo) int32 {
	off := uintptr(12)
	if unsafe.Sizeof(uintptr(0)) == 8 {
		off = 16
	}
	return *(*int32)(unsafe.Add(unsafe.Pointer(info), off))
}

// siginfoStatus is si_status of a SIGCHLD siginfo: it follows si_pid and
// si_uid (two 32-bit fields) in the union.
func siginfoStatus(info *unix.Siginfo) int32 {
	off := uintptr(12)
	if unsafe.Sizeof(uintptr(0)) == 8 {
		off = 16
	}
	return *(*int32)(unsafe.Add(unsafe.Pointer(info), off+8))
}

// wait4 collects the zombie pid, with its rusage.
func wait4(pid int) (ExitStatus, bool) {
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG|unix.WALL, &ru)
		if err == unix.EINTR {
			continue
		}
		if err != nil || got != pid {
			return ExitStatus{}, false
		}
		return exitStatus(ws, &ru), true
	}
}

// collect collects the registered p, whose leader is a zombie, and hands
// its exit status over (Done), unless its owner collected it first
// (Collect).
func (r *Reaper) collect(p *Process) {
	p.collectMu.Lock()
	if p.reaped.Load() {
		p.collectMu.Unlock() // the owner took it (Collect)
		return
	}
	if !p.zombie() {
		// The zombie the loop saw under this pid was collected by its
		// owner, and the number is already another registered child's.
		p.collectMu.Unlock()
		return
	}
	p.reaped.Store(true) // before the wait4: Exited is never blind
	st, ok := wait4(p.Pid)
	if !ok {
		p.reaped.Store(false) // cannot happen: it is a zombie, and ours to collect
		p.collectMu.Unlock()
		return
	}
	r.handOver(p, st)
	p.collectMu.Unlock()
	if p.goneAtReap() {
		// Nobody is left to signal and nobody can join an empty group:
		// the pidfd and the cgroup are no longer needed.
		p.Release()
	}
}

// handOver unregisters p and publishes its exit status (Done).
func (r *Reaper) handOver(p *Process, st ExitStatus) {
	r.procsMu.Lock()
	delete(r.procs, p.Pid)
	r.procsMu.Unlock()
	st.OOMKilled = p.oomKilled(st)
	p.exit = st
	close(p.done)
}

// Collect collects the leader's exit status in the caller's goroutine when
// the leader has exited (is a zombie) and nobody has collected it yet, and
// reports whether Done is closed now. It never waits for the leader. The
// owner of a command calls it when its pipes reach EOF (the kernel closes an
// exiting process's files just before it becomes a zombie), so that the exit
// does not wait for the hand-off SIGCHLD → signal goroutine → reap loop →
// Done. The reap loop and Collect exclude each other per process
// (collectMu); the Process is not released here (the owner's Release does
// that).
func (p *Process) Collect() bool {
	select {
	case <-p.done:
		return true
	default:
	}
	if !p.reapable || p.r == nil {
		return false
	}
	p.collectMu.Lock()
	defer p.collectMu.Unlock()
	if p.reaped.Load() {
		return true // the loop has just handed it over
	}
	if !p.zombie() {
		return false
	}
	p.reaped.Store(true) // before the wait4: Exited is never blind
	st, ok := wait4(p.Pid)
	if !ok {
		// Cannot happen (it is a zombie and only collectMu's holder
		// collects it); let the loop see what the kernel has.
		p.reaped.Store(false)
		return false
	}
	p.r.handOver(p, st)
	return true
}

func exitStatus(ws unix.WaitStatus, ru *unix.Rusage) ExitStatus {
	st := ExitStatus{
		UserCPU:  time.Duration(ru.Utime.Nano()),
		SysCPU:   time.Duration(ru.Stime.Nano()),
		MaxRSSKB: ru.Maxrss, // kilobytes on Linux
	}
	switch {
	case ws.Exited():
		st.Code = ws.ExitStatus()
	case ws.Signaled():
		st.Signal = syscall.Signal(ws.Signal())
		st.Code = -int(st.Signal)
	}
	return st
}

// Start forks and execs spec as the leader of a new process group (pgid == pid),
// with stdout and stderr as two pipes and stdin as a pipe or /dev/null. The process
// is registered with the Reaper before the reap loop can collect it, so its exit is
// never missed, however short-lived it is.
//
// A failure to start returns a *StartError (or ErrClosed) and leaves nothing behind:
// no file descriptor, no zombie, no registration.
//
// Its steps, as os/exec splits Start: check the request and find the program
// (resolve), make the child's stdio (newStdio), fork into the command's
// cgroup and register (fork), and explain a failure (startFailure).
func (r *Reaper) Start(spec Spec) (*Process, error) {
	path, serr := resolve(spec)
	if serr != nil {
		return nil, serr
	}
	io, errno := newStdio(spec)
	if errno != 0 {
		return nil, &StartError{Op: "exec", Path: spec.Argv[0], Errno: errno}
	}
	attr := &syscall.ProcAttr{Dir: spec.Dir, Env: spec.Env, Files: io.fds(), Sys: io.sys}
	for _, f := range spec.ExtraFiles {
		attr.Files = append(attr.Files, f.Fd())
	}
	p, cg, err := r.fork(path, spec.Argv, attr, io)
	if err != nil {
		io.closeAll()
		return nil, r.startFailure(spec, cg, err)
	}
	io.closeChild()
	r.log.Debug("started", zap.Int("pid", p.Pid), zap.String("argv0", spec.Argv[0]))
	return p, nil
}

// resolve checks what the kernel would refuse late or ambiguously (NUL
// bytes, the working directory) and finds the program on PATH.
func resolve(spec Spec) (string, *StartError) {
	if len(spec.Argv) == 0 {
		return "", &StartError{Op: "exec", Errno: unix.EINVAL}
	}
	argv0 := spec.Argv[0]
	for _, list := range [][]string{spec.Argv, spec.Env} {
		for _, s := range list {
			if strings.IndexByte(s, 0) >= 0 {
				return "", &StartError{Op: "exec", Path: argv0, Errno: unix.EINVAL}
			}
		}
	}
	if spec.Dir != "" {
		if errno := checkDir(spec.Dir); errno != 0 {
			return "", &StartError{Op: "chdir", Path: spec.Dir, Errno: errno}
		}
	}
	path, errno := lookPath(argv0, pathFromEnv(spec.Env), spec.Dir)
	if errno != 0 {
		return "", &StartError{Op: "exec", Path: argv0, Errno: errno}
	}
	return path, nil
}

// stdio is the child's fds 0-2 and the parent's ends of them.
type stdio struct {
	parent        []*os.File
	child         []childFd // the child's fds 0, 1, 2 in order
	stdin, master *os.File
	out           [2]*os.File // stdout, stderr read ends (none with a PTY)
	input         fileID
	sys           *syscall.SysProcAttr
}

// childFd is one of the child's ends: a raw descriptor the parent never
// reads or writes (so it is never registered with the netpoller, never made
// non-blocking and never flipped back: the pipes' child ends and the stdin
// pipe's read end), or a file (the PTY slave). own says whether closeChild
// closes fd (the shared /dev/null is not closed).
type childFd struct {
	f   *os.File
	fd  int
	own bool
}

func (c childFd) value() uintptr {
	if c.f != nil {
		return c.f.Fd()
	}
	return uintptr(c.fd)
}

// newStdio makes the terminal, or the stdin pipe (or /dev/null) and the two
// output pipes. On failure nothing is left open.
//
// Cost per command (issue 26): the ends the parent keeps are non-blocking
// and registered with the netpoller (os.NewFile of a non-blocking fd); the
// child's ends stay raw blocking descriptors, and /dev/null is one
// descriptor opened once per process (sharedDevNull). os.Pipe and os.Open
// cost ~17 more system calls per command: both ends registered and made
// non-blocking, the child's then made blocking again (Fd), deregistered and
// closed.
func newStdio(spec Spec) (*stdio, syscall.Errno) {
	io := &stdio{sys: &syscall.SysProcAttr{Setpgid: true}}
	fail := func(err error) (*stdio, syscall.Errno) {
		io.closeAll()
		return nil, errnoOf(err)
	}
	switch {
	case spec.PTY != nil:
		m, slave, err := openPTY(*spec.PTY)
		if err != nil {
			return fail(err)
		}
		io.parent = append(io.parent, m)
		s := childFd{f: slave}
		io.child = append(io.child, s, s, s)
		io.master, io.input = m, idOf(slave)
		// setsid makes it a group leader too; the terminal becomes the
		// controlling terminal of the new session (child fd 0).
		io.sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		return io, 0
	case spec.Stdin:
		pr, pw, err := pipeKeeping(1, "|1")
		if err != nil {
			return fail(err)
		}
		io.child = append(io.child, childFd{fd: pr, own: true})
		io.parent = append(io.parent, pw)
		io.stdin, io.input = pw, idOf(pw)
	default:
		fd, own, err := sharedDevNull.get()
		if err != nil {
			return fail(err)
		}
		io.child = append(io.child, childFd{fd: fd, own: own})
	}
	for i := range io.out {
		pw, pr, err := pipeKeeping(0, "|0")
		if err != nil {
			return fail(err)
		}
		io.parent = append(io.parent, pr)
		io.child = append(io.child, childFd{fd: pw, own: true})
		io.out[i] = pr
	}
	return io, 0
}

// pipeKeeping makes a pipe whose end keep (0: the read end, 1: the write
// end) the parent keeps, non-blocking and pollable, as an *os.File named
// name; the other end is returned raw, blocking, close-on-exec, for the
// child.
func pipeKeeping(keep int, name string) (other int, kept *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, nil, os.NewSyscallError("pipe2", err)
	}
	flags := unix.O_RDONLY
	if keep == 1 {
		flags = unix.O_WRONLY
	}
	if _, err := unix.FcntlInt(uintptr(p[keep]), unix.F_SETFL, flags|unix.O_NONBLOCK); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return -1, nil, os.NewSyscallError("fcntl", err)
	}
	// A non-blocking fd given to os.NewFile is registered with the netpoller.
	return p[1-keep], os.NewFile(uintptr(p[keep]), name), nil
}

// sharedDevNull is /dev/null opened read-only once per process: every
// command without stdin gets it as fd 0 (dup'd into the child; the
// parent's descriptor is never read, written, or closed). Should the open
// fail, each command tries its own, as before.
var sharedDevNull devNull

type devNull struct {
	mu sync.Mutex
	fd int // > 0 once opened
}

// get returns the descriptor, and whether the caller owns it (closes it).
func (d *devNull) get() (int, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd > 0 {
		return d.fd, false, nil
	}
	fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return -1, false, os.NewSyscallError("open", err)
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR {
		d.fd = fd // the real device: keep it
		return fd, false, nil
	}
	return fd, true, nil // not a character device: this command's own, as before
}

// fds is the child's fds for ProcAttr.Files.
func (io *stdio) fds() []uintptr {
	fds := make([]uintptr, len(io.child))
	for i, c := range io.child {
		fds[i] = c.value()
	}
	return fds
}

// closeChild closes the child's ends once it has them (the slave of a PTY
// is listed three times; later Closes are no-ops).
func (io *stdio) closeChild() {
	for i, c := range io.child {
		switch {
		case c.f != nil:
			c.f.Close()
		case c.own && c.fd >= 0:
			unix.Close(c.fd)
			io.child[i].fd = -1
		}
	}
}

// closeAll closes both ends: the start failed.
func (io *stdio) closeAll() {
	for _, f := range io.parent {
		f.Close()
	}
	io.closeChild()
}

// fork forks into the command's cgroup (cgroup mode) and registers the
// Process, all with forkMu read-locked, so that the reap loop cannot take
// the child for an orphan before it is registered. On failure it returns
// the command cgroup it used, if any (for the limit report), and the error:
// a *StartError already explained, ErrClosed, or the fork's error.
func (r *Reaper) fork(path string, argv []string, attr *syscall.ProcAttr, io *stdio) (*Process, *cmdCgroup, error) {
	// The machine-wide OOM counter is the fallback for a command without a
	// memory cgroup of its own; reading /proc/vmstat costs ~40 µs a command.
	var oom oomBaseline
	if !r.cg.hasMemEvents() {
		oom = newOOMBaseline()
	}

	r.forkSlots <- struct{}{}
	defer func() { <-r.forkSlots }()
	r.forkMu.RLock()
	defer r.forkMu.RUnlock()
	if r.closed {
		return nil, nil, ErrClosed
	}
	cg, cgfd := r.commandCgroup(attr.Sys)
	if cg == nil && oom.file == "" {
		oom = newOOMBaseline() // no cgroup of its own after all
	}
	// On an exec failure ForkExec reaps the child itself with wait4(pid); the
	// reap loop leaves an unregistered child alone while we hold the read lock.
	pid, err := syscall.ForkExec(path, argv, attr)
	if cg != nil {
		var serr *StartError
		if pid, err, cg, cgfd, serr = r.recoverFork(path, argv, attr, pid, err, cg, cgfd); serr != nil {
			return nil, nil, serr
		}
	}
	if err == unix.ENOSYS && cg != nil {
		// clone3 is filtered (an old seccomp profile): no CLONE_INTO_CGROUP.
		// Run this command as a process group only.
		r.log.Warn("clone3 is not available; the command runs without a cgroup of its own")
		unix.Close(cgfd)
		unix.Rmdir(cg.dir)
		cg, cgfd = nil, -1
		attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = false, 0
		if oom.file == "" {
			oom = newOOMBaseline()
		}
		pid, err = syscall.ForkExec(path, argv, attr)
	}
	if cgfd >= 0 {
		unix.Close(cgfd)
	}
	if err != nil {
		if cg != nil {
			unix.Rmdir(cg.dir)
		}
		return nil, cg, err
	}
	p := &Process{Pid: pid, Stdin: io.stdin, Stdout: io.out[0], Stderr: io.out[1], PTY: io.master, input: io.input,
		done: make(chan struct{}), reapable: true, pidfd: openPidfd(pid), cg: cg, oom: oom, r: r}
	r.procsMu.Lock()
	r.procs[pid] = p
	r.held[p] = struct{}{}
	r.procsMu.Unlock()
	return p, nil, nil
}

// startFailure explains a failed fork as a *StartError.
func (r *Reaper) startFailure(spec Spec, cg *cmdCgroup, err error) error {
	argv0 := spec.Argv[0]
	var serr *StartError
	switch {
	case errors.Is(err, ErrClosed):
		return ErrClosed
	case errors.As(err, &serr):
		serr.Path = argv0
		return serr
	}
	errno := errnoOf(err)
	if errno == unix.EAGAIN || errno == unix.ENOMEM {
		return &StartError{Op: "exec", Path: argv0, Errno: errno, Limit: r.limitReport(cg)}
	}
	// The child reports a failed chdir and a failed execve the same way; tell
	// them apart by checking the directory again (it passed the check before).
	if spec.Dir != "" {
		if derr := checkDir(spec.Dir); derr != 0 {
			return &StartError{Op: "chdir", Path: spec.Dir, Errno: derr}
		}
	}
	return &StartError{Op: "exec", Path: argv0, Errno: errno}
}

// checkDir returns the errno a chdir into dir would most likely fail with, or 0.
func checkDir(dir string) syscall.Errno {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return errnoOf(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unix.ENOTDIR
	}
	if err := unix.Faccessat(unix.AT_FDCWD, dir, unix.X_OK, unix.AT_EACCESS); err != nil {
		return errnoOf(err)
	}
	return 0
}

// pathFromEnv returns the value of the last PATH= entry of env, else the runtime's
// own PATH, else defaultPath.
func pathFromEnv(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "PATH="); ok {
			return v
		}
	}
	if v, ok := os.LookupEnv("PATH"); ok {
		return v
	}
	return defaultPath
}

// lookPath resolves file the way Python's os.execvpe does, but with stat and
// access instead of one execve per candidate, so that only one fork is needed.
// A file containing "/" is returned as is (execve reports its errors). Otherwise
// each PATH entry is tried in order ("" means the working directory); the first
// error other than ENOENT/ENOTDIR is remembered (a candidate that exists but is
// not executable gives EACCES) and reported when no candidate is executable, else
// ENOENT. Relative candidates are checked relative to dir, where the child will
// exec them.
//
// Unlike execvpe, a candidate that passes the check but then fails in execve
// (ENOEXEC, ETXTBSY) is reported instead of falling through to the next entry.
func lookPath(file, pathList, dir string) (string, syscall.Errno) {
	if strings.Contains(file, "/") {
		return file, 0
	}
	if file == "" {
		return "", unix.ENOENT
	}
	var saved syscall.Errno
	for _, d := range strings.Split(pathList, ":") {
		cand := "./" + file
		if d != "" {
			cand = d + "/" + file
		}
		check := cand
		if dir != "" && !filepath.IsAbs(cand) {
			check = filepath.Join(dir, cand)
		}
		var st unix.Stat_t
		if err := unix.Stat(check, &st); err != nil {
			if errno := errnoOf(err); errno != unix.ENOENT && errno != unix.ENOTDIR && saved == 0 {
				saved = errno
			}
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			if saved == 0 {
				saved = unix.EACCES
			}
			continue
		}
		if err := unix.Faccessat(unix.AT_FDCWD, check, unix.X_OK, unix.AT_EACCESS); err != nil {
			if saved == 0 {
				saved = errnoOf(err)
			}
			continue
		}
		return cand, 0
	}
	if saved != 0 {
		return "", saved
	}
	return "", unix.ENOENT
}

// errnoOf is the Errno of err, EIO when it wraps none: a failed start
// always names an errno.
func errnoOf(err error) syscall.Errno { return sysErrno.Or(err, unix.EIO) }

// Signal sends sig to the whole process group. It returns nil if the signal
// was delivered, ErrGroupGone when the group has no members left (ESRCH) or
// the Process was released, or another error from the kernel.
//
// PID reuse: the signal is sent through a pidfd of the leader, opened before
// the leader could be reaped (pidfd_send_signal with PIDFD_SIGNAL_PROCESS_GROUP,
// Linux 6.9+). The pidfd names the kernel's struct pid, not a number: once the
// group is empty the call answers ESRCH even if the number was given to
// someone else, so a signal never reaches a process that is not the command's.
// Without that kernel support it falls back to kill(-pgid): the pgid number
// cannot be reused while any member of the group is alive or an unreaped
// zombie, but once every member is gone an unrelated process that was given
// the number and leads a group of its own would be signalled; on such kernels
// callers should stop signalling once Terminate returned or ErrGroupGone was
// seen, and Release as soon as they are done.
//
// A process started with Spec.PTY is signalled as a session: every process group
// whose session id is Pid (see signalSession), so Terminate reaches the jobs of a shell.
func (p *Process) Signal(sig syscall.Signal) error {
	p.sigMu.Lock()
	defer p.sigMu.Unlock()
	if sig == syscall.SIGKILL {
		p.sentKill.Store(true)
	}
	return p.signalLocked(sig)
}

func (p *Process) signalLocked(sig syscall.Signal) error {
	if p.released {
		return ErrGroupGone
	}
	if p.PTY != nil {
		return p.signalSession(sig)
	}
	var err error
	if p.pidfd >= 0 && pidfdGroupSignals() {
		err = sendGroup(p.pidfd, sig)
	} else {
		err = unix.Kill(-p.Pid, sig)
	}
	switch err {
	case nil:
		return nil
	case unix.ESRCH:
		return ErrGroupGone
	default:
		return os.NewSyscallError("kill", err)
	}
}

// kill ends everything of the command at once: cgroup.kill (which also
// reaches processes that left the group with setsid) and SIGKILL to the group.
func (p *Process) kill() {
	p.sigMu.Lock()
	defer p.sigMu.Unlock()
	p.sentKill.Store(true)
	if p.cg != nil && !p.released && !p.cg.removed {
		if p.r != nil {
			p.r.cg.checkSelf() // never in the cgroup it is about to kill
		}
		if err := p.cg.kill(); err != nil && p.r != nil {
			p.r.log.Warn("cgroup.kill failed", zap.String("cgroup", p.cg.dir), zap.Error(err))
		}
	}
	_ = p.signalLocked(syscall.SIGKILL)
}

// gone reports whether nothing of the command is left to signal: the group
// is empty and, in cgroup mode, so is the command's cgroup (zombies that have
// not been reaped are still members).
func (p *Process) gone() bool {
	p.sigMu.Lock()
	defer p.sigMu.Unlock()
	if p.released {
		return true
	}
	if p.cg != nil && p.cg.populated() {
		return false
	}
	if p.PTY != nil {
		return p.sessionEmpty()
	}
	return p.signalLocked(0) == ErrGroupGone
}

// goneAtReap is gone for the leader's reap, the path of every command: the
// group (or session) is asked first, and the cgroup is not read but
// removed, when it can be: an rmdir that fails with EBUSY says it is
// populated. A command whose group is empty and whose cgroup is gone needs
// no Release of the cgroup later.
func (p *Process) goneAtReap() bool {
	p.sigMu.Lock()
	defer p.sigMu.Unlock()
	if p.released {
		return true
	}
	if p.PTY != nil {
		if !p.sessionEmpty() {
			return false
		}
	} else if p.signalLocked(0) != ErrGroupGone {
		return false
	}
	return p.cg == nil || p.cg.removeIfEmpty()
}

// groupEmpty is gone (kept for the Terminate loop's readability).
func (p *Process) groupEmpty() bool { return p.gone() }

// Release says that the caller is done signalling: the leader's pidfd is
// closed and the command's cgroup is removed (at once if it is empty, else as
// soon as its last member has gone; members are not signalled). Later Signal
// calls return ErrGroupGone. Call it after Done is closed and Terminate has
// returned; it is idempotent. The Reaper releases a process itself when its
// group is already empty at the leader's reap, and releases every reaped
// process on Close.
func (p *Process) Release() {
	p.sigMu.Lock()
	if !p.released {
		p.released = true
		if p.pidfd >= 0 {
			unix.Close(p.pidfd)
			p.pidfd = -1
		}
		if p.cg != nil && p.r != nil && p.r.cg != nil {
			p.r.cg.release(p.cg)
		}
	}
	p.sigMu.Unlock()
	if p.r != nil {
		p.r.procsMu.Lock()
		delete(p.r.held, p)
		p.r.procsMu.Unlock()
	}
}

// oomKilled decides ExitStatus.OOMKilled at the leader's reap.
func (p *Process) oomKilled(st ExitStatus) bool {
	if p.cg != nil {
		if n, ok := p.cg.oomKills(); ok {
			return n > 0
		}
	}
	return st.Signal == syscall.SIGKILL && !p.sentKill.Load() && p.oom.rose()
}

// releaseReaped releases every process whose leader has been reaped, and
// takes the cgroup tree down as far as it can (Close).
func (r *Reaper) releaseReaped() {
	r.procsMu.Lock()
	var ps []*Process
	for p := range r.held {
		select {
		case <-p.done:
			ps = append(ps, p)
		default:
		}
	}
	r.procsMu.Unlock()
	for _, p := range ps {
		p.Release()
	}
	if r.cg != nil {
		r.cg.remove()
	}
}

// commandCgroup creates the next command's cgroup (cgroup mode) and points
// sys at it (CLONE_INTO_CGROUP), so the child is in it from its first
// instruction. It returns the fd to close after the fork, or -1. Called with
// forkMu read-locked. A cgroup that cannot be created is logged and the
// command runs as a plain process group.
func (r *Reaper) commandCgroup(sys *syscall.SysProcAttr) (*cmdCgroup, int) {
	if r.cg == nil {
		return nil, -1
	}
	r.cg.checkSelf()
	cg, fd, err := r.cg.newCommand()
	if err != nil {
		r.log.Warn("cannot create the command's cgroup; running it as a process group only", zap.Error(err))
		return nil, -1
	}
	sys.UseCgroupFD, sys.CgroupFD = true, fd
	return cg, fd
}

// recoverFork looks at a fork into the command cgroup cg and, when that
// cgroup failed it, forks again (called with forkMu read-locked). Two
// failures are the cgroups' doing, not the command's:
//
//   - the kernel killed the child before it ran (killedAtFork): a
//     cgroup.kill was written, of the pool's parent (which dooms the
//     command cgroups made before it) or of the runtime's own leaf (which
//     dooms every child it clones into another cgroup);
//   - clone3 failed with ENOENT and cg is gone: a command sharing the
//     runtime's uid removed the pre-made cgroups.
//
// The first failure replaces the pool (every pre-made cgroup may share the
// fate of cg) and forks into a freshly made cgroup; only when that child
// is killed too was the runtime's own leaf killed, and the runtime moves
// into a fresh leaf before the last try. A command that never ran is never
// reported as exited: when the tries are used up, the *StartError says why
// (resource exhausted, 503) and nothing ran.
func (r *Reaper) recoverFork(path string, argv []string, attr *syscall.ProcAttr, pid int, err error, cg *cmdCgroup, cgfd int) (int, error, *cmdCgroup, int, *StartError) {
	refuse := func(why string) (int, error, *cmdCgroup, int, *StartError) {
		return 0, nil, nil, -1, &StartError{Op: "exec", Errno: unix.EAGAIN, Limit: why + "; nothing ran"}
	}
	relocated := false
	for try := 0; ; try++ {
		killed := err == nil && killedAtFork(pid)
		removed := !killed && err != nil && errnoOf(err) == unix.ENOENT && !fileExists(cg.dir)
		if !killed && !removed {
			return pid, err, cg, cgfd, nil
		}
		// A killed child is a zombie in cg, reaped as an orphan; cg goes
		// once it is empty.
		unix.Close(cgfd)
		r.cg.release(cg)
		cg, cgfd = nil, -1
		attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = false, 0
		switch {
		case try == 0 && killed:
			r.cg.replacePool("a command was killed by the kernel before it ran: a cgroup.kill of its pre-made cgroup's parent or of the runtime's leaf; a fresh cgroup tells which")
		case try == 0:
			r.cg.replacePool("a pre-made command cgroup was removed (by a command sharing the runtime's uid)")
		case killed && !relocated:
			if rerr := r.cg.relocate("a command was killed by the kernel before it ran in a fresh cgroup: the runtime's own cgroup was killed", true); rerr != nil {
				return refuse("the runtime's cgroup was killed and it could not move into a fresh one (" + rerr.Error() + ")")
			}
			relocated = true
		case killed:
			return refuse("every command is killed by the kernel before it runs, even from a fresh cgroup leaf: a command sharing the runtime's uid keeps writing cgroup.kill")
		default:
			return refuse("the command cgroups are removed as soon as they are made (by a command sharing the runtime's uid)")
		}
		pc, merr := r.cg.makeCgroup()
		if merr != nil && os.IsNotExist(merr) {
			// The commands' parent is gone too: made again.
			if r.cg.rebuild("the command cgroups' parent was removed") == nil {
				pc, merr = r.cg.makeCgroup()
			}
		}
		if merr != nil {
			return refuse("cannot make a fresh command cgroup in " + r.cg.commands + ": " + errnoOf(merr).Error())
		}
		cg, cgfd = &cmdCgroup{dir: pc.dir, mem: r.cg.memEvents.Load() == 1}, pc.fd
		attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, cgfd
		pid, err = syscall.ForkExec(path, argv, attr)
	}
}

// openPidfd opens a pidfd of a child that cannot have been reaped yet (the
// caller holds forkMu's read lock), or returns -1 where pidfds are missing.
func openPidfd(pid int) int {
	fd, err := unix.PidfdOpen(pid, 0) // pidfds are always close-on-exec
	if err != nil {
		return -1
	}
	return fd
}

// Terminate sends SIGTERM to the group, then SIGKILL to the group once grace has
// passed if it still has members, even when the leader already exited, so that
// grandchildren that ignore SIGTERM die too. It returns when SIGKILL was sent or the
// group was found empty (checked every 20 ms once the leader has been reaped). When
// ctx is done before grace has passed, SIGKILL is sent at once.
//
// In cgroup mode the SIGKILL is cgroup.kill as well, and "empty" means the
// command's cgroup too: processes that left the group (setsid) get no SIGTERM
// but are killed after the grace. Without a cgroup they are not reached.
func (p *Process) Terminate(ctx context.Context, grace time.Duration) {
	if errors.Is(p.Signal(syscall.SIGTERM), ErrGroupGone) && p.gone() {
		return
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	done := p.done
	var poll <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			p.kill()
			return
		case <-timer.C:
			p.kill()
			return
		case <-done:
			done = nil
			if p.groupEmpty() {
				return
			}
			t := time.NewTicker(groupPollInterval)
			defer t.Stop()
			poll = t.C
		case <-poll:
			if p.groupEmpty() {
				return
			}
		}
	}
}

// zombie reports whether the leader has exited and waits to be reaped:
// waitid(P_PID, WEXITED|WNOHANG|WNOWAIT) leaves it for the Reaper. The pid
// is the leader's while reaped is false (see Exited), or under collectMu.
func (p *Process) zombie() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, p.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil)
	// Linux zeroes info when nothing is waitable.
	return err == nil && info.Signo != 0
}
