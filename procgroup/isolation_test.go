//go:build linux

package procgroup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nsHelperEnv names the inner test that runs inside a new PID namespace.
const nsHelperEnv = "PROCGROUP_NS_HELPER"

// nsMarker is printed by an inner test when every check inside passed.
const nsMarker = "PROCGROUP-NS-OK"

// runInPidNS runs the test function inner of this binary as PID 1 of a new PID
// namespace (with its own /proc), with the namespace's pid_max set to pidMax
// when it is not 0 (Linux 6.14+ has one pid_max per namespace), and fails t
// unless it passed.
func runInPidNS(t *testing.T, inner string, pidMax int) {
	r := newReaper(t)
	script := `exec "$0" "$@"`
	if pidMax > 0 {
		script = fmt.Sprintf(`echo %d > /proc/sys/kernel/pid_max || { echo "cannot set the namespace's pid_max" >&2; exit 97; }; exec "$0" "$@"`, pidMax)
	}
	spec := Spec{
		Argv: []string{"unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script,
			selfExe(), "-test.run=^" + inner + "$", "-test.v", "-test.count=1", "-test.timeout=2m"},
		Env: environWith(nsHelperEnv + "=" + inner),
	}
	p, err := r.Start(spec)
	if err != nil {
		t.Skipf("cannot run unshare (util-linux): %v", err)
	}
	outc := make(chan [2]string, 1)
	go func() {
		o, e := collect(p)
		outc <- [2]string{o, e}
	}()
	var out [2]string
	select {
	case out = <-outc:
	case <-time.After(3 * time.Minute):
		p.Terminate(context.Background(), time.Second)
		out = <-outc
		t.Fatalf("inner test did not finish; stdout:\n%s\nstderr:\n%s", out[0], out[1])
	}
	st := wait(t, p)
	if st.Code != 0 && strings.Contains(out[1], "unshare failed") && strings.Contains(out[1], "Operation not permitted") {
		t.Skipf("creating a PID namespace is not permitted here (needs CAP_SYS_ADMIN): %s", strings.TrimSpace(out[1]))
	}
	if st.Code == 97 {
		t.Skipf("this kernel has no per-namespace pid_max (Linux 6.14+): %s", strings.TrimSpace(out[1]))
	}
	if st.Code != 0 || !strings.Contains(out[0], nsMarker) {
		t.Fatalf("inner test %s: Code %d\nstdout:\n%s\nstderr:\n%s", inner, st.Code, out[0], out[1])
	}
	t.Logf("%s as PID 1:\n%s", inner, out[0])
}

// innerOnly skips an inner test run on its own.
func innerOnly(t *testing.T) {
	if os.Getenv(nsHelperEnv) != t.Name() {
		t.Skip("runs only inside the namespace its outer test creates")
	}
	if os.Getpid() != 1 {
		t.Fatalf("Getpid() = %d; want 1", os.Getpid())
	}
}

// TestPIDReuseNeverSignalsAnotherCommand: once command A's group is empty, its
// number may be given to command B, which leads a group of its own with it.
// A signal for A must answer ErrGroupGone and must not reach B (issue 10
// item 6: in the grace after A's leader exits, kill(-pgid) reached B).
func TestPIDReuseNeverSignalsAnotherCommand(t *testing.T) {
	runInPidNS(t, "TestPIDReuseHelper", 0)
}

func TestPIDReuseHelper(t *testing.T) {
	innerOnly(t)
	r, err := NewReaper(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var orphans uint64
	for _, tc := range []struct{ name, script string }{
		// The case: the only other member left the group (setsid), so
		// the group is empty the moment the leader is reaped.
		{"setsid escapee", "setsid sleep 60 & echo $!"},
		// A member outlives the leader, then dies: the group empties later.
		{"member dies after the leader", "sleep 60 & echo $!"},
	} {
		a, err := r.Start(Spec{Argv: []string{"sh", "-c", tc.script}, Env: os.Environ()})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		line, _ := bufio.NewReader(a.Stdout).ReadString('\n')
		member, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil {
			t.Fatalf("%s: member pid %q: %v", tc.name, line, err)
		}
		a.Stdout.Close()
		a.Stderr.Close()
		<-a.Done()
		// The member (an orphan now, reparented to us) holds the pipes no
		// more; end it by its own pid and wait until it is reaped, so that A's
		// number is free.
		if err := syscall.Kill(member, syscall.SIGKILL); err != nil {
			t.Fatalf("%s: kill member %d: %v", tc.name, member, err)
		}
		orphans++
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := r.WaitOrphans(ctx, orphans); err != nil {
			t.Fatalf("%s: member not reaped: %v", tc.name, err)
		}
		cancel()

		// Give A's number to B, a command that leads its own group.
		var b *Process
		for range 50 {
			if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(a.Pid-1)), 0); err != nil {
				t.Fatalf("ns_last_pid: %v", err)
			}
			p, err := r.Start(Spec{Argv: []string{"sleep", "60"}, Env: os.Environ()})
			if err != nil {
				t.Fatal(err)
			}
			if p.Pid == a.Pid {
				b = p
				break
			}
			p.Signal(syscall.SIGKILL)
			<-p.Done()
			p.Stdout.Close()
			p.Stderr.Close()
			p.Release()
		}
		if b == nil {
			t.Fatalf("%s: could not give pid %d to a new command", tc.name, a.Pid)
		}
		if err := a.Signal(syscall.SIGTERM); !errors.Is(err, ErrGroupGone) {
			t.Errorf("%s: A.Signal(SIGTERM) after its group emptied, with B holding its number: got %v; want ErrGroupGone", tc.name, err)
		}
		a.Terminate(context.Background(), 0)
		a.Release()
		// A SIGTERM that reached B set its exit status at once (default action);
		// our own SIGKILL comes second and cannot change it.
		if err := b.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("%s: B.Signal(SIGKILL): %v", tc.name, err)
		}
		<-b.Done()
		b.Stdout.Close()
		b.Stderr.Close()
		b.Release()
		if got := b.Exit().Signal; got != syscall.SIGKILL {
			t.Errorf("%s: B (pid %d, A's recycled number) ended by %v; want SIGKILL from its own owner (a signal for A reached B)", tc.name, b.Pid, got)
		}
	}
	if !t.Failed() {
		fmt.Println(nsMarker, "pidfd group signals:", pidfdGroupSignals())
	}
}

// TestForkLimitIsAnError: a command that fills the pid namespace (pid_max
// 400) makes the next Start fail with EAGAIN (or ENOMEM) naming the limit;
// the runtime keeps working (its threads were made up front), and Terminate
// ends the storm, after which commands start again.
func TestForkLimitIsAnError(t *testing.T) {
	runInPidNS(t, "TestForkLimitHelper", 400)
}

func TestForkLimitHelper(t *testing.T) {
	innerOnly(t)
	threads := ReserveThreads(DefaultReservedThreads)
	r, err := NewReaper(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	storm, err := r.Start(Spec{Argv: []string{"sh", "-c", "for i in $(seq 500); do sleep 60 & done; wait"}, Env: os.Environ()})
	if err != nil {
		t.Fatal(err)
	}
	defer storm.Release()
	// The shell says "Cannot fork" once the namespace is full (and exits; its
	// sleeps stay, in its process group).
	line, _ := bufio.NewReader(storm.Stderr).ReadString('\n')
	if !strings.Contains(line, "fork") {
		t.Fatalf("storm said %q; want a fork failure", line)
	}
	_, err = r.Start(Spec{Argv: []string{"true"}, Env: os.Environ()})
	var se *StartError
	if !errors.As(err, &se) || (se.Errno != syscall.EAGAIN && se.Errno != syscall.ENOMEM) {
		t.Fatalf("Start while the namespace is full: got %v; want a *StartError with EAGAIN or ENOMEM", err)
	}
	if !strings.Contains(se.Limit, "pid_max 400") {
		t.Errorf("StartError.Limit = %q; want it to name pid_max 400", se.Limit)
	}
	t.Logf("error: %v", err)
	// The Go runtime still works with concurrency that needs threads: 48
	// goroutines blocked in syscalls at once (pipe reads without the poller),
	// each holding a thread, while the namespace has no pid to spare.
	var fds [][2]int
	for range 48 {
		var p [2]int
		if err := syscall.Pipe(p[:]); err != nil {
			t.Fatal(err)
		}
		fds = append(fds, p)
	}
	done := make(chan struct{}, len(fds))
	for _, p := range fds {
		go func() {
			var b [1]byte
			syscall.Read(p[0], b[:]) // blocks its thread until written
			done <- struct{}{}
		}()
	}
	want := map[string]bool{}
	for _, p := range fds {
		want[fmt.Sprintf("0 %#x ", p[0])] = true // read(2) on that fd, from /proc/…/syscall
	}
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; n < len(fds); n = tasksIn(want) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d goroutines blocked in read(2) after 30 s", n, len(fds))
		}
		pollPause()
	}
	for _, p := range fds {
		syscall.Write(p[1], []byte{1})
	}
	for range fds {
		<-done
	}
	for _, p := range fds {
		syscall.Close(p[0])
		syscall.Close(p[1])
	}
	storm.Terminate(context.Background(), 0)
	<-storm.Done()
	storm.Stdout.Close()
	storm.Stderr.Close()
	// The storm's sleeps are orphans now, killed with the group: once they are
	// reaped, commands start again.
	var p *Process
	deadline = time.Now().Add(30 * time.Second)
	for p == nil && time.Now().Before(deadline) {
		p, err = r.Start(Spec{Argv: []string{"true"}, Env: os.Environ()})
		if err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.ENOMEM) {
			t.Fatal(err)
		}
		if p == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			r.WaitOrphans(ctx, r.OrphansReaped()+1)
			cancel()
		}
	}
	if p == nil {
		t.Fatalf("Start still fails 30 s after the storm was terminated: %v", err)
	}
	collect(p)
	<-p.Done()
	if !t.Failed() {
		fmt.Println(nsMarker, "threads reserved:", threads)
	}
}

// cgroupReaper returns a Reaper in cgroup mode (tree under the test's own
// cgroup v2; the test process stays where it is), or skips where no
// writable cgroup v2 tree with cgroup.kill exists.
func cgroupReaper(t *testing.T) *Reaper {
	r := newReaper(t)
	if err := r.UseCgroups(CgroupOptions{}); err != nil {
		t.Skipf("no writable cgroup v2 tree with cgroup.kill here: %v (%s)", err, r.Isolation().Reason)
	}
	if iso := r.Isolation(); iso.Mode != ModeCgroup || iso.Cgroup == "" {
		t.Fatalf("Isolation() = %+v; want cgroup mode with a tree", iso)
	}
	return r
}

// TestCgroupKillEndsSetsidEscapee: in cgroup mode the command runs in a cgroup
// of its own, and Terminate ends a descendant that left the process group
// with setsid (unreachable by a group signal); Release and Close remove
// every cgroup the Reaper made.
func TestCgroupKillEndsSetsidEscapee(t *testing.T) {
	r := cgroupReaper(t)
	base := r.Isolation().Cgroup
	p := start(t, r, Spec{Argv: []string{"sh", "-c", "setsid sleep 300 & echo $!; wait"}, Env: os.Environ()})
	line, _ := bufio.NewReader(p.Stdout).ReadString('\n')
	escapee, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("escapee pid %q: %v", line, err)
	}
	t.Cleanup(func() {
		if alive(escapee) {
			syscall.Kill(escapee, syscall.SIGKILL)
		}
	})
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.Pid))
	if !strings.Contains(string(cg), filepath.Base(base)+"/commands/c") {
		t.Errorf("leader's /proc/%d/cgroup = %q; want it under %s/commands", p.Pid, cg, base)
	}
	// setsid runs in the background job: wait until it has left the group.
	deadline := time.Now().Add(10 * time.Second)
	for pg, _ := syscall.Getpgid(escapee); pg != escapee; pg, _ = syscall.Getpgid(escapee) {
		if time.Now().After(deadline) {
			t.Fatalf("escapee %d has pgid %d; want its own group (setsid)", escapee, pg)
		}
		pollPause()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.Terminate(ctx, 200*time.Millisecond)
	wait(t, p)
	if err := r.WaitOrphans(ctx, 1); err != nil {
		t.Errorf("the setsid escapee %d was not killed and reaped: %v", escapee, err)
	}
	if alive(escapee) {
		t.Errorf("setsid escapee %d still alive after Terminate", escapee)
	}
	dir := p.cg.dir
	p.Release()
	waitRemoved(t, r, dir, "Release") // by the cgroup worker, off the caller's path
	r.Close()
	if _, err := os.Stat(base); !os.IsNotExist(err) {
		t.Errorf("cgroup tree %s still exists after Close: %v", base, err)
	}
}

// TestCgroupLingeringRemovedWhenEmpty: a command whose leader exits while a
// setsid descendant lives on keeps its cgroup until that descendant has gone.
func TestCgroupLingeringRemovedWhenEmpty(t *testing.T) {
	r := cgroupReaper(t)
	p := start(t, r, Spec{Argv: []string{"sh", "-c", "setsid sleep 300 & echo $!"}, Env: os.Environ()})
	line, _ := bufio.NewReader(p.Stdout).ReadString('\n')
	escapee, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("escapee pid %q: %v", line, err)
	}
	wait(t, p)
	dir := p.cg.dir
	p.Release()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("cgroup %s removed while the escapee %d lives: %v", dir, escapee, err)
	}
	syscall.Kill(escapee, syscall.SIGKILL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.WaitOrphans(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// The sweep runs in the reap pass that reaped the escapee (or the
	// worker, when it had not tried the released cgroup before).
	waitRemoved(t, r, dir, "its last member was reaped")
}

// TestCloseEndsLeftoversAndNestedCgroups: what outlived its command (a
// background job of a finished command) ends when the Reaper closes, and a
// cgroup the command made inside its own goes with the tree.
func TestCloseEndsLeftoversAndNestedCgroups(t *testing.T) {
	r := cgroupReaper(t)
	base := r.Isolation().Cgroup
	p := start(t, r, Spec{Argv: []string{"sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"}, Env: os.Environ()})
	line, _ := bufio.NewReader(p.Stdout).ReadString('\n')
	left, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("background pid %q: %v", line, err)
	}
	t.Cleanup(func() {
		if alive(left) {
			syscall.Kill(left, syscall.SIGKILL)
		}
	})
	wait(t, p)
	nested := filepath.Join(p.cg.dir, "nested", "deeper")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatalf("a cgroup inside the command's: %v", err)
	}
	p.Release()
	r.Close()
	if alive(left) {
		t.Errorf("background job %d of a finished command is alive after Close", left)
	}
	if _, err := os.Stat(base); !os.IsNotExist(err) {
		t.Errorf("cgroup tree %s still exists after Close (nested cgroup %s): %v", base, nested, err)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

const oomEnv = "PROCGROUP_OOM_HELPER"

// TestOOMKilled runs TestOOMHelper in a v1 memory cgroup limited to 64 MiB
// (or skips where no writable memory controller exists): a command that
// allocates past the limit is reported OOMKilled; one that exits, and one we
// SIGKILL after the OOM kill, are not.
func TestOOMKilled(t *testing.T) {
	parent := v1Dir("memory")
	if parent == "" {
		t.Skip("no cgroup v1 memory controller here")
	}
	dir := filepath.Join(parent, fmt.Sprintf("procgroup-oom-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("the memory controller is not writable here: %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	if err := writeFile(filepath.Join(dir, "memory.limit_in_bytes"), strconv.Itoa(64<<20)); err != nil {
		t.Fatal(err)
	}
	if f := filepath.Join(dir, "memory.memsw.limit_in_bytes"); fileExists(f) {
		writeFile(f, strconv.Itoa(64<<20))
	}
	r := newReaper(t)
	spec := Spec{
		Argv:  []string{selfExe(), "-test.run=^TestOOMHelper$", "-test.v", "-test.count=1", "-test.timeout=2m"},
		Env:   environWith(oomEnv + "=1"),
		Stdin: true,
	}
	p := start(t, r, spec)
	if err := writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(p.Pid)); err != nil {
		t.Fatalf("moving the helper into %s: %v", dir, err)
	}
	p.Stdin.Write([]byte("go\n"))
	out, errOut := collect(p)
	st := wait(t, p)
	if st.Code != 0 || !strings.Contains(out, "OOM-OK") {
		t.Fatalf("inner test: Code %d\nstdout:\n%s\nstderr:\n%s", st.Code, out, errOut)
	}
	t.Logf("inner:\n%s", out)
}

func TestOOMHelper(t *testing.T) {
	if os.Getenv(oomEnv) != "1" {
		t.Skip("runs only inside the memory cgroup TestOOMKilled creates")
	}
	bufio.NewReader(os.Stdin).ReadString('\n') // moved into the cgroup
	r, err := NewReaper(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	run := func(args ...string) *Process {
		spec := helper(args...)
		spec.Stdin = true
		p, err := r.Start(spec)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	bystander := run("hang")
	ok := run("alloc", "8")
	ok.Stdin.Write([]byte("\n"))
	collect(ok)
	<-ok.Done()
	if st := ok.Exit(); st.Code != 0 || st.OOMKilled {
		t.Errorf("8 MiB under a 64 MiB limit: %+v; want exit 0, not OOMKilled", st)
	}
	hog := run("alloc", "1024")
	hog.Stdin.Write([]byte("\n"))
	collect(hog)
	<-hog.Done()
	if st := hog.Exit(); st.Signal != syscall.SIGKILL || !st.OOMKilled {
		t.Errorf("1 GiB under a 64 MiB limit: %+v; want SIGKILL with OOMKilled", st)
	}
	bystander.Signal(syscall.SIGKILL)
	collect(bystander)
	<-bystander.Done()
	if st := bystander.Exit(); st.Signal != syscall.SIGKILL || st.OOMKilled {
		t.Errorf("a command we SIGKILLed after the OOM kill: %+v; want SIGKILL, not OOMKilled", st)
	}
	for _, p := range []*Process{ok, hog, bystander} {
		p.Stdin.Close()
		p.Release()
	}
	if !t.Failed() {
		fmt.Println("OOM-OK counter:", oomCounterFile())
	}
}

// pollPause is the interval of a poll loop that waits for another process
// or the cgroup worker (states no event announces): a pause, not a spin
// (runtime.Gosched kept a CPU busy that the processes waited for need).
func pollPause() { <-time.After(time.Millisecond) }

// tasksIn counts the threads of this process whose current system call (from
// /proc/self/task/*/syscall) starts with one of the prefixes in want.
func tasksIn(want map[string]bool) int {
	tasks, _ := os.ReadDir("/proc/self/task")
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/syscall")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 1 && want[f[0]+" "+f[1]+" "] {
			n++
		}
	}
	return n
}

// TestRemoveStaleTrees: a tree whose daemon leaf is empty (its runtime was
// killed, or exited while a command cgroup still had members) is removed at
// the next start; a tree whose daemon leaf has a process is left alone.
func TestRemoveStaleTrees(t *testing.T) {
	mount, own, err := ownCgroup2()
	if err != nil {
		t.Skipf("no cgroup v2 mount: %v", err)
	}
	root := filepath.Join(mount, own)
	// A pid above any pid_max (2^22) is no process: the stale tree's owner
	// is gone. The live trees carry this test's own pid.
	stale := filepath.Join(root, fmt.Sprintf("sandbox-runtime-%d-stale", 1<<23))
	live := filepath.Join(root, fmt.Sprintf("sandbox-runtime-%d-live", os.Getpid()))
	// building: a runtime that has made its empty daemon leaf and not yet
	// moved in (its owner is alive): another runtime must leave it alone.
	building := filepath.Join(root, fmt.Sprintf("sandbox-runtime-%d-building", os.Getpid()))
	// The live tree's daemon leaf is made last, just before a process is
	// moved into it: a tree with an empty daemon leaf is stale by
	// definition, and a runtime starting meanwhile on this machine would
	// remove it.
	t.Cleanup(func() {
		for _, d := range []string{building + "/commands/c1", building + "/commands", building + "/daemon", building} {
			os.Remove(d)
		}
	})
	for _, d := range []string{stale, stale + "/daemon", stale + "/commands", stale + "/commands/c1",
		live, live + "/commands", building, building + "/daemon", building + "/commands", building + "/commands/c1"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			os.Remove(stale + "/commands/c1")
			os.Remove(stale + "/commands")
			os.Remove(stale + "/daemon")
			os.Remove(stale)
			t.Skipf("the cgroup v2 tree is not writable here: %v", err)
		}
	}
	r := newReaper(t)
	p := start(t, r, Spec{Argv: []string{"sleep", "300"}, Env: os.Environ()})
	t.Cleanup(func() {
		p.Signal(syscall.SIGKILL)
		<-p.Done()
		p.Release()
		// Once the sleep has left its leaf the live tree is stale too, and
		// another runtime's removeStale may have removed it first.
		for _, d := range []string{live + "/daemon", live + "/commands", live} {
			if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	if err := os.Mkdir(live+"/daemon", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(live+"/daemon/cgroup.procs", strconv.Itoa(p.Pid)); err != nil {
		t.Fatal(err)
	}
	removeStale(root)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale tree %s still exists: %v", stale, err)
	}
	if _, err := os.Stat(live + "/commands"); err != nil {
		t.Errorf("the live tree lost %s/commands: %v", live, err)
	}
	if _, err := os.Stat(building + "/commands/c1"); err != nil {
		t.Errorf("the tree of a runtime still building it (empty daemon leaf, owner alive) lost %s/commands/c1: %v", building, err)
	}
	// The sleep must leave the live tree's leaf before it can be removed.
	writeFile(filepath.Join(root, "cgroup.procs"), strconv.Itoa(p.Pid))
}

// TestRemoveStalePID1Tree (issue 20 item 13): the tree of a PID-1 runtime
// that was killed names pid 1, which is always alive; its start time in
// the name tells it from the pid 1 alive now, so it is removed as stale.
// A tree whose owner (pid and start time) is alive stays, and so does one
// whose owner started under staleBuildAge ago (it may be moving in).
func TestRemoveStalePID1Tree(t *testing.T) {
	mount, own, err := ownCgroup2()
	if err != nil {
		t.Skipf("no cgroup v2 mount: %v", err)
	}
	root := filepath.Join(mount, own)
	// The dead owner's start time is older than staleBuildAge and is not
	// the start of the pid 1 alive now (under make test, pid 1 is the init
	// of the test binary's own PID namespace, started a moment ago).
	deadStart := uptimeTicks() - 2*uint64(staleBuildAge/time.Second)*clockTicks
	if deadStart == startTime(1) {
		deadStart--
	}
	dead := filepath.Join(root, fmt.Sprintf("sandbox-runtime-1-%d-deadbeef", deadStart))
	deadOld := filepath.Join(root, "sandbox-runtime-1-0ldf0rm") // the older names
	alive := filepath.Join(root, fmt.Sprintf("sandbox-runtime-1-%d-a11ce000", startTime(1)))
	young := filepath.Join(root, fmt.Sprintf("sandbox-runtime-%d-%d-0000babe", 1<<23, uptimeTicks()))
	if uptimeTicks() < 4*uint64(staleBuildAge/time.Second)*clockTicks {
		t.Skip("the machine booted under 20 s ago")
	}
	t.Cleanup(func() {
		for _, b := range []string{dead, deadOld, alive, young} {
			for _, d := range []string{b + "/commands/c1", b + "/commands", b + "/daemon-2", b + "/daemon", b} {
				os.Remove(d)
			}
		}
	})
	for _, b := range []string{dead, deadOld, alive, young} {
		for _, d := range []string{b, b + "/daemon", b + "/daemon-2", b + "/commands", b + "/commands/c1"} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Skipf("the cgroup v2 tree is not writable here: %v", err)
			}
		}
	}
	removeStale(root)
	for _, b := range []string{dead, deadOld} {
		if _, err := os.Stat(b); !os.IsNotExist(err) {
			t.Errorf("the tree of a dead PID-1 runtime %s still exists: %v", b, err)
		}
	}
	for _, b := range []string{alive, young} {
		if _, err := os.Stat(b + "/commands/c1"); err != nil {
			t.Errorf("%s lost its command cgroup: %v", b, err)
		}
	}
}

// TestRemoveStaleOtherPIDNamespaceTree (D2): a tree names the pid namespace
// of its owner. A tree of another pid namespace is judged by its daemon
// leaves alone, never by a pid and start time looked up here: its pid 1 is
// not ours. Before, such a name was read as pid and start time: a tree of
// another namespace whose pid and start time matched a process here was
// kept as alive, and (the attack) a live one whose leaves a command had
// emptied was taken for a dead runtime's of this namespace.
func TestRemoveStaleOtherPIDNamespaceTree(t *testing.T) {
	mount, own, err := ownCgroup2()
	if err != nil {
		t.Skipf("no cgroup v2 mount: %v", err)
	}
	if pidNamespace() == 0 {
		t.Skip("no /proc/self/ns/pid here")
	}
	if uptimeTicks() < 4*uint64(staleBuildAge/time.Second)*clockTicks {
		t.Skip("the machine booted under 20 s ago")
	}
	root := filepath.Join(mount, own)
	other := pidNamespace() + 1
	// The foreign owners started long enough ago not to count as still
	// moving in (under make test, pid 1 here is the init of the test's
	// own PID namespace, which started a moment ago).
	old := uptimeTicks() - 2*uint64(staleBuildAge/time.Second)*clockTicks
	foreign := filepath.Join(root, fmt.Sprintf("sandbox-runtime-1-%d-%d-f0e19000", old, other))
	ours := filepath.Join(root, fmt.Sprintf("sandbox-runtime-1-%d-%d-0a5e0000", startTime(1), pidNamespace()))
	busyForeign := filepath.Join(root, fmt.Sprintf("sandbox-runtime-1-%d-%d-b5e00000", old-1, other))
	t.Cleanup(func() {
		for _, b := range []string{foreign, ours, busyForeign} {
			for _, d := range []string{b + "/commands/c1", b + "/commands", b + "/daemon", b} {
				os.Remove(d)
			}
		}
	})
	for _, b := range []string{foreign, ours, busyForeign} {
		for _, d := range []string{b, b + "/daemon", b + "/commands", b + "/commands/c1"} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Skipf("the cgroup v2 tree is not writable here: %v", err)
			}
		}
	}
	// A process in the foreign tree's command cgroup: rmdir cannot remove
	// a populated cgroup, so that tree must stay whatever its name says.
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	if err := writeFile(busyForeign+"/commands/c1/cgroup.procs", strconv.Itoa(sleeper.Process.Pid)); err != nil {
		t.Skipf("cannot move a process into a test cgroup: %v", err)
	}
	removeStale(root)
	if _, err := os.Stat(foreign); !os.IsNotExist(err) {
		t.Errorf("the tree of another pid namespace with empty leaves %s still exists (judged by a pid and start time of this namespace): %v", foreign, err)
	}
	if _, err := os.Stat(ours + "/commands/c1"); err != nil {
		t.Errorf("the tree of a live owner of this namespace lost its command cgroup: %v", err)
	}
	if _, err := os.Stat(busyForeign + "/commands/c1"); err != nil {
		t.Errorf("a populated command cgroup of another namespace's tree was removed: %v", err)
	}
}
