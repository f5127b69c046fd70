// Package daemontest is the one launcher of the real sandbox-runtime
// binary, shared by the end-to-end tests, the client tests, the
// reliability suite and the load tool (cmd/sandbox-bench). It has one
// policy for everything that used to drift between their copies:
//
//   - Build builds ./cmd/sandbox-runtime of this module once, with a
//     version stamp, and with -race when the calling binary runs under the
//     race detector (RaceEnabled).
//   - Start runs it on 127.0.0.1:0 with its own base directory, in the
//     caller's environment minus every SANDBOX_* variable, plus what the
//     caller sets; log level info and format json unless set. It waits
//     (bounded) for the "listening" log line and refuses any address that
//     is not loopback.
//   - stderr (and stdout, unless redirected) goes to a log file, line by
//     line; a hook sees each line as it arrives. Tail returns its end for
//     failure messages.
//   - Stop sends SIGTERM to the daemon's PID (the one this launcher
//     started), waits a bounded time, then SIGKILLs that PID and the
//     process groups it had started. With CheckLeaks it also reports data
//     races and panics in the log and process groups that outlived it.
//
// StartT wraps Start for tests: a failure to start is fatal, the daemon is
// stopped when the test ends, and its log is shown when the test failed.
//
// The package imports nothing from this module and not "testing" (TB is
// the part of testing.TB it uses), so the load tool can link it.
package daemontest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults of Options.
const (
	DefaultStartTimeout = 60 * time.Second // the race-enabled binary on a busy 2-core machine
	DefaultStopTimeout  = 30 * time.Second
	DefaultLogLevel     = "info"
)

// BuildOptions says how to build the daemon.
type BuildOptions struct {
	Dir     string // where to put the binary (required)
	Version string // stamped as main.version; "" leaves the default
	// Race builds with -race. Build callers usually pass RaceEnabled (or
	// more), so the daemon runs under the detector when the tests do.
	Race bool
}

// BuildTags are the build tags of every build of the daemon (the
// Dockerfile, the Makefile, .ci/docker.sh and Build; internal/deps checks
// them): grpcnotrace leaves out golang.org/x/net/trace, which the daemon
// never enables, and with it html/template: 3 MB less binary and 1.7 MiB
// less idle RSS (BENCHMARKS.md).
const BuildTags = "grpcnotrace"

// Build builds ./cmd/sandbox-runtime of the module the current directory
// is in, and returns the binary's path.
func Build(ctx context.Context, o BuildOptions) (string, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(gomod))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the sandbox-runtime module: run from the repository")
	}
	out := filepath.Join(o.Dir, "sandbox-runtime")
	args := []string{"build", "-tags", BuildTags, "-o", out}
	if o.Version != "" {
		args = append(args, "-ldflags", "-X main.version="+o.Version)
	}
	if o.Race {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/sandbox-runtime")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = filepath.Dir(mod)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}

// CleanEnv is the environment of this process without any SANDBOX_ or
// SANDBOXD_ variable, so that the developer's shell cannot change what a
// daemon started here does.
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SANDBOX_") && !strings.HasPrefix(kv, "SANDBOXD_") {
			env = append(env, kv)
		}
	}
	return env
}

// Options says how to start the daemon.
type Options struct {
	Bin     string // the binary (from Build); required
	BaseDir string // SANDBOX_BASE_DIR, made if missing; required (tests: t.TempDir())
	// Env holds KEY=VALUE settings applied on top of CleanEnv and the
	// launcher's own (SANDBOX_RUNTIME_ADDR=127.0.0.1:0, SANDBOX_BASE_DIR,
	// SANDBOX_LOG_LEVEL, SANDBOX_LOG_FORMAT=json); later ones win.
	Env      []string
	LogLevel string // SANDBOX_LOG_LEVEL; "" is DefaultLogLevel
	// LogPath is the file the daemon's stderr goes to; "" is
	// BaseDir/../NAME.log next to the base directory (never inside it: the
	// sandbox's files are what tests look at).
	LogPath string
	Stdout  io.Writer // the daemon's stdout; nil: the log file
	OnLine  func(line string)

	// Prefix runs the daemon under a command (prlimit, setpriv, unshare,
	// sh -c): the started process is Prefix[0] with the rest and the
	// binary as arguments.
	Prefix []string
	// ChildIsDaemon: the started process forks the daemon as its only
	// child (unshare --fork); PID is that child's, and signals go to it.
	ChildIsDaemon bool

	StartTimeout time.Duration // for the listening line; 0 is DefaultStartTimeout
	StopTimeout  time.Duration // Stop's wait after SIGTERM; 0 is DefaultStopTimeout
	// CheckLeaks makes Stop report data races and panics in the log, and
	// process groups the daemon started that outlived it.
	CheckLeaks bool
}

// Daemon is one running sandbox-runtime this launcher started.
type Daemon struct {
	Cmd       *exec.Cmd
	PID       int    // the daemon's own PID (under ChildIsDaemon, the child's)
	Addr      string // 127.0.0.1:PORT
	URL       string // http://Addr
	BaseDir   string
	LogPath   string
	Listening map[string]any // the fields of the "listening" log line

	opts    Options
	exited  chan struct{} // closed when the process has been waited for
	waitErr error         // valid once exited is closed
	logDone chan struct{} // closed when stderr reached EOF
	logFile *os.File

	mu      sync.Mutex
	tail    []string // the last lines of the log
	stopped bool
	checked bool         // the leak checks ran
	groups  map[int]bool // process groups seen led by children of PID
}

const (
	tailLines = 200
	logGrace  = 2 * time.Second // how long the log is read after the exit
)

// Start starts the daemon and waits for its listening line.
//
// long: the test harness's start in order (flags, process group, log
// reader, the wait for the listening line), each undone on failure.
func Start(ctx context.Context, o Options) (*Daemon, error) {
	if o.Bin == "" || o.BaseDir == "" {
		return nil, errors.New("daemontest: Options.Bin and Options.BaseDir are required")
	}
	if o.LogLevel == "" {
		o.LogLevel = DefaultLogLevel
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	if o.LogPath == "" {
		o.LogPath = filepath.Clean(o.BaseDir) + ".log"
	}
	if err := os.MkdirAll(o.BaseDir, 0o755); err != nil {
		return nil, err
	}
	// O_APPEND: the daemon's stdout and this process write the same file.
	logf, err := os.OpenFile(o.LogPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	d := &Daemon{BaseDir: o.BaseDir, LogPath: o.LogPath, opts: o, exited: make(chan struct{}),
		logDone: make(chan struct{}), logFile: logf, groups: map[int]bool{}}

	argv := append(slices.Clone(o.Prefix), o.Bin)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(CleanEnv(),
		"SANDBOX_RUNTIME_ADDR=127.0.0.1:0",
		"SANDBOX_BASE_DIR="+o.BaseDir,
		"SANDBOX_LOG_LEVEL="+o.LogLevel,
		"SANDBOX_LOG_FORMAT=json",
	)
	cmd.Env = append(cmd.Env, o.Env...)
	cmd.Dir = o.BaseDir
	// Our own pipe rather than StderrPipe, so that Wait may run while the
	// log is still being read.
	r, w, err := os.Pipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd.Stderr = w
	cmd.Stdout = o.Stdout
	if cmd.Stdout == nil {
		cmd.Stdout = logf
	}
	// A process the daemon leaked may hold a copy of its stdout: Wait does
	// not wait for it longer than this.
	cmd.WaitDelay = logGrace
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", o.Bin, err)
	}
	d.Cmd, d.PID = cmd, cmd.Process.Pid
	listening := make(chan map[string]any, 1)
	go d.readLog(r, listening)
	go func() {
		err := cmd.Wait()
		// The rest of the log, unless a process the daemon leaked holds
		// the pipe open: then the read is cut short.
		t := time.NewTimer(logGrace)
		select {
		case <-d.logDone:
		case <-t.C:
			r.Close()
			<-d.logDone
		}
		t.Stop()
		d.waitErr = err
		d.mu.Lock()
		logf.Close()
		d.mu.Unlock()
		close(d.exited)
	}()

	timer := time.NewTimer(o.StartTimeout)
	defer timer.Stop()
	fail := func(format string, args ...any) (*Daemon, error) {
		d.kill()
		return nil, fmt.Errorf(format+"; its log (%s) ends:\n%s", append(args, d.LogPath, d.Tail(40))...)
	}
	select {
	case m := <-listening:
		d.Listening = m
	case <-d.exited:
		return fail("the daemon exited before listening (%v)", d.waitErr)
	case <-timer.C:
		return fail("the daemon did not log \"listening\" within %v", o.StartTimeout)
	case <-ctx.Done():
		return fail("starting the daemon: %v", ctx.Err())
	}
	d.Addr, _ = d.Listening["addr"].(string)
	if err := checkLoopback(d.Addr); err != nil {
		return fail("%v", err)
	}
	d.URL = "http://" + d.Addr
	if o.ChildIsDaemon {
		if err := d.findChild(timer.C); err != nil {
			return fail("%v", err)
		}
	}
	return d, nil
}

// findChild sets PID to the only child of the started process.
func (d *Daemon) findChild(timeout <-chan time.Time) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		kids := Children(d.Cmd.Process.Pid)
		if len(kids) == 1 {
			d.PID = kids[0]
			return nil
		}
		select {
		case <-tick.C:
		case <-timeout:
			return fmt.Errorf("the started process %d has children %v; want the daemon alone", d.Cmd.Process.Pid, kids)
		}
	}
}

// readLog copies stderr to the log file line by line, keeps the tail,
// calls OnLine, and sends the first listening line's fields.
func (d *Daemon) readLog(r *os.File, listening chan<- map[string]any) {
	defer close(d.logDone)
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	found := false
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			line = strings.TrimRight(line, "\n")
			d.mu.Lock()
			d.logFile.WriteString(line + "\n")
			d.tail = append(d.tail, truncate(line, 4000))
			if len(d.tail) > 2*tailLines {
				d.tail = slices.Clone(d.tail[len(d.tail)-tailLines:])
			}
			d.mu.Unlock()
			if !found && strings.Contains(line, `"msg":"listening"`) {
				var m map[string]any
				if json.Unmarshal([]byte(line), &m) == nil && m["addr"] != nil {
					found = true
					listening <- m
				}
			}
			if d.opts.OnLine != nil {
				d.opts.OnLine(line)
			}
		}
		if err != nil {
			return
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Tail returns the last n lines of the daemon's stderr.
func (d *Daemon) Tail(n int) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Join(d.tail[max(0, len(d.tail)-n):], "\n")
}

// Log returns the whole log file (stderr, and stdout unless redirected).
func (d *Daemon) Log() string {
	b, _ := os.ReadFile(d.LogPath)
	return string(b)
}

// Exited is closed once the process has exited and its log is read.
func (d *Daemon) Exited() <-chan struct{} { return d.exited }

// Alive reports whether the process is still running.
func (d *Daemon) Alive() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// Signal sends sig to the daemon's PID.
func (d *Daemon) Signal(sig syscall.Signal) error {
	if !d.Alive() {
		return os.ErrProcessDone
	}
	return syscall.Kill(d.PID, sig)
}

// Wait waits up to timeout for the process to exit and returns its exit
// code; ok is false when it did not exit in time.
func (d *Daemon) Wait(timeout time.Duration) (code int, ok bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-d.exited:
		return d.Cmd.ProcessState.ExitCode(), true
	case <-t.C:
		return -1, false
	}
}

// WaitErr is what waiting for the process returned; valid once it exited.
func (d *Daemon) WaitErr() error {
	<-d.exited
	return d.waitErr
}

// Stopped reports whether Stop was called.
func (d *Daemon) Stopped() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stopped
}

// Stop ends the daemon: SIGTERM to its PID, then, if it has not exited
// within StopTimeout, SIGKILL to it and to the process groups its
// children lead. It returns the exit code and how long the exit took
// after SIGTERM; err says the daemon had to be killed, or (CheckLeaks)
// what its log or the process table showed.
func (d *Daemon) Stop() (code int, took time.Duration, err error) {
	return d.StopWithin(d.opts.StopTimeout)
}

// StopWithin is Stop with its own budget for the exit. After an earlier
// Stop it only waits (at most budget, then kills); the leak checks run
// once, on the first Stop that sees the exit.
func (d *Daemon) StopWithin(budget time.Duration) (code int, took time.Duration, err error) {
	d.mu.Lock()
	again := d.stopped
	d.stopped = true
	d.mu.Unlock()
	d.noteGroups()
	start := time.Now()
	if !again {
		d.Signal(syscall.SIGTERM)
	}
	var errs []error
	code, ok := d.Wait(budget)
	took = time.Since(start)
	if !ok {
		errs = append(errs, fmt.Errorf("the daemon (pid %d) did not exit within %v of SIGTERM; killed it", d.PID, budget))
		d.kill()
		code = -1
	}
	d.mu.Lock()
	check := d.opts.CheckLeaks && !d.checked
	d.checked = true
	d.mu.Unlock()
	if check {
		errs = append(errs, d.leaks()...)
	}
	return code, took, errors.Join(errs...)
}

// kill SIGKILLs the daemon and the process groups of its children, and
// waits (bounded) for the exit.
func (d *Daemon) kill() {
	d.noteGroups()
	syscall.Kill(d.PID, syscall.SIGKILL)
	if d.PID != d.Cmd.Process.Pid {
		d.Cmd.Process.Kill()
	}
	d.mu.Lock()
	groups := make([]int, 0, len(d.groups))
	for g := range d.groups {
		groups = append(groups, g)
	}
	d.mu.Unlock()
	for _, g := range groups {
		syscall.Kill(-g, syscall.SIGKILL)
	}
	d.Wait(10 * time.Second)
}

// noteGroups records the process groups led by the daemon's children
// (every managed command leads its own).
func (d *Daemon) noteGroups() {
	if !d.Alive() {
		return
	}
	kids := Children(d.PID)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range kids {
		if pgid, err := syscall.Getpgid(k); err == nil && pgid == k {
			d.groups[k] = true
		}
	}
}

// leaks reports races and panics in the log and surviving process groups.
func (d *Daemon) leaks() []error {
	var errs []error
	log := d.Log()
	for _, bad := range []struct{ mark, what string }{
		{"WARNING: DATA RACE", "reported a data race"},
		{"panic:", "panicked"},
		{`"msg":"handler panic"`, "recovered a handler panic"},
		{"fatal error:", "crashed"},
	} {
		if i := strings.Index(log, bad.mark); i >= 0 {
			report := strings.SplitN(log[i:], "\n", 120)
			errs = append(errs, fmt.Errorf("the daemon %s:\n%s", bad.what, strings.Join(report[:min(len(report), 119)], "\n")))
			break
		}
	}
	d.mu.Lock()
	groups := make([]int, 0, len(d.groups))
	for g := range d.groups {
		groups = append(groups, g)
	}
	d.mu.Unlock()
	slices.Sort(groups)
	for _, g := range groups {
		if left := groupMembers(g); len(left) > 0 {
			errs = append(errs, fmt.Errorf("process group %d outlived the daemon: %v", g, left))
			syscall.Kill(-g, syscall.SIGKILL)
		}
	}
	return errs
}

// groupMembers lists the live (not zombie) processes of group pgid.
func groupMembers(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

// Children lists the children of every thread of pid.
func Children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(data)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// checkLoopback refuses any address that is not on the loopback interface.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listening address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("listening address %q is not loopback", addr)
	}
	return nil
}

// TB is the part of testing.TB that StartT uses.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Failed() bool
}

// StartT starts the daemon for test t: a failure is fatal, and when t
// ends the daemon is stopped (if the test did not stop it), a stop or
// leak error fails t, and a failed t shows the end of the daemon's log.
func StartT(t TB, o Options) *Daemon {
	t.Helper()
	d, err := Start(context.Background(), o)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if _, _, err := d.Stop(); err != nil {
			t.Errorf("stopping the daemon: %v", err)
		}
		if t.Failed() {
			t.Logf("daemon log (%s) ends:\n%s", d.LogPath, d.Tail(80))
		}
	})
	return d
}
