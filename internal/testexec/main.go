// Command testexec runs a program, a test binary under `go test -exec` or a
// whole CI stage, so that no process it starts outlives it:
//
//	testexec [-label NAME] [-leaks fail|warn] [--] PROG [ARGS...]
//
// Where Linux lets it create namespaces (root, CAP_SYS_ADMIN), PROG runs
// as the only child of an init in a new PID namespace with a private mount
// namespace and a /proc of its own (so the /proc/<pid> lookups of the code
// under test stay right). The init reaps orphans, forwards signals to PROG
// and exits with PROG's status; testexec holds the init with Pdeathsig
// SIGKILL from a thread locked for its whole life, so whatever kills
// testexec (a `go test -timeout`, a CI time limit, kill -9) kills the init,
// and the kernel then kills every process of the namespace: setsid'd,
// double-forked and daemonised ones included.
//
// Elsewhere (a non-root developer, a container without CAP_SYS_ADMIN) it
// says so in one line and falls back to being a child subreaper: orphans
// of PROG's tree become its children, and it kills them once PROG exits.
// There a SIGKILL of testexec itself leaves the tree running.
//
// When PROG exits, every process of its tree still alive after a grace of
// leakGrace (the namespace's processes, or the subreaper's descendants) has
// outlived it: testexec lists them on stderr (and appends the list to the
// file $TESTEXEC_REPORT when set), kills them (the init: with kill(-1),
// which reaches its namespace only, until it has no child left; the
// subreaper: by PID), and with -leaks fail (the default) exits 1 if PROG
// had succeeded. Both judge through a /proc directory fd opened before
// PROG starts and checked to be their PID namespace's, never through the
// /proc path: a test that mounts over /proc (another namespace's proc
// hides its processes) or unmounts it (the host's proc shows through)
// changes nothing testexec sees, and no other namespace's process is
// ever listed. (A plain umount of the init's /proc now fails with EBUSY.) The outermost testexec also
// sets TESTEXEC_RUN to a fresh marker, which every process of the run
// inherits unless it clears its environment, and after PROG's tree is gone
// it reports and kills any process still carrying the marker (one that
// escaped both nets).
//
// TESTEXEC_MODE=subreaper forces the fallback; TESTEXEC_MODE=ns refuses it
// (exit 125 when no namespace can be made). The Makefile builds testexec
// into bin/ and runs `go test -exec bin/testexec`; .ci/run runs its test
// stages under it.
package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	initArg   = "-testexec-init" // argv[1] of the namespace's init (this binary again)
	markEnv   = "TESTEXEC_RUN"
	modeEnv   = "TESTEXEC_MODE"
	reportEnv = "TESTEXEC_REPORT"

	// leakGrace is how long processes of the tree may take to end by
	// themselves after PROG exited (a -race child sleeps 1 s at exit).
	leakGrace = 3 * time.Second
	// killBudget bounds the kill-and-reap of what is left.
	killBudget = 10 * time.Second
	// maxListed caps the processes named in a report.
	maxListed = 50
)

// forwarded are the signals passed on to PROG (SIGQUIT: go test's timeout
// asks the test binary for its goroutines so).
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2}

type options struct {
	label string
	fail  bool // -leaks fail
	argv  []string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == initArg {
		o, err := parse(os.Args[2:])
		if err != nil {
			fmt.Fprintln(os.Stderr, "testexec init:", err)
			os.Exit(125)
		}
		os.Exit(nsInit(o))
	}
	o, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "testexec:", err)
		os.Exit(125)
	}
	os.Exit(run(o))
}

func parse(args []string) (options, error) {
	fs := flag.NewFlagSet("testexec", flag.ContinueOnError)
	label := fs.String("label", "", "name of PROG in reports (default: its base name)")
	leaks := fs.String("leaks", "fail", "what processes that outlive PROG do to the exit status: fail or warn")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() == 0 {
		return options{}, errors.New("usage: testexec [-label NAME] [-leaks fail|warn] [--] PROG [ARGS...]")
	}
	if *leaks != "fail" && *leaks != "warn" {
		return options{}, fmt.Errorf("-leaks %q: want fail or warn", *leaks)
	}
	o := options{label: *label, fail: *leaks == "fail", argv: fs.Args()}
	if o.label == "" {
		o.label = filepath.Base(o.argv[0])
	}
	return o, nil
}

// run is the outer testexec: PROG in a namespace, or under the subreaper.
func run(o options) int {
	mark, outermost := os.Getenv(markEnv), false
	if mark == "" {
		var b [8]byte
		rand.Read(b[:])
		mark, outermost = hex.EncodeToString(b[:]), true
		os.Setenv(markEnv, mark)
	}
	// The proc of the namespace testexec runs in, opened before anything
	// runs: a stage that (as root, in this mount namespace) mounts over
	// /proc cannot hide its processes from the marker scan, or from the
	// subreaper's.
	pd, err := openProc("/proc")
	if err != nil {
		fmt.Fprintf(os.Stderr, "testexec: %s: %v\n", o.label, err)
		return 125
	}
	code, leaked := -1, false
	mode := os.Getenv(modeEnv)
	if mode != "subreaper" {
		var err error
		code, err = runInNamespace(o)
		if err != nil {
			if mode == "ns" {
				fmt.Fprintf(os.Stderr, "testexec: %s: no PID namespace: %v\n", o.label, err)
				return 125
			}
			fmt.Fprintf(os.Stderr, "testexec: %s: no PID namespace (%v): a subreaper kills what it leaves at exit, but not if testexec is SIGKILLed\n", o.label, err)
			code = -1
		}
	}
	if code < 0 {
		code, leaked = supervise(o, pd, false, nil)
	}
	if outermost {
		// Anything still carrying the run's marker escaped both nets.
		marked := func() []proc {
			return filter(pd.scan(), func(p proc) bool { return p.pid != os.Getpid() && pd.hasEnv(p, markEnv, mark) })
		}
		if left := waitLeftovers(marked, leakGrace); len(left) > 0 {
			report(pd, o.label, "carry "+markEnv+" of this run", left)
			killAll(pd, marked, false)
			leaked = true
		}
	}
	if leaked && o.fail && code == 0 {
		code = 1
	}
	return code
}

// runInNamespace runs PROG under an init in new PID and mount namespaces
// and returns the init's exit code. An error says no namespace could be
// made (and nothing ran).
func runInNamespace(o options) (int, error) {
	// Pdeathsig fires when the thread that forked the init exits: this
	// goroutine keeps its thread until the process ends.
	runtime.LockOSThread()
	self, err := os.Executable()
	if err != nil {
		return -1, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	defer pr.Close()
	leaks := "warn"
	if o.fail {
		leaks = "fail"
	}
	cmd := exec.Command(self, append([]string{initArg, "-label", o.label, "-leaks", leaks, "--"}, o.argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{pw} // fd 3: the init's "ok" or why not
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		Pdeathsig:  syscall.SIGKILL,
	}
	// Signals that arrive before the init is ready are held, then passed on.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return -1, err
	}
	line, _ := bufio.NewReader(pr).ReadString('\n')
	if line != "ok\n" {
		cmd.Wait()
		if line == "" {
			line = "the namespace's init exited before setting up"
		}
		return -1, errors.New(strings.TrimSpace(line))
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	return exitCode(cmd.ProcessState, err), nil
}

func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		fmt.Fprintln(os.Stderr, "testexec:", err)
		return 125
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// nsInit is PID 1 of the new namespaces: a private mount tree with a /proc
// of this PID namespace, then PROG supervised until the namespace is empty.
func nsInit(o options) int {
	status := os.NewFile(3, "status")
	fail := func(what string, err error) int {
		fmt.Fprintf(status, "%s: %v\n", what, err)
		return 125
	}
	if os.Getpid() != 1 {
		return fail("init", fmt.Errorf("pid %d, not 1", os.Getpid()))
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fail("making the mount tree private", err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fail("mounting /proc", err)
	}
	// Judged through this fd, not the /proc path: a test may mount over
	// /proc (hiding its processes) or unmount it (exposing the host's).
	pd, err := openProc("/proc")
	if err != nil {
		return fail("opening /proc", err)
	}
	code, leaked := supervise(o, pd, true, func() error {
		// With the signal handlers in place (PID 1 ignores what it does
		// not handle). A write error means testexec is gone already (it
		// died before Pdeathsig was armed, which Go cannot check in a new
		// PID namespace, where the parent's pid reads as 0): run nothing.
		_, err := status.WriteString("ok\n")
		status.Close()
		return err
	})
	if leaked && o.fail && code == 0 {
		code = 1
	}
	return code
}

// supervise starts PROG, passes signals on, reaps every child until PROG
// exits, then reports and kills what of its tree is left: in the namespace
// (inNS) every process but this one, else this subreaper's descendants.
//
// ready, when not nil, is called once signals are being caught, before
// PROG starts; an error from it ends supervise with nothing run.
func supervise(o options, pd procDir, inNS bool, ready func() error) (code int, leaked bool) {
	if !inNS {
		if err := prctl(pr_SET_CHILD_SUBREAPER, 1); err != nil {
			fmt.Fprintf(os.Stderr, "testexec: %s: cannot be a subreaper (%v): orphans escape\n", o.label, err)
		}
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	if ready != nil {
		if err := ready(); err != nil {
			return 125, false
		}
	}
	path, err := exec.LookPath(o.argv[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "testexec:", err)
		return 127, false
	}
	p, err := os.StartProcess(path, o.argv, &os.ProcAttr{Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "testexec:", err)
		return 127, false
	}
	var mu sync.Mutex // guards exited, so no signal goes to a reused pid
	exited := false
	go func() {
		for s := range sigs {
			mu.Lock()
			if !exited {
				syscall.Kill(p.Pid, s.(syscall.Signal))
			}
			mu.Unlock()
		}
	}()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil { // ECHILD: cannot happen while PROG lives
			fmt.Fprintln(os.Stderr, "testexec: wait4:", err)
			return 125, false
		}
		if pid == p.Pid {
			mu.Lock()
			exited = true
			mu.Unlock()
			code = ws.ExitStatus()
			if ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
			break
		}
	}
	self := os.Getpid()
	tree := func() []proc {
		all := pd.scan()
		if inNS {
			return filter(all, func(p proc) bool { return p.pid != self })
		}
		return descendants(all, self)
	}
	if left := waitLeftovers(tree, leakGrace); len(left) > 0 {
		report(pd, o.label, "outlived it", left)
		leaked = true
	}
	if inNS {
		endNamespace(pd, tree)
	} else {
		killAll(pd, tree, true)
	}
	return code, leaked
}

// endNamespace, in the namespace's init, kills every other process of the
// namespace with kill(-1) (which reaches this namespace, and the ones
// nested in it, only) and reaps until the init has no child left and
// tree finds nothing, or killBudget runs out.
func endNamespace(pd procDir, tree func() []proc) {
	deadline := time.Now().Add(killBudget)
	for {
		syscall.Kill(-1, syscall.SIGKILL)
		if !reapAll() && len(tree()) == 0 {
			return
		}
		if time.Now().After(deadline) {
			report(pd, "testexec", "could not be killed", tree())
			return
		}
		time.Sleep(5 * time.Millisecond) // let the kernel deliver the kills and reparent orphans to us
	}
}

// waitLeftovers returns what list finds once it stays non-empty for grace
// (reaping our zombies meanwhile), or nil as soon as it is empty.
func waitLeftovers(list func() []proc, grace time.Duration) []proc {
	deadline := time.Now().Add(grace)
	for {
		reapAll()
		left := list()
		if len(left) == 0 || !time.Now().Before(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond) // polling /proc, which has no wake-up for "some process exited"
	}
}

// killAll SIGKILLs what list finds, by PID, until it finds nothing (a
// process may fork until it is killed; the orphans of killed parents
// become ours) or killBudget runs out; it reaps our children as it goes.
func killAll(pd procDir, list func() []proc, reap bool) {
	deadline := time.Now().Add(killBudget)
	for {
		if reap {
			reapAll()
		}
		left := list()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			report(pd, "testexec", "could not be killed", left)
			return
		}
		for _, p := range left {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond) // let the kernel deliver the kills before looking again
	}
}

// reapAll collects every child of ours that has exited, and reports
// whether any child (a live one) is left.
func reapAll() bool {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil { // ECHILD
			return false
		}
		if pid == 0 {
			return true
		}
	}
}

// report names leftover processes on stderr and in $TESTEXEC_REPORT.
func report(pd procDir, label, what string, left []proc) {
	var b strings.Builder
	fmt.Fprintf(&b, "testexec: %s: %d process(es) %s; killing them:\n", label, len(left), what)
	for i, p := range left {
		if i == maxListed {
			fmt.Fprintf(&b, "testexec: %s:   … and %d more\n", label, len(left)-maxListed)
			break
		}
		fmt.Fprintf(&b, "testexec: %s:   pid %d ppid %d: %s\n", label, p.pid, p.ppid, pd.cmdline(p))
	}
	os.Stderr.WriteString(b.String())
	if path := os.Getenv(reportEnv); path != "" {
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err == nil {
			f.WriteString(b.String())
			f.Close()
		}
	}
}

// procDir is a /proc held open by directory fd from before PROG starts:
// every look-up resolves relative to that fd, so a test that later mounts
// something over /proc (another PID namespace's proc, a tmpfs) or
// unmounts it (exposing the host's proc below) changes nothing testexec
// sees. Only processes of the PID namespace the proc was mounted for are
// ever listed, read or reported.
type procDir struct{ fd int }

// openProc opens path as the proc of this process's PID namespace, and
// checks that it is one: its "self" must be us.
func openProc(path string) (procDir, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return procDir{-1}, err
	}
	d := procDir{fd}
	b, err := d.read("self/stat")
	if f := strings.Fields(string(b)); err != nil || len(f) == 0 || f[0] != strconv.Itoa(os.Getpid()) {
		syscall.Close(fd)
		return procDir{-1}, fmt.Errorf("%s is not the proc of this PID namespace (self/stat: %q, %v)", path, bytes.TrimSpace(b), err)
	}
	return d, nil
}

// read returns the contents of rel, a path below the proc.
func (d procDir) read(rel string) ([]byte, error) {
	fd, err := syscall.Openat(d.fd, rel, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(f)
	return b.Bytes(), err
}

// proc is a live (not zombie) process seen in a procDir.
type proc struct {
	pid, ppid int
}

// scan lists the live processes of the proc.
func (d procDir) scan() []proc {
	// A fresh fd on the same directory ("." does not cross a mount made
	// over it) for each listing: a directory fd reads its entries once.
	fd, err := syscall.Openat(d.fd, ".", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	dir := os.NewFile(uintptr(fd), "proc")
	names, _ := dir.Readdirnames(-1)
	dir.Close()
	var out []proc
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		b, err := d.read(name + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) S ppid ...": comm may hold anything, so cut at the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		out = append(out, proc{pid: pid, ppid: ppid})
	}
	return out
}

// descendants returns the processes of all whose parent chain reaches root.
func descendants(all []proc, root int) []proc {
	parent := make(map[int]int, len(all))
	for _, p := range all {
		parent[p.pid] = p.ppid
	}
	return filter(all, func(p proc) bool {
		for q, n := p.ppid, 0; q > 0 && n < len(all); q, n = parent[q], n+1 {
			if q == root {
				return true
			}
		}
		return false
	})
}

func filter(ps []proc, keep func(proc) bool) []proc {
	return slices.DeleteFunc(ps, func(p proc) bool { return !keep(p) })
}

// hasEnv reports whether p started with key=val in its environment.
func (d procDir) hasEnv(p proc, key, val string) bool {
	b, err := d.read(strconv.Itoa(p.pid) + "/environ")
	if err != nil {
		return false
	}
	return slices.ContainsFunc(bytes.Split(b, []byte{0}), func(kv []byte) bool { return string(kv) == key+"="+val })
}

// cmdline is p's argv, shortened, or its comm.
func (d procDir) cmdline(p proc) string {
	b, _ := d.read(strconv.Itoa(p.pid) + "/cmdline")
	s := strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
	if s == "" {
		c, _ := d.read(strconv.Itoa(p.pid) + "/comm")
		s = "[" + strings.TrimSpace(string(c)) + "]"
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

const pr_SET_CHILD_SUBREAPER = 36

func prctl(option, arg uintptr) error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, option, arg, 0); e != 0 {
		return e
	}
	return nil
}
