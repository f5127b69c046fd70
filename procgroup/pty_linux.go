//go:build linux

package procgroup

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Terminals are opened with golang.org/x/sys/unix directly rather than with
// github.com/creack/pty: the package already owns x/sys and the fork, and
// creack/pty's Start wants an exec.Cmd, whose Wait would compete with the
// Reaper. What is needed is four ioctls: unlock, open the peer, set the size
// and set IUTF8.

// openPTY opens a new pseudo-terminal of size ws. The master is non-blocking
// (so reads and writes go through the runtime poller and Close interrupts
// them) and close-on-exec; the slave is blocking, close-on-exec (ForkExec
// dups it onto 0, 1 and 2) and not our controlling terminal.
func openPTY(ws Winsize) (master, slave *os.File, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("open /dev/ptmx", err)
	}
	master = os.NewFile(uintptr(mfd), "/dev/ptmx")
	fail := func(op string, err error) (*os.File, *os.File, error) {
		master.Close()
		if slave != nil {
			slave.Close()
		}
		return nil, nil, os.NewSyscallError(op, err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		return fail("unlockpt", err)
	}
	// TIOCGPTPEER (Linux 4.13) opens the slave without a path lookup, so a
	// different devpts mounted on /dev/pts cannot substitute another terminal.
	sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
		if err != nil {
			return fail("ptsname", err)
		}
		fd, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail("open slave", err)
		}
		sfd = uintptr(fd)
	}
	slave = os.NewFile(sfd, "pts")
	if err := unix.IoctlSetWinsize(int(sfd), unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols}); err != nil {
		return fail("set window size", err)
	}
	// IUTF8 lets the line discipline erase a whole UTF-8 character on
	// backspace; everything else keeps the kernel's defaults (a "sane" tty).
	t, err := unix.IoctlGetTermios(int(sfd), unix.TCGETS)
	if err != nil {
		return fail("tcgetattr", err)
	}
	t.Iflag |= unix.IUTF8
	if err := unix.IoctlSetTermios(int(sfd), unix.TCSETS, t); err != nil {
		return fail("tcsetattr", err)
	}
	return master, slave, nil
}

// idOf returns the device and inode of an open file (zero on error).
func idOf(f *os.File) fileID {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileID{}
	}
	return fileID{dev: st.Dev, ino: st.Ino, rdev: st.Rdev}
}

// Resize sets the terminal's size; the kernel sends SIGWINCH to the
// terminal's foreground process group when the size changes. ErrNotPTY
// without a terminal; an error once the master is closed.
func (p *Process) Resize(ws Winsize) error {
	if p.PTY == nil {
		return ErrNotPTY
	}
	var err error
	cerr := p.withMaster(func(fd int) {
		err = unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols})
	})
	if cerr != nil {
		return cerr
	}
	return os.NewSyscallError("TIOCSWINSZ", err)
}

// Size returns the terminal's size as the kernel has it now: the last
// Resize, or what the program set itself (stty cols 50). ErrNotPTY without
// a terminal; an error once the master is closed.
func (p *Process) Size() (Winsize, error) {
	if p.PTY == nil {
		return Winsize{}, ErrNotPTY
	}
	var ws *unix.Winsize
	var err error
	if cerr := p.withMaster(func(fd int) { ws, err = unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ) }); cerr != nil {
		return Winsize{}, cerr
	}
	if err != nil {
		return Winsize{}, os.NewSyscallError("TIOCGWINSZ", err)
	}
	return Winsize{Cols: ws.Col, Rows: ws.Row}, nil
}

// TerminalEOF returns the terminal's end-of-file character (VEOF, normally
// Ctrl-D) and whether the line discipline is in canonical mode, where VEOF
// means end of file (in raw mode it is a byte like any other).
func (p *Process) TerminalEOF() (veof byte, canonical bool, err error) {
	if p.PTY == nil {
		return 0, false, ErrNotPTY
	}
	var t *unix.Termios
	cerr := p.withMaster(func(fd int) { t, err = unix.IoctlGetTermios(fd, unix.TCGETS) })
	if cerr != nil {
		return 0, false, cerr
	}
	if err != nil {
		return 0, false, os.NewSyscallError("tcgetattr", err)
	}
	return t.Cc[unix.VEOF], t.Lflag&unix.ICANON != 0, nil
}

// withMaster runs f with the master's descriptor, which stays open meanwhile
// even if another goroutine closes the file.
func (p *Process) withMaster(f func(fd int)) error {
	rc, err := p.PTY.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { f(int(fd)) })
}

// foregroundGroup returns the terminal's foreground process group, or 0.
func (p *Process) foregroundGroup() int {
	pgrp := 0
	p.withMaster(func(fd int) {
		if n, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil {
			pgrp = n
		}
	})
	return pgrp
}

// ptyProcStat is what the package reads from /proc/<pid>/stat.
type ptyProcStat struct {
	state      byte
	pgrp, sess int
	tty        uint64 // tty_nr: the controlling terminal's device number, 0 for none
}

// readStat parses /proc/<pid>/stat; ok is false when the process is gone.
// It reads into a stack buffer with raw system calls: a WaitingForInput or
// session scan calls it for every process of the system.
func readStat(pid int) (ptyProcStat, bool) {
	var path [32]byte
	p := append(append(append(path[:0], "/proc/"...), strconv.Itoa(pid)...), "/stat"...)
	fd, err := unix.Open(string(p), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ptyProcStat{}, false
	}
	var buf [1024]byte // the fields we need come well before the end
	n, err := unix.Read(fd, buf[:])
	unix.Close(fd)
	if err != nil || n <= 0 {
		return ptyProcStat{}, false
	}
	b := buf[:n]
	// "pid (comm) state ppid pgrp session ...": comm may hold anything but
	// ends at the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ptyProcStat{}, false
	}
	var f [5][]byte
	rest := b[i+1:]
	for k := range f {
		rest = bytes.TrimLeft(rest, " ")
		j := bytes.IndexByte(rest, ' ')
		if j < 0 {
			return ptyProcStat{}, false
		}
		f[k], rest = rest[:j], rest[j:]
	}
	if len(f[0]) != 1 {
		return ptyProcStat{}, false
	}
	pgrp, ok1 := atoi(f[2])
	sess, ok2 := atoi(f[3])
	tty, ok3 := atoi(f[4])
	if !ok1 || !ok2 || !ok3 {
		return ptyProcStat{}, false
	}
	return ptyProcStat{state: f[0][0], pgrp: pgrp, sess: sess, tty: uint64(tty)}, true
}

// atoi parses a non-negative decimal without allocating.
func atoi(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// eachProcess calls f for every process of the system with its stat, until f
// returns false.
func eachProcess(f func(pid int, st ptyProcStat) bool) {
	d, err := os.Open("/proc")
	if err != nil {
		return
	}
	defer d.Close()
	for {
		names, err := d.Readdirnames(256)
		for _, n := range names {
			pid, err := strconv.Atoi(n)
			if err != nil || pid <= 0 {
				continue
			}
			if st, ok := readStat(pid); ok && !f(pid, st) {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// signalSession sends sig to every process group of the terminal's session
// (sid == Pid): the leader's group first, so that a shell cannot start a new
// job meanwhile, then the foreground job and any background job. It returns
// ErrGroupGone when nothing was signalled.
//
// PID reuse: a session id, like a pgid, stays reserved while any member is
// alive or an unreaped zombie, so a process found with sess == Pid is ours;
// the window between the scan and the kill is the one described at Signal.
// Members that called setsid themselves have left the session and are not
// reached.
func (p *Process) signalSession(sig syscall.Signal) error {
	reached := false
	var ferr error
	kill := func(pgrp int) {
		switch err := unix.Kill(-pgrp, sig); err {
		case nil:
			reached = true
		case unix.ESRCH:
		default:
			if ferr == nil {
				ferr = os.NewSyscallError("kill", err)
			}
		}
	}
	kill(p.Pid)
	done := map[int]bool{p.Pid: true}
	eachProcess(func(_ int, st ptyProcStat) bool {
		if st.sess == p.Pid && !done[st.pgrp] {
			done[st.pgrp] = true
			kill(st.pgrp)
		}
		return true
	})
	switch {
	case reached:
		return nil
	case ferr != nil:
		return ferr
	}
	return ErrGroupGone
}

// sessionEmpty reports whether the terminal's session has no member left
// (unreaped zombies are members).
func (p *Process) sessionEmpty() bool {
	if unix.Kill(-p.Pid, 0) != unix.ESRCH {
		return false
	}
	empty := true
	eachProcess(func(_ int, st ptyProcStat) bool {
		if st.sess == p.Pid {
			empty = false
		}
		return empty
	})
	return empty
}

// WaitingForInput reports whether the command looks blocked reading its
// input: for a terminal, a member of the terminal's foreground process
// group; for a stdin pipe, a member of the command's process group; asleep
// (state S) in read, readv, select, pselect6, poll or ppoll on a descriptor
// that is the terminal or the pipe (as /proc/<pid>/syscall, /proc/<pid>/fd
// and, for the select and poll sets, /proc/<pid>/mem show it).
//
// It is a heuristic, true only at the instant of the look: a program that
// waits in epoll, io_uring or on another descriptor (a socket, a second
// pipe) reads false; a program that is between two reads reads false; a
// program polling its input with a timeout while it works reads true during
// each poll. Threads other than each process's main thread are not looked
// at. It is false for a process started without PTY or Stdin, and whenever
// /proc cannot be read (/proc/<pid>/syscall and mem need ptrace read access,
// which a parent has to its children unless Yama's ptrace_scope is 2 or 3).
func (p *Process) WaitingForInput() bool {
	if p.input == (fileID{}) || p.Exited() {
		return false
	}
	pgrp := p.Pid
	if p.PTY != nil {
		if pgrp = p.foregroundGroup(); pgrp <= 0 {
			return false
		}
	}
	// The common case, the group's leader reading the input itself, needs no
	// look at the other processes.
	if st, ok := readStat(pgrp); ok && st.pgrp == pgrp && p.readsInput(pgrp, st) {
		return true
	}
	for _, pid := range p.groupMembers(pgrp) {
		if st, ok := readStat(pid); ok && pid != pgrp && st.pgrp == pgrp && p.readsInput(pid, st) {
			return true
		}
	}
	return false
}

// groupMembers lists the processes that may be in process group pgrp, a
// group of p's: with a cgroup of its own, the processes of that cgroup
// (cgroup.procs: the command's own, whatever else runs on the host);
// otherwise the members the shared process index knows. The caller checks
// each one's stat again.
func (p *Process) groupMembers(pgrp int) []int {
	p.sigMu.Lock()
	dir := ""
	if p.cg != nil {
		dir = p.cg.dir
	}
	p.sigMu.Unlock()
	if dir != "" {
		if pids, ok := readPids(dir + "/cgroup.procs"); ok {
			return pids
		}
	}
	return processes.members(pgrp)
}

// maxCgroupProcs bounds what groupMembers reads of a cgroup.procs.
const maxCgroupProcs = 1 << 16

// readPids reads a cgroup.procs file: one pid a line, at most
// maxCgroupProcs of them.
func readPids(path string) ([]int, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCgroupProcs*8))
	if err != nil {
		return nil, false
	}
	var pids []int
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		if pid, ok := atoi(line); ok && pid > 0 && len(pids) < maxCgroupProcs {
			pids = append(pids, pid)
		}
	}
	return pids, true
}

// Process index limits.
const (
	// indexMaxAge is how long a scan of /proc answers group membership: a
	// status or a list of many commands costs at most one scan per period,
	// however many commands or processes there are. A process that joined
	// a group since the scan is missed for at most that long.
	indexMaxAge = 250 * time.Millisecond
	// indexMaxProcs bounds the processes one scan records.
	indexMaxProcs = 1 << 16
)

// processIndex maps process groups to their members from one scan of
// /proc, shared by every command without a cgroup of its own.
type processIndex struct {
	mu      sync.Mutex // guards the fields; held during a rebuild, so callers share one scan
	at      time.Time
	byGroup map[int][]int
	scans   int // how many scans of /proc it made (for tests)
}

var processes processIndex

// members returns the pids the index has in group pgrp, scanning /proc
// first when the last scan is older than indexMaxAge.
func (x *processIndex) members(pgrp int) []int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.byGroup == nil || time.Since(x.at) > indexMaxAge {
		m := make(map[int][]int, len(x.byGroup))
		n := 0
		eachProcess(func(pid int, st ptyProcStat) bool {
			m[st.pgrp] = append(m[st.pgrp], pid)
			n++
			return n < indexMaxProcs
		})
		x.byGroup, x.at = m, time.Now()
		x.scans++
	}
	return slices.Clone(x.byGroup[pgrp])
}

// devTTY is the device number of /dev/tty (5:0), which stands for the
// opener's controlling terminal.
var devTTY = unix.Mkdev(5, 0)

// readsInput reports whether pid sleeps in a read or wait for input on p's
// terminal or stdin pipe. For a terminal, /dev/tty counts when pid's
// controlling terminal is ours: getpass, sudo, ssh and passwd read their
// password there rather than from fd 0.
func (p *Process) readsInput(pid int, st ptyProcStat) bool {
	if st.state != 'S' {
		return false
	}
	// The controlling terminal of pid is ours (tty_nr is the slave's device
	// number in the kernel's encoding, the same as stat's st_rdev).
	ctty := p.PTY != nil && p.input.rdev != 0 && st.tty == p.input.rdev
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/syscall")
	if err != nil {
		return false
	}
	// "nr arg0 … arg5 sp pc", numbers in decimal (nr) and hex (args); or
	// "running", or "-1 sp pc" when not in a system call.
	f := bytes.Fields(b)
	if len(f) < 7 {
		return false
	}
	nr, err := strconv.ParseInt(string(f[0]), 10, 64)
	if err != nil {
		return false
	}
	var args [6]uint64
	for i := range args {
		if args[i], err = strconv.ParseUint(string(bytes.TrimPrefix(f[i+1], []byte("0x"))), 16, 64); err != nil {
			return false
		}
	}
	isInput := func(fd uint64) bool {
		var st unix.Stat_t
		if fd > 1<<20 || unix.Stat(dir+"/fd/"+strconv.FormatUint(fd, 10), &st) != nil {
			return false
		}
		if st.Dev == p.input.dev && st.Ino == p.input.ino {
			return true
		}
		return ctty && st.Rdev == devTTY
	}
	switch {
	case nr == unix.SYS_READ || nr == unix.SYS_READV:
		return isInput(args[0])
	case nr == unix.SYS_PSELECT6 || nr == sysSelect:
		// (nfds, readfds, …): look for one of our descriptors in the read set.
		nfds, addr := args[0], args[1]
		if addr == 0 || nfds == 0 || nfds > 1024 {
			return false
		}
		// fd_set is an array of 64-bit longs; bit fd%64 of long fd/64.
		set := make([]byte, (nfds+63)/64*8)
		if !readMem(dir, addr, set) {
			return false
		}
		for fd := uint64(0); fd < nfds; fd++ {
			if binary.NativeEndian.Uint64(set[fd/64*8:])>>(fd%64)&1 != 0 && isInput(fd) {
				return true
			}
		}
	case nr == unix.SYS_PPOLL || nr == sysPoll:
		// (fds, nfds, …): struct pollfd { int fd; short events, revents; }.
		addr, nfds := args[0], args[1]
		if addr == 0 || nfds == 0 || nfds > 1024 {
			return false
		}
		fds := make([]byte, nfds*8)
		if !readMem(dir, addr, fds) {
			return false
		}
		for i := uint64(0); i < nfds; i++ {
			e := fds[i*8:]
			fd := int32(binary.NativeEndian.Uint32(e))
			events := binary.NativeEndian.Uint16(e[4:])
			if fd >= 0 && events&(unix.POLLIN|unix.POLLPRI) != 0 && isInput(uint64(fd)) {
				return true
			}
		}
	}
	return false
}

// readMem reads len(dst) bytes of the process's memory at addr.
func readMem(dir string, addr uint64, dst []byte) bool {
	f, err := os.Open(dir + "/mem")
	if err != nil {
		return false
	}
	defer f.Close()
	n, err := f.ReadAt(dst, int64(addr))
	return err == nil && n == len(dst)
}

// maxCanonLine is the longest line the kernel's canonical line discipline
// keeps (N_TTY_BUF_SIZE - 1); what comes after is dropped by the kernel too.
const maxCanonLine = 4095

// InputLine follows the line that the terminal's line discipline is
// editing: the bytes typed since the last end of line that a canonical
// read has not been given yet, and the evidence that the kernel still holds
// them as a partial line.
//
// The kernel does not tell (TIOCINQ, FIONREAD and poll count complete lines
// only in canonical mode), so TrackInput replays what the line discipline
// does with each byte under the terminal's termios at that write: erase
// (VERASE, with IUTF8 a whole character, never part of one), word erase
// (VWERASE, with the kernel's ctype), kill (VKILL), literal next (VLNEXT),
// reprint (VREPRINT, with ECHO), the ends of line (\n, VEOL, VEOL2, VEOF),
// the input maps (IGNCR, ICRNL, INLCR, ISTRIP), start/stop (IXON) and the
// signal characters, which flush the line unless NOFLSH.
//
// The replay cannot see what the program does between two writes: a read
// in non-canonical mode takes bytes of the line (read -n 1), and switching
// ICANON on makes whatever is left a complete line (n_tty_set_termios), so
// a line the replay holds may be gone. What the kernel does let one see is
// a reader: a process of the terminal's foreground group asleep reading the
// terminal, which a canonical read of a partial line leaves asleep, and
// which any termios change wakes (n_tty_set_termios wakes the read queue).
// So the replay also records, when a line begins, which foreground process
// was asleep reading the terminal and its context-switch count; a line is
// certainly pending only if that process is still asleep reading it with
// the same count (it has not run since: nobody read the line or switched
// the mode) and the slave's TIOCINQ is 0 (no complete line waits either).
// The zero value is an empty line. One goroutine (the terminal's writer)
// owns it.
type InputLine struct {
	buf    []byte
	lnext  bool       // the last byte was VLNEXT: the next is taken literally
	reader readerMark // the reader asleep since the line began; zero when none was
}

// readerMark is a process asleep reading the terminal, and how many times
// it had been switched out (voluntary and not) at the look.
type readerMark struct {
	pid      int
	switches uint64
}

// Pending reports whether the replay holds a line being edited (VEOF would
// end that line rather than read as end of file, if the program has not
// taken it meanwhile: see EOFSequence).
func (l *InputLine) Pending() bool { return len(l.buf) > 0 }

// TrackInput updates l for data, which the caller is about to write to the
// terminal, under the terminal's termios now. It changes nothing when the
// termios cannot be read (the terminal is closing).
func (p *Process) TrackInput(l *InputLine, data []byte) {
	t, err := p.termios()
	if err != nil {
		return
	}
	if t.Lflag&unix.ICANON != 0 && !l.Pending() && !l.lnext {
		// A line may begin in data: note who is asleep reading before it.
		l.reader = p.sleepingReader()
	}
	l.apply(t, data)
}

// EOFSequence returns what the caller writes to the terminal for an eof,
// given l, and resets l. It is VEOF once, unless the evidence says a partial
// line is certainly pending, when it is VEOF twice (the first ends that
// line, the second reads as end of file): the terminal is canonical, the
// replay holds a line, the process that was asleep reading the terminal
// when that line began is asleep reading it still and has not run since,
// and the slave holds no complete line (TIOCINQ 0). Never more: a VEOF that
// was not needed reads as end of file to the next reader, while one too few
// only needs another eof. ErrNoVEOF when the program has disabled VEOF.
func (p *Process) EOFSequence(l *InputLine) ([]byte, error) {
	t, err := p.termios()
	if err != nil {
		return nil, err
	}
	veof := t.Cc[unix.VEOF]
	if veof == 0 {
		return nil, ErrNoVEOF
	}
	seq := []byte{veof}
	if t.Lflag&unix.ICANON != 0 && l.Pending() && l.reader.pid > 0 &&
		p.sleepingReaderIs(l.reader) && p.slaveInq() == 0 {
		seq = append(seq, veof)
	}
	l.buf, l.lnext, l.reader = l.buf[:0], false, readerMark{}
	return seq, nil
}

// sleepingReader returns the first process of the terminal's foreground
// group found asleep reading the terminal, or the zero mark.
func (p *Process) sleepingReader() readerMark {
	pgrp := p.foregroundGroup()
	if pgrp <= 0 {
		return readerMark{}
	}
	look := func(pid int) (readerMark, bool) {
		n1, ok := contextSwitches(pid)
		if !ok {
			return readerMark{}, false
		}
		st, ok := readStat(pid)
		if !ok || st.pgrp != pgrp || !p.readsInput(pid, st) {
			return readerMark{}, false
		}
		// Read the count again: equal on both sides of the look, the
		// process slept through it.
		if n2, ok := contextSwitches(pid); !ok || n2 != n1 {
			return readerMark{}, false
		}
		return readerMark{pid: pid, switches: n1}, true
	}
	if m, ok := look(pgrp); ok {
		return m
	}
	for _, pid := range p.groupMembers(pgrp) {
		if pid == pgrp {
			continue
		}
		if m, ok := look(pid); ok {
			return m
		}
	}
	return readerMark{}
}

// sleepingReaderIs reports whether m's process is still in the foreground
// group, asleep reading the terminal, and has not been switched out since m
// was taken (so it has not woken: a termios change, a line or a signal
// would have woken it).
func (p *Process) sleepingReaderIs(m readerMark) bool {
	pgrp := p.foregroundGroup()
	n, ok := contextSwitches(m.pid)
	if !ok || n != m.switches || pgrp <= 0 {
		return false
	}
	st, ok := readStat(m.pid)
	if !ok || st.pgrp != pgrp || !p.readsInput(m.pid, st) {
		return false
	}
	n, ok = contextSwitches(m.pid)
	return ok && n == m.switches
}

// contextSwitches returns voluntary_ctxt_switches plus
// nonvoluntary_ctxt_switches of pid's main thread (/proc/<pid>/status).
func contextSwitches(pid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	var sum uint64
	found := 0
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		for _, key := range []string{"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"} {
			if v, ok := bytes.CutPrefix(line, []byte(key)); ok {
				n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
				if err != nil {
					return 0, false
				}
				sum += n
				found++
			}
		}
	}
	return sum, found == 2
}

// slaveInq returns the slave's TIOCINQ (in canonical mode: the bytes of
// complete lines not read yet), through a peer descriptor opened for the
// look and closed at once; -1 when it cannot be read.
func (p *Process) slaveInq() int {
	n := -1
	p.withMaster(func(fd int) {
		sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCGPTPEER, uintptr(unix.O_RDONLY|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK))
		if errno != 0 {
			return
		}
		if v, err := unix.IoctlGetInt(int(sfd), unix.TIOCINQ); err == nil {
			n = v
		}
		unix.Close(int(sfd))
	})
	return n
}

func (p *Process) termios() (*unix.Termios, error) {
	if p.PTY == nil {
		return nil, ErrNotPTY
	}
	var t *unix.Termios
	var err error
	if cerr := p.withMaster(func(fd int) { t, err = unix.IoctlGetTermios(fd, unix.TCGETS) }); cerr != nil {
		return nil, cerr
	}
	if err != nil {
		return nil, os.NewSyscallError("tcgetattr", err)
	}
	return t, nil
}

// apply is the line discipline's input processing of data under t, as far
// as the pending line is concerned (drivers/tty/n_tty.c). Whatever wakes a
// reader (an end of line, a signal character, a byte in non-canonical
// mode) also drops the reader mark: the line after it began with nobody
// known asleep.
func (l *InputLine) apply(t *unix.Termios, data []byte) {
	cc := func(i int) int { // a special character, -1 when disabled
		if c := t.Cc[i]; c != 0 {
			return int(c)
		}
		return -1
	}
	isig, icanon, iexten := t.Lflag&unix.ISIG != 0, t.Lflag&unix.ICANON != 0, t.Lflag&unix.IEXTEN != 0
	echo, iutf8 := t.Lflag&unix.ECHO != 0, t.Iflag&unix.IUTF8 != 0
	for _, b := range data {
		if t.Iflag&unix.ISTRIP != 0 {
			b &= 0x7f
		}
		if !icanon {
			l.buf, l.lnext, l.reader = l.buf[:0], false, readerMark{}
			continue
		}
		if l.lnext { // n_tty_receive_char_lnext: before the input maps
			l.lnext = false
			l.add(b)
			continue
		}
		switch {
		case b == '\r' && t.Iflag&unix.IGNCR != 0:
			continue
		case b == '\r' && t.Iflag&unix.ICRNL != 0:
			b = '\n'
		case b == '\n' && t.Iflag&unix.INLCR != 0:
			b = '\r'
		}
		c := int(b)
		switch {
		case isig && (c == cc(unix.VINTR) || c == cc(unix.VQUIT) || c == cc(unix.VSUSP)):
			if t.Lflag&unix.NOFLSH == 0 {
				l.buf = l.buf[:0]
			}
			l.reader = readerMark{}
		case t.Iflag&unix.IXON != 0 && (c == cc(unix.VSTART) || c == cc(unix.VSTOP)):
		case c == cc(unix.VERASE):
			l.erase(eraseChar, iutf8, echo, t.Lflag)
		case c == cc(unix.VKILL):
			l.erase(eraseLine, iutf8, echo, t.Lflag)
		case iexten && c == cc(unix.VWERASE):
			l.erase(eraseWord, iutf8, echo, t.Lflag)
		case iexten && c == cc(unix.VLNEXT):
			l.lnext = true
		case iexten && echo && c == cc(unix.VREPRINT):
		case c == '\n' || c == cc(unix.VEOF) || c == cc(unix.VEOL) || iexten && c == cc(unix.VEOL2):
			l.buf = l.buf[:0]
			l.reader = readerMark{}
		default:
			l.add(b)
		}
	}
}

func (l *InputLine) add(b byte) {
	if len(l.buf) < maxCanonLine {
		l.buf = append(l.buf, b)
	}
}

// What an erase character erases.
const (
	eraseChar = iota // VERASE
	eraseWord        // VWERASE
	eraseLine        // VKILL
)

// erase is n_tty's eraser: from the end, one character at a time (with
// IUTF8 a lead byte and its continuation bytes, and never continuation
// bytes alone: the kernel refuses a partial erase), until one character for
// VERASE; blanks and punctuation then the alphanumerics before them (the
// kernel's isalnum, which takes Latin-1 letters, so most UTF-8 lead bytes)
// for VWERASE; the line for VKILL, which without ECHO, ECHOK, ECHOKE or
// ECHOE empties the line at once.
func (l *InputLine) erase(kind int, iutf8, echo bool, lflag uint32) {
	if kind == eraseLine && (!echo || lflag&unix.ECHOK == 0 || lflag&unix.ECHOKE == 0 || lflag&unix.ECHOE == 0) {
		l.buf = l.buf[:0]
		return
	}
	cont := func(b byte) bool { return iutf8 && b&0xc0 == 0x80 }
	seen := false
	for len(l.buf) > 0 {
		i := len(l.buf) - 1
		for i > 0 && cont(l.buf[i]) {
			i--
		}
		c := l.buf[i]
		if cont(c) {
			return
		}
		if kind == eraseWord {
			if kernelAlnum(c) || c == '_' {
				seen = true
			} else if seen {
				return
			}
		}
		l.buf = l.buf[:i]
		if kind == eraseChar {
			return
		}
	}
}

// kernelAlnum is the kernel's isalnum (lib/ctype.c): ASCII letters and
// digits, and the Latin-1 letters 0xc0-0xff but for 0xd7 and 0xf7.
func kernelAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' ||
		c >= 0xc0 && c != 0xd7 && c != 0xf7
}
