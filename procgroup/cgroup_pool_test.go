//go:build linux

package procgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// waitRemoved polls until dir is gone (the cgroup worker removes released
// cgroups off the caller's path, in batches: r.cg is kicked as the next
// refill would), failing after waitTimeout.
func waitRemoved(t *testing.T, r *Reaper, dir, after string) {
	t.Helper()
	r.cg.kick()
	deadline := time.Now().Add(waitTimeout)
	for {
		_, err := os.Stat(dir)
		if os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("cgroup %s still exists %v after %s: %v", dir, waitTimeout, after, err)
			return
		}
		pollPause()
	}
}

// waitPoolFull kicks the worker (as a create would) and polls until it has
// filled the pool.
func waitPoolFull(t *testing.T, r *Reaper) {
	t.Helper()
	r.cg.kick()
	deadline := time.Now().Add(waitTimeout)
	for len(r.cg.pool) < cap(r.cg.pool) {
		if time.Now().After(deadline) {
			t.Fatalf("pool has %d of %d cgroups after %v", len(r.cg.pool), cap(r.cg.pool), waitTimeout)
		}
		pollPause()
	}
}

// TestCgroupPoolFreshPerCommand: more commands than the pool holds, each
// blocked on stdin while it is inspected, each get a cgroup that no command
// had before, whose only member is the command and whose counters start at
// zero; every used cgroup is removed after Release, and Close removes the
// pool's unused ones with the tree.
func TestCgroupPoolFreshPerCommand(t *testing.T) {
	r := cgroupReaper(t)
	base := r.Isolation().Cgroup
	waitPoolFull(t, r)
	used := map[string]bool{}
	for i := 0; i < 2*poolSize+3; i++ {
		p := start(t, r, Spec{Argv: []string{"cat"}, Env: os.Environ(), Stdin: true})
		dir := p.cg.dir
		if used[dir] {
			t.Fatalf("command %d got cgroup %s, which an earlier command ran in", i, dir)
		}
		used[dir] = true
		if filepath.Dir(dir) != filepath.Join(base, "commands") {
			t.Errorf("command %d: cgroup %s not under %s/commands", i, dir, base)
		}
		procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Fields(string(procs)); len(got) != 1 || got[0] != strconv.Itoa(p.Pid) {
			t.Errorf("command %d (pid %d): cgroup.procs of %s = %q; want only the command", i, p.Pid, dir, got)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "memory.events")); err == nil {
			if n := counter(b, "oom_kill"); n != 0 {
				t.Errorf("command %d: oom_kill = %d in a fresh cgroup", i, n)
			}
		}
		if b, err := os.ReadFile(filepath.Join(dir, "pids.peak")); err == nil {
			if strings.TrimSpace(string(b)) != "1" {
				t.Errorf("command %d: pids.peak = %q in a fresh cgroup with one process", i, b)
			}
		}
		p.Stdin.Close()
		if st := wait(t, p); st.Code != 0 || st.OOMKilled {
			t.Errorf("command %d: exit %+v", i, st)
		}
		p.Release()
	}
	for dir := range used {
		waitRemoved(t, r, dir, "Release")
	}
	waitPoolFull(t, r)
	pooled, _ := filepath.Glob(filepath.Join(base, "commands", "c[0-9]*"))
	if len(pooled) < poolSize {
		t.Errorf("%d command cgroups with a full pool: %q", len(pooled), pooled)
	}
	r.Close()
	for _, d := range pooled {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("pooled cgroup %s still exists after Close: %v", d, err)
		}
	}
	if _, err := os.Stat(base); !os.IsNotExist(err) {
		t.Errorf("cgroup tree %s still exists after Close: %v", base, err)
	}
}

// TestCgroupPoolEmptyFallsBack: with no worker and an empty pool, Start makes
// the command's cgroup itself, and a release removes it at once.
func TestCgroupPoolEmptyFallsBack(t *testing.T) {
	r := cgroupReaper(t)
	waitPoolFull(t, r)
	r.cg.stopWorker() // removes the pool's cgroups
	if n := len(r.cg.pool); n != 0 {
		t.Fatalf("pool has %d cgroups after stopWorker", n)
	}
	p := start(t, r, Spec{Argv: []string{"true"}, Env: os.Environ()})
	if st := wait(t, p); st.Code != 0 {
		t.Errorf("exit %+v", st)
	}
	dir := p.cg.dir
	if !strings.HasPrefix(filepath.Base(dir), "c") {
		t.Errorf("command cgroup %q; want one of its own", dir)
	}
	p.Release()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cgroup %s still exists after Release with no worker: %v", dir, err)
	}
	r.Close()
}

// BenchmarkCgroupStart: Start → reap → Release of `true` in cgroup mode, with
// the pool (mkdir and rmdir in the worker) and without it (both in the
// caller's path: Start makes the cgroup, Release removes it).
func BenchmarkCgroupStart(b *testing.B) {
	for _, mode := range []string{"pool", "mkdir"} {
		b.Run(mode, func(b *testing.B) {
			r, err := NewReaper(zap.NewNop())
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			if err := r.UseCgroups(CgroupOptions{}); err != nil {
				b.Skipf("no cgroup mode here: %v", err)
			}
			if mode == "mkdir" {
				r.cg.stopWorker()
			}
			env := os.Environ()
			for b.Loop() {
				p, err := r.Start(Spec{Argv: []string{"/bin/true"}, Env: env})
				if err != nil {
					b.Fatal(err)
				}
				<-p.Done()
				p.Stdout.Close()
				p.Stderr.Close()
				p.Release()
			}
		})
	}
}

// BenchmarkCgroupMakeRemove: what the pool takes off a command's path, the
// mkdir and open of its cgroup and the rmdir at its release.
func BenchmarkCgroupMakeRemove(b *testing.B) {
	r, err := NewReaper(zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	if err := r.UseCgroups(CgroupOptions{}); err != nil {
		b.Skipf("no cgroup mode here: %v", err)
	}
	r.cg.stopWorker()
	for b.Loop() {
		pc, err := r.cg.makeCgroup()
		if err != nil {
			b.Fatal(err)
		}
		unix.Close(pc.fd)
		r.cg.release(&cmdCgroup{dir: pc.dir})
	}
}

// BenchmarkKilledAtForkLiveChild: what killedAtFork adds to the start of a
// command that exec'd (a waitid and a process_vm_readv probe; 2.2 µs with a
// read of /proc/<pid>/statm instead, 0.7 µs with the probe, on the dev VM).
func BenchmarkKilledAtForkLiveChild(b *testing.B) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for b.Loop() {
		if killedAtFork(cmd.Process.Pid) {
			b.Fatal("a live child taken for one killed at fork")
		}
	}
}

// TestKilledAtForkProbes: the two probes killedAtFork judges by, on real
// children: hasMM (process_vm_readv) agrees with /proc/<pid>/statm on a
// live process (an mm) and on a SIGKILLed zombie (none), and zombieState
// tells a SIGKILL from an exit; neither child is taken for one killed at
// fork (they exec'd: their comm is not the runtime's).
func TestKilledAtForkProbes(t *testing.T) {
	live := exec.Command("sleep", "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { live.Process.Kill(); live.Wait() }()
	pid := live.Process.Pid
	if z, _ := zombieState(pid); z || !hasMM(pid) || !hasMMStatm(pid) {
		t.Fatalf("live child: zombie %v, hasMM %v, statm %v; want false, true, true", z, hasMM(pid), hasMMStatm(pid))
	}
	if killedAtFork(pid) {
		t.Fatal("a live child taken for one killed at fork")
	}
	live.Process.Signal(unix.SIGKILL)
	if !waitExited(pid, 10*time.Second) {
		t.Fatal("the killed child never became a zombie")
	}
	if z, k := zombieState(pid); !z || !k || hasMM(pid) || hasMMStatm(pid) {
		t.Fatalf("SIGKILLed zombie: zombie %v, sigkilled %v, hasMM %v, statm %v; want true, true, false, false", z, k, hasMM(pid), hasMMStatm(pid))
	}
	if killedAtFork(pid) {
		t.Fatal("a child SIGKILLed after its exec taken for one killed at fork")
	}

	exited := exec.Command("true")
	if err := exited.Start(); err != nil {
		t.Fatal(err)
	}
	if !waitExited(exited.Process.Pid, 10*time.Second) {
		t.Fatal("true never became a zombie")
	}
	if z, k := zombieState(exited.Process.Pid); !z || k {
		t.Errorf("exited zombie: zombie %v, sigkilled %v; want true, false", z, k)
	}
	exited.Wait()
}
