//go:build linux

package procgroup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestExitCodes(t *testing.T) {
	r := newReaper(t)
	for _, tc := range []struct{ exit, want int }{
		{0, 0}, {1, 1}, {7, 7}, {255, 255}, {256, 0}, {300, 44},
	} {
		p := start(t, r, helper("exit", strconv.Itoa(tc.exit)))
		collect(p)
		st := wait(t, p)
		if st.Code != tc.want || st.Signal != 0 || st.Signaled() {
			t.Errorf("exit %d: got Code %d Signal %v; want Code %d Signal 0", tc.exit, st.Code, st.Signal, tc.want)
		}
	}
}

func TestSignalDeath(t *testing.T) {
	r := newReaper(t)

	// Killed from outside through the group.
	p := start(t, r, helper("hang"))
	if line := readLine(t, bufio.NewReader(p.Stdout)); line != "ready" {
		t.Fatalf("got %q; want ready", line)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	st := wait(t, p)
	if st.Code != -9 || st.Signal != syscall.SIGKILL || !st.Signaled() {
		t.Errorf("got Code %d Signal %v; want -9 SIGKILL", st.Code, st.Signal)
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, ErrGroupGone) {
		t.Errorf("Signal after the group is gone: got %v; want ErrGroupGone", err)
	}

	// Killed by itself.
	p = start(t, r, helper("kill-self", strconv.Itoa(int(syscall.SIGHUP))))
	collect(p)
	st = wait(t, p)
	if st.Code != -int(syscall.SIGHUP) || st.Signal != syscall.SIGHUP {
		t.Errorf("got Code %d Signal %v; want %d %v", st.Code, st.Signal, -int(syscall.SIGHUP), syscall.SIGHUP)
	}
}

func TestRusage(t *testing.T) {
	r := newReaper(t)
	p := start(t, r, helper("burn"))
	collect(p)
	st := wait(t, p)
	if st.Code != 0 {
		t.Fatalf("got Code %d; want 0", st.Code)
	}
	if st.UserCPU+st.SysCPU < 50*time.Millisecond {
		t.Errorf("got UserCPU %v SysCPU %v; want at least 50ms together", st.UserCPU, st.SysCPU)
	}
	if st.MaxRSSKB < 32<<10 {
		t.Errorf("got MaxRSSKB %d; want >= %d", st.MaxRSSKB, 32<<10)
	}
}

func TestStartErrors(t *testing.T) {
	r := newReaper(t)
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	noExec := write("noexec", "\x7fELF", 0o644)
	noShebang := write("noshebang", "echo hello\n", 0o755)
	pathDir := filepath.Join(dir, "pathdir")
	if err := os.MkdirAll(filepath.Join(pathDir, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("pathdir/prog", "\x7fELF", 0o644)
	env := []string{"PATH=" + filepath.Join(dir, "missing") + ":" + pathDir}

	for _, tc := range []struct {
		name     string
		spec     Spec
		op, path string
		errno    syscall.Errno
	}{
		{"not on PATH", Spec{Argv: []string{"no-such-command-xyz"}, Env: env}, "exec", "no-such-command-xyz", syscall.ENOENT},
		{"absolute missing", Spec{Argv: []string{"/no/such/file"}}, "exec", "/no/such/file", syscall.ENOENT},
		{"empty argv0", Spec{Argv: []string{""}, Env: env}, "exec", "", syscall.ENOENT},
		{"not executable", Spec{Argv: []string{noExec}}, "exec", noExec, syscall.EACCES},
		{"not executable on PATH", Spec{Argv: []string{"prog", "arg"}, Env: env}, "exec", "prog", syscall.EACCES},
		{"directory on PATH", Spec{Argv: []string{"adir"}, Env: env}, "exec", "adir", syscall.EACCES},
		{"directory", Spec{Argv: []string{dir}}, "exec", dir, syscall.EACCES},
		{"no shebang", Spec{Argv: []string{noShebang}}, "exec", noShebang, syscall.ENOEXEC},
		{"missing dir", Spec{Argv: []string{selfExe()}, Dir: filepath.Join(dir, "nodir")}, "chdir", filepath.Join(dir, "nodir"), syscall.ENOENT},
		{"dir is a file", Spec{Argv: []string{selfExe()}, Dir: noExec}, "chdir", noExec, syscall.ENOTDIR},
		{"NUL in argument", Spec{Argv: []string{selfExe(), "a\x00b"}}, "exec", selfExe(), syscall.EINVAL},
		{"NUL in env", Spec{Argv: []string{selfExe()}, Env: []string{"A=\x00"}}, "exec", selfExe(), syscall.EINVAL},
		{"empty argv", Spec{}, "exec", "", syscall.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, stdin := range []bool{false, true} {
				fds := fdCount(t)
				tc.spec.Stdin = stdin
				p, err := r.Start(tc.spec)
				if err == nil {
					p.Signal(syscall.SIGKILL)
					collect(p)
					wait(t, p)
					t.Fatalf("Start succeeded; want an error")
				}
				var se *StartError
				if !errors.As(err, &se) {
					t.Fatalf("got %T %v; want *StartError", err, err)
				}
				if se.Op != tc.op || se.Path != tc.path || se.Errno != tc.errno {
					t.Errorf("got Op %q Path %q Errno %v; want %q %q %v", se.Op, se.Path, se.Errno, tc.op, tc.path, tc.errno)
				}
				if !errors.Is(err, tc.errno) {
					t.Errorf("errors.Is(%v, %v) = false; want true", err, tc.errno)
				}
				if got := fdCount(t); got != fds {
					t.Errorf("open fds: got %d after the failed Start; want %d", got, fds)
				}
				if z := zombieChildren(t); len(z) != 0 {
					t.Errorf("zombie children %v after the failed Start", z)
				}
				r.procsMu.Lock()
				n := len(r.procs)
				r.procsMu.Unlock()
				if n != 0 {
					t.Errorf("%d processes registered after the failed Start; want 0", n)
				}
			}
		})
	}
}

func TestStartErrorMessage(t *testing.T) {
	err := &StartError{Op: "exec", Path: "nosuchcmd", Errno: syscall.ENOENT}
	if got, want := err.Error(), `exec "nosuchcmd": no such file or directory`; got != want {
		t.Errorf("got %q; want %q", got, want)
	}
}

func TestPathLookup(t *testing.T) {
	r := newReaper(t)
	dir := t.TempDir()
	first := filepath.Join(dir, "first")
	second := filepath.Join(dir, "second")
	for _, d := range []string{first, second} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// "prog" exists but is not executable in the first PATH entry: execvpe goes on.
	if err := os.WriteFile(filepath.Join(first, "prog"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(selfExe(), filepath.Join(second, "prog")); err != nil {
		t.Fatal(err)
	}
	base := helper().Env
	env := func(path string) []string { return append(slices.Clip(base), "PATH="+path) }

	for _, tc := range []struct {
		name string
		spec Spec
	}{
		{"PATH search", Spec{Argv: []string{"prog", "exit", "3"}, Env: env("/nonexistent:" + first + ":" + second)}},
		{"relative PATH entry, relative to Dir", Spec{Argv: []string{"prog", "exit", "3"}, Env: env("first:second"), Dir: dir}},
		{"empty PATH entry is Dir", Spec{Argv: []string{"prog", "exit", "3"}, Env: env(":/nonexistent"), Dir: second}},
		{"relative path, relative to Dir", Spec{Argv: []string{"./second/prog", "exit", "3"}, Env: base, Dir: dir}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t, r, tc.spec)
			out, errOut := collect(p)
			if st := wait(t, p); st.Code != 3 {
				t.Errorf("got Code %d (stdout %q stderr %q); want 3", st.Code, out, errOut)
			}
		})
	}
}

func TestStdinPipe(t *testing.T) {
	r := newReaper(t)
	spec := helper("echo-stdin")
	spec.Stdin = true
	p := start(t, r, spec)
	br := bufio.NewReader(p.Stdout)
	for _, s := range []string{"hello", "world"} {
		if _, err := io.WriteString(p.Stdin, s+"\n"); err != nil {
			t.Fatal(err)
		}
		if got := readLine(t, br); got != s {
			t.Errorf("echo: got %q; want %q", got, s)
		}
	}
	if err := p.Stdin.Close(); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Errorf("unexpected output %q", rest)
	}
	if st := wait(t, p); st.Code != 0 {
		t.Errorf("got Code %d; want 0", st.Code)
	}
}

func TestStdinDevNull(t *testing.T) {
	r := newReaper(t)
	p := start(t, r, helper("count-stdin"))
	if p.Stdin != nil {
		t.Errorf("Stdin is %v; want nil without Spec.Stdin", p.Stdin)
	}
	out, errOut := collect(p)
	if out != "0\n" {
		t.Errorf("child read %q bytes from stdin (stderr %q); want 0", out, errOut)
	}
	if st := wait(t, p); st.Code != 0 {
		t.Errorf("got Code %d; want 0", st.Code)
	}
}

func TestOutputsAndDir(t *testing.T) {
	r := newReaper(t)
	p := start(t, r, helper("outputs"))
	out, errOut := collect(p)
	if out != "to-stdout" || errOut != "to-stderr" {
		t.Errorf("got stdout %q stderr %q; want to-stdout, to-stderr", out, errOut)
	}
	wait(t, p)

	dir := t.TempDir()
	spec := helper("pwd")
	spec.Dir = dir
	p = start(t, r, spec)
	if out, _ := collect(p); out != dir {
		t.Errorf("child's working directory: got %q; want %q", out, dir)
	}
	wait(t, p)
}

func TestProcessGroup(t *testing.T) {
	r := newReaper(t)
	p := start(t, r, helper("hang"))
	readLine(t, bufio.NewReader(p.Stdout))
	pgid, err := syscall.Getpgid(p.Pid)
	if err != nil || pgid != p.Pid {
		t.Errorf("Getpgid(%d) = %d, %v; want %d", p.Pid, pgid, err, p.Pid)
	}
	p.Terminate(context.Background(), 10*time.Second)
	if st := wait(t, p); st.Code != -int(syscall.SIGTERM) {
		t.Errorf("got Code %d; want -15", st.Code)
	}
}

func TestCloseUnblocksRead(t *testing.T) {
	r := newReaper(t)
	p := start(t, r, helper("hang"))
	br := bufio.NewReader(p.Stdout)
	readLine(t, br)
	readErr := make(chan error, 1)
	go func() {
		_, err := br.ReadByte() // blocks: the child writes nothing more
		readErr <- err
	}()
	p.Stdout.Close()
	select {
	case err := <-readErr:
		if !errors.Is(err, os.ErrClosed) {
			t.Errorf("Read after Close: got %v; want os.ErrClosed", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Close did not unblock Read")
	}
	p.Terminate(context.Background(), 10*time.Second)
	wait(t, p)
}

func TestFlood(t *testing.T) {
	r := newReaper(t)
	p := start(t, r, helper("flood"))
	if n, err := io.CopyN(io.Discard, p.Stdout, 8<<20); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	p.Terminate(context.Background(), 10*time.Second)
	collect(p)
	if st := wait(t, p); st.Code != -int(syscall.SIGTERM) {
		t.Errorf("got Code %d; want -15", st.Code)
	}
}

// readGrandchild reads "grandchild <pid>" and, if ready, a "ready" line.
func readGrandchild(t *testing.T, br *bufio.Reader, ready bool) int {
	t.Helper()
	line := readLine(t, br)
	s, ok := strings.CutPrefix(line, "grandchild ")
	pid, err := strconv.Atoi(s)
	if !ok || err != nil {
		t.Fatalf("got %q; want grandchild <pid>", line)
	}
	if ready {
		if line := readLine(t, br); line != "ready" {
			t.Fatalf("got %q; want ready", line)
		}
	}
	return pid
}

func TestTerminateReachesGrandchild(t *testing.T) {
	r := newReaper(t)
	p := start(t, r, helper("spawn-grandchild", "hang"))
	gpid := readGrandchild(t, bufio.NewReader(p.Stdout), true)

	const grace = 20 * time.Second
	begin := time.Now()
	p.Terminate(context.Background(), grace)
	// The whole group died of SIGTERM, so Terminate returns once it is empty, long
	// before the grace.
	if d := time.Since(begin); d > grace/2 {
		t.Errorf("Terminate took %v; want it to return once the group is empty", d)
	}
	if st := wait(t, p); st.Code != -int(syscall.SIGTERM) {
		t.Errorf("leader: got Code %d; want -15", st.Code)
	}
	if err := syscall.Kill(gpid, 0); err != syscall.ESRCH {
		t.Errorf("grandchild %d after Terminate: kill(pid, 0) = %v; want ESRCH", gpid, err)
	}
	if err := p.Signal(0); !errors.Is(err, ErrGroupGone) {
		t.Errorf("Signal after Terminate: got %v; want ErrGroupGone", err)
	}
}

func TestTerminateKillsLeaderIgnoringSIGTERM(t *testing.T) {
	r := newReaper(t)
	p := start(t, r, helper("ignore-sigterm"))
	readLine(t, bufio.NewReader(p.Stdout))
	p.Terminate(context.Background(), 100*time.Millisecond)
	if st := wait(t, p); st.Code != -9 || st.Signal != syscall.SIGKILL {
		t.Errorf("got Code %d Signal %v; want -9 SIGKILL", st.Code, st.Signal)
	}
}

func TestTerminateKillsGrandchildIgnoringSIGTERM(t *testing.T) {
	r := newReaper(t)
	p := start(t, r, helper("spawn-grandchild", "ignore-sigterm"))
	gpid := readGrandchild(t, bufio.NewReader(p.Stdout), true)
	p.Terminate(context.Background(), 200*time.Millisecond)
	// The leader died of SIGTERM; the grandchild survived it and got the SIGKILL.
	if st := wait(t, p); st.Code != -int(syscall.SIGTERM) {
		t.Errorf("leader: got Code %d; want -15", st.Code)
	}
	waitGone(t, r, gpid)
	if z := zombieChildren(t); len(z) != 0 {
		t.Errorf("zombie children %v", z)
	}
}

func TestTerminateContextDone(t *testing.T) {
	r := newReaper(t)
	p := start(t, r, helper("ignore-sigterm"))
	readLine(t, bufio.NewReader(p.Stdout))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.Terminate(ctx, time.Hour)
	if st := wait(t, p); st.Code != -9 {
		t.Errorf("got Code %d; want -9", st.Code)
	}
}

func TestTerminateGroupGone(t *testing.T) {
	r := newReaper(t)
	p := start(t, r, helper("exit", "0"))
	collect(p)
	wait(t, p)
	p.Terminate(context.Background(), time.Hour) // returns at once
}

func TestOrphanReaped(t *testing.T) {
	r := newReaper(t)
	before := r.OrphansReaped()
	p := start(t, r, helper("orphan-grandchild"))
	out, errOut := collect(p)
	if st := wait(t, p); st.Code != 0 {
		t.Fatalf("got Code %d (stderr %q); want 0", st.Code, errOut)
	}
	gpid := readGrandchild(t, bufio.NewReader(strings.NewReader(out)), false)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := r.WaitOrphans(ctx, before+1); err != nil {
		t.Fatalf("orphan not reaped: %v (OrphansReaped %d)", err, r.OrphansReaped())
	}
	waitGone(t, r, gpid)
	if z := zombieChildren(t); len(z) != 0 {
		t.Errorf("zombie children %v", z)
	}
}

// TestConcurrentStarts: no exit status is lost or misdelivered under concurrency.
func TestConcurrentStarts(t *testing.T) {
	r := newReaper(t)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := r.Start(helper("exit", strconv.Itoa(i)))
			if err != nil {
				errs <- err
				return
			}
			collect(p)
			select {
			case <-p.Done():
			case <-time.After(2 * waitTimeout):
				errs <- fmt.Errorf("exit %d: pid %d not reaped", i, p.Pid)
				p.Signal(syscall.SIGKILL)
				return
			}
			if st := p.Exit(); st.Code != i || st.Signal != 0 {
				errs <- fmt.Errorf("exit %d: got Code %d Signal %v", i, st.Code, st.Signal)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := r.OrphansReaped(); got != 0 {
		t.Errorf("OrphansReaped = %d; want 0 (a managed exit was reaped as an orphan)", got)
	}
}

// TestLeaks runs 500 processes and checks that file descriptors and goroutines are
// back to their baseline once everything is closed.
func TestLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	fds := fdCount(t)
	r, err := NewReaper(nil)
	if err != nil {
		t.Fatal(err)
	}
	// "true" from PATH keeps 500 starts cheap (a -race test binary is slow to start);
	// the concurrency of the test binary's own helpers is covered above.
	short := Spec{Argv: []string{"true"}, Env: os.Environ()}
	if _, errno := lookPath("true", pathFromEnv(short.Env), ""); errno != 0 {
		short = helper("exit", "0")
	}
	const total, parallel = 500, 25
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	errs := make(chan error, total)
	for i := 0; i < total; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			spec := short
			spec.Stdin = i%2 == 0
			p, err := r.Start(spec)
			if err != nil {
				errs <- err
				return
			}
			if p.Stdin != nil {
				p.Stdin.Close()
			}
			collect(p)
			<-p.Done()
			if st := p.Exit(); st.Code != 0 {
				errs <- fmt.Errorf("pid %d: Code %d", p.Pid, st.Code)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := fdCount(t); got != fds {
		t.Errorf("open fds: got %d; want %d", got, fds)
	}
	if z := zombieChildren(t); len(z) != 0 {
		t.Errorf("zombie children %v", z)
	}
	goleak.VerifyNone(t, ignore)
}

func TestReaperActiveAndReopen(t *testing.T) {
	r1, err := NewReaper(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewReaper(nil); !errors.Is(err, ErrReaperActive) {
		t.Errorf("second NewReaper: got %v; want ErrReaperActive", err)
	}
	p := start(t, r1, helper("exit", "5"))
	collect(p)
	if st := wait(t, p); st.Code != 5 {
		t.Errorf("got Code %d; want 5", st.Code)
	}
	if err := r1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r1.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	fds := fdCount(t)
	if _, err := r1.Start(helper("exit", "0")); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close: got %v; want ErrClosed", err)
	}
	if got := fdCount(t); got != fds {
		t.Errorf("open fds after Start on a closed Reaper: got %d; want %d", got, fds)
	}
	if err := r1.WaitOrphans(context.Background(), 1); !errors.Is(err, ErrClosed) {
		t.Errorf("WaitOrphans after Close: got %v; want ErrClosed", err)
	}

	r2 := newReaper(t)
	p = start(t, r2, helper("exit", "6"))
	collect(p)
	if st := wait(t, p); st.Code != 6 {
		t.Errorf("after reopening: got Code %d; want 6", st.Code)
	}
}

// TestReopenReapsLeftovers: a child that exits while no Reaper is open stays a
// zombie until the next Reaper, whose first pass reaps it (as an orphan: the new
// Reaper does not know it).
func TestReopenReapsLeftovers(t *testing.T) {
	r1, err := NewReaper(nil)
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, r1, helper("hang"))
	readLine(t, bufio.NewReader(p.Stdout))
	r1.Close()
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Nobody reaps it now; the group keeps existing while the zombie does.
	r2 := newReaper(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := r2.WaitOrphans(ctx, 1); err != nil {
		t.Fatalf("leftover not reaped by the new Reaper: %v", err)
	}
	waitGone(t, r2, p.Pid)
	select {
	case <-p.Done():
		t.Error("Done closed by a Reaper that did not start the process")
	default:
	}
	if z := zombieChildren(t); len(z) != 0 {
		t.Errorf("zombie children %v", z)
	}
}

// TestShortLivedUnderReapPressure: children that exit at once while the reap loop is
// busy with orphans are still delivered to their Process (subscribe before fork).
func TestShortLivedUnderReapPressure(t *testing.T) {
	r := newReaper(t)
	// Orphans keep the reap loop busy while managed processes exit at once.
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := 0; i < n; i++ {
		for _, name := range []string{"orphan-grandchild", "exit"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				spec := helper(name, "9")
				p, err := r.Start(spec)
				if err != nil {
					errs <- err
					return
				}
				collect(p)
				<-p.Done()
				want := 9
				if name != "exit" {
					want = 0
				}
				if st := p.Exit(); st.Code != want {
					errs <- fmt.Errorf("%s: got Code %d; want %d", name, st.Code, want)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := r.WaitOrphans(ctx, n); err != nil {
		t.Errorf("OrphansReaped = %d; want %d: %v", r.OrphansReaped(), n, err)
	}
}

// TestCollectInTheOwner: Collect takes the leader's exit in the caller's
// goroutine once it is a zombie, never waits for a live leader (one that
// closed its output early), and races the reap loop without losing or
// doubling an exit: every status is the child's own, and none is counted
// as an orphan.
func TestCollectInTheOwner(t *testing.T) {
	r := newReaper(t)
	// A leader that closed stdout and stderr and waits on stdin: EOF on the
	// pipes, and no exit to collect.
	p := start(t, r, Spec{Argv: []string{"sh", "-c", "exec >&- 2>&-; read x; exit 3"}, Stdin: true})
	collect(p)
	if p.Collect() {
		t.Fatal("Collect answered true for a leader that is still alive")
	}
	select {
	case <-p.Done():
		t.Fatal("Done closed for a leader that is still alive")
	default:
	}
	p.Stdin.Close()
	if st := waitCollected(t, p); st.Code != 3 {
		t.Fatalf("exit %d; want 3", st.Code)
	}
	p.Release()

	orphans := r.OrphansReaped()
	const workers, rounds = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				code := (w*rounds + i) % 100
				p, err := r.Start(Spec{Argv: []string{"sh", "-c", "echo hi; exit " + strconv.Itoa(code)}})
				if err != nil {
					errs <- err
					return
				}
				collect(p)
				if st := waitCollected(t, p); st.Code != code {
					errs <- fmt.Errorf("pid %d: exit %d; want %d", p.Pid, st.Code, code)
				}
				p.Release()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := r.OrphansReaped(); got != orphans {
		t.Errorf("%d orphans reaped during the rounds; want none (an exit was collected twice or lost to the loop)", got-orphans)
	}
}

// waitCollected calls Collect until it answers true or Done is closed, and
// returns the exit status.
func waitCollected(t *testing.T, p *Process) ExitStatus {
	deadline := time.After(waitTimeout)
	for !p.Collect() {
		select {
		case <-p.Done():
			return p.Exit()
		case <-time.After(time.Millisecond): // the next look at the zombie
		case <-deadline:
			t.Errorf("pid %d not collected within %v", p.Pid, waitTimeout)
			return ExitStatus{}
		}
	}
	return p.Exit()
}
