//go:build linux

package procgroup

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

// helperEnv marks a re-exec of the test binary as a helper child; the helper's name
// and arguments are os.Args[1:].
const helperEnv = "PROCGROUP_HELPER"

// testPidEnv carries the pid of the test process to helpers (see hang).
const testPidEnv = "PROCGROUP_TEST_PID"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(runHelper(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

// runHelper is the body of a helper child. Helpers that need the test to know they
// are set up print "ready" as their last line of setup.
func runHelper(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "helper: no name")
		return 2
	}
	name, args := args[0], args[1:]
	switch name {
	case "exit":
		n, _ := strconv.Atoi(args[0])
		os.Exit(n)
	case "alloc":
		// args[0]: MiB to allocate and touch, after a line on stdin.
		n, _ := strconv.Atoi(args[0])
		bufio.NewReader(os.Stdin).ReadString('\n')
		var keep [][]byte
		for range n {
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			keep = append(keep, b)
		}
		fmt.Println("allocated", len(keep))
		return 0
	case "hang":
		fmt.Println("ready")
		hang()
	case "ignore-sigterm":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		hang()
	case "spawn-grandchild":
		// args[0]: the grandchild helper ("hang" or "ignore-sigterm"). The grandchild
		// stays in our process group.
		cmd := exec.Command(selfExe(), args[0])
		cmd.Env = os.Environ()
		out, err := cmd.StdoutPipe()
		if err != nil {
			return fail(err)
		}
		if err := cmd.Start(); err != nil {
			return fail(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || line != "ready\n" {
			return fail(fmt.Errorf("grandchild said %q: %v", line, err))
		}
		fmt.Printf("grandchild %d\n", cmd.Process.Pid)
		fmt.Println("ready")
		hang()
	case "orphan-grandchild":
		// Start a grandchild that exits when we do (EOF on a pipe only we hold),
		// report its pid, and exit without waiting for it.
		pr, pw, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		cmd := exec.Command(selfExe(), "wait-parent")
		cmd.Env = os.Environ()
		cmd.ExtraFiles = []*os.File{pr}
		if err := cmd.Start(); err != nil {
			return fail(err)
		}
		pr.Close()
		fmt.Printf("grandchild %d\n", cmd.Process.Pid)
		_ = pw // closed by our exit
		return 0
	case "wait-parent":
		_, _ = io.Copy(io.Discard, os.NewFile(3, "parent"))
		return 0
	case "echo-stdin":
		if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
			return fail(err)
		}
		return 0
	case "count-stdin":
		n, err := io.Copy(io.Discard, os.Stdin)
		if err != nil {
			return fail(err)
		}
		fmt.Println(n)
		return 0
	case "kill-self":
		n, _ := strconv.Atoi(args[0])
		_ = syscall.Kill(os.Getpid(), syscall.Signal(n))
		hang()
	case "burn":
		// Use some CPU and memory so that rusage has something to report.
		buf := make([]byte, 32<<20)
		for i := range buf {
			buf[i] = byte(i)
		}
		// Spin until this process has used 100 ms of CPU (not wall time: the
		// machine may be loaded).
		var x uint64
		for {
			for i := 0; i < 100000; i++ {
				x = x*6364136223846793005 + 1442695040888963407
			}
			var ru syscall.Rusage
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
				return fail(err)
			}
			if time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) >= 100*time.Millisecond {
				break
			}
		}
		fmt.Println(x%2, buf[len(buf)-1])
		return 0
	case "outputs":
		fmt.Fprint(os.Stdout, "to-stdout")
		fmt.Fprint(os.Stderr, "to-stderr")
		return 0
	case "flood":
		chunk := []byte(strings.Repeat("x", 64<<10))
		for {
			if _, err := os.Stdout.Write(chunk); err != nil {
				return 0
			}
		}
	case "pwd":
		wd, err := os.Getwd()
		if err != nil {
			return fail(err)
		}
		fmt.Print(wd)
		return 0
	}
	fmt.Fprintf(os.Stderr, "helper: unknown %q\n", name)
	return 2
}

// hang blocks until the helper is killed. As a safety net for a test binary that
// died without cleaning up (a timeout panic), it exits once the test process is gone.
func hang() {
	testPid, _ := strconv.Atoi(os.Getenv(testPidEnv))
	for {
		time.Sleep(200 * time.Millisecond)
		if testPid > 0 && syscall.Kill(testPid, 0) == syscall.ESRCH {
			os.Exit(4)
		}
	}
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "helper:", err)
	return 3
}

func selfExe() string {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return exe
}

// helper returns a Spec that runs the named helper.
func helper(args ...string) Spec {
	return Spec{
		Argv: append([]string{selfExe()}, args...),
		Env:  helperEnviron(),
	}
}

// helperEnviron is the environment of helpers: ours, the helper marker, our pid,
// and GORACE with atexit_sleep_ms=0 (a -race binary otherwise sleeps 1 s at exit).
func helperEnviron() []string {
	gorace := "atexit_sleep_ms=0"
	if v := os.Getenv("GORACE"); v != "" {
		gorace = v + " " + gorace
	}
	return environWith("GORACE="+gorace, helperEnv+"=1", testPidEnv+"="+strconv.Itoa(os.Getpid()))
}

// environWith is our environment with each KEY=VALUE of set in place of
// any KEY we have. Spec.Env reaches execve as it is, and os.Getenv returns
// the first of duplicates: appending a KEY the environment already holds
// (a helper's own marker, say) would leave the child the old value.
func environWith(set ...string) []string {
	keys := make(map[string]bool, len(set))
	for _, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		keys[k] = true
	}
	env := make([]string, 0, len(os.Environ())+len(set))
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !keys[k] {
			env = append(env, kv)
		}
	}
	return append(env, set...)
}

// newReaper opens the process's Reaper for the duration of the test. Tests that use
// it must not run in parallel with each other (one Reaper per process).
func newReaper(t *testing.T) *Reaper {
	t.Helper()
	r, err := NewReaper(zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("NewReaper: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func start(t *testing.T, r *Reaper, spec Spec) *Process {
	t.Helper()
	p, err := r.Start(spec)
	if err != nil {
		t.Fatalf("Start(%q): %v", spec.Argv, err)
	}
	t.Cleanup(func() {
		select {
		case <-p.Done():
		default:
			p.Signal(syscall.SIGKILL) // the test failed half-way
		}
		p.Stdout.Close()
		p.Stderr.Close()
		if p.Stdin != nil {
			p.Stdin.Close()
		}
	})
	return p
}

// collect reads stdout and stderr to EOF and closes them.
func collect(p *Process) (stdout, stderr string) {
	var wg sync.WaitGroup
	var eb []byte
	wg.Add(1)
	go func() {
		defer wg.Done()
		eb, _ = io.ReadAll(p.Stderr)
	}()
	ob, _ := io.ReadAll(p.Stdout)
	wg.Wait()
	p.Stdout.Close()
	p.Stderr.Close()
	return string(ob), string(eb)
}

const waitTimeout = 30 * time.Second

// wait waits for the leader to be reaped and returns its status.
func wait(t *testing.T, p *Process) ExitStatus {
	t.Helper()
	select {
	case <-p.Done():
		return p.Exit()
	case <-time.After(waitTimeout):
		t.Fatalf("pid %d not reaped within %v", p.Pid, waitTimeout)
		return ExitStatus{}
	}
}

// readLine reads one line from the process's stdout through br.
func readLine(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("reading a line: %q, %v", line, err)
	}
	return strings.TrimSuffix(line, "\n")
}

// fdCount counts the open file descriptors of the test process.
func fdCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

type procStat struct {
	pid, ppid int
	state     string
}

// procs lists every process visible in /proc.
func procs(t testing.TB) []procStat {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []procStat
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) S ppid ..."; comm may contain anything, so cut at the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		out = append(out, procStat{pid: pid, ppid: ppid, state: f[0]})
	}
	return out
}

// zombieChildren lists our children that are zombies.
func zombieChildren(t testing.TB) []int {
	t.Helper()
	var z []int
	for _, p := range procs(t) {
		if p.ppid == os.Getpid() && p.state == "Z" {
			z = append(z, p.pid)
		}
	}
	return z
}

// waitGone waits until pid no longer exists (kill(pid, 0) answers ESRCH), waking on
// every reap pass that reaped an orphan; the deadline only bounds a failure.
func waitGone(t *testing.T, r *Reaper, pid int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for {
		n := r.OrphansReaped()
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			return
		}
		if err := r.WaitOrphans(ctx, n+1); err != nil {
			t.Fatalf("pid %d still exists: %v", pid, err)
		}
	}
}

// TestHelperEnvironReplacesMarkers: a test binary that is itself a child of
// a test (the PID-namespace and OOM inner tests) hands its helpers one
// value of each marker, its own: Spec.Env reaches execve as it is, and a
// helper's os.Getenv would read the first of two.
func TestHelperEnvironReplacesMarkers(t *testing.T) {
	t.Setenv(testPidEnv, "999999")
	t.Setenv(nsHelperEnv, "TestOuter")
	count := func(env []string, key string) (vals []string) {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, key+"="); ok {
				vals = append(vals, v)
			}
		}
		return vals
	}
	env := helperEnviron()
	if got := count(env, testPidEnv); len(got) != 1 || got[0] != strconv.Itoa(os.Getpid()) {
		t.Errorf("helperEnviron: %s = %q; want just our pid %d", testPidEnv, got, os.Getpid())
	}
	if got := count(environWith(nsHelperEnv+"=TestInner"), nsHelperEnv); len(got) != 1 || got[0] != "TestInner" {
		t.Errorf("environWith: %s = %q; want [TestInner]", nsHelperEnv, got)
	}
}
