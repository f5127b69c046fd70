//go:build reliability && linux

package reliability

import (
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPID1Orphans runs the daemon as PID 1 of a new PID namespace, runs
// commands that orphan a grandchild through the API from 8 clients, and
// checks that every orphan is reaped: no zombie inside the namespace (seen
// from inside with a final command, and from the host through /proc), and
// orphans_reaped_total >= the number of orphans.
func TestPID1Orphans(t *testing.T) {
	if out, err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("SKIP: cannot create a PID namespace here (unshare --pid --fork --mount-proc needs CAP_SYS_ADMIN): %v %s", err, out)
	}
	d := startDaemon(t, daemonConfig{pidNS: true})
	n := 1000
	const clients = 8
	var next atomic.Int64
	var errs errSet
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				st, err := d.create(map[string]any{"argv": []string{"sh", "-c", "sleep 0.01 & exit 0"}})
				if err != nil {
					errs.add("%v", err)
					continue
				}
				fin, err := d.waitFinished(st.CommandID, 30*time.Second)
				if err != nil {
					errs.add("%v", err)
					continue
				}
				if fin.State != "exited" || fin.exitCode() != 0 {
					errs.add("command %s: %s exit %d", st.CommandID, fin.State, fin.exitCode())
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	errs.report(t, "failed orphaning commands")

	var reaped float64
	ok, _ := poll(15*time.Second, 20*time.Millisecond, func() (bool, string) {
		m, err := d.metrics()
		if err != nil {
			return false, err.Error()
		}
		reaped = m["sandbox_runtime_orphans_reaped_total"]
		return reaped >= float64(n), ""
	})
	if !ok {
		t.Errorf("orphans_reaped_total %v; want >= %d", reaped, n)
	}

	// Zombies seen from the host: every process of the namespace descends
	// from the daemon (PID 1 there).
	var hostZombies []procInfo
	var firstHost int
	first := true
	poll(3*time.Second, 10*time.Millisecond, func() (bool, string) {
		hostZombies = zombies(descendants(d.pid))
		if first {
			firstHost, first = len(hostZombies), false
		}
		return len(hostZombies) == 0, ""
	})

	// Zombies seen from inside, by a last command.
	st := d.mustCreate(map[string]any{"argv": []string{"sh", "-c", `grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l; echo pid1=$(cat /proc/1/comm)`}})
	fin := d.mustWaitFinished(st.CommandID, 20*time.Second)
	evs, err := d.output(st.CommandID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, e := range evs {
		if e.Type == "output" && e.Stream == "stdout" {
			out.WriteString(e.Data)
		}
	}
	lines := strings.Fields(out.String())
	inside := "?"
	if len(lines) > 0 {
		inside = lines[0]
	}
	figure(t, "pid1: %d orphaning commands by %d clients in %v (%.0f/s); orphans_reaped_total %v; zombies inside the namespace %s (%s), from the host %d (first look %d)",
		n, clients, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), reaped, inside, strings.Join(lines[1:], " "), len(hostZombies), firstHost)
	if fin.exitCode() != 0 || inside != "0" {
		t.Errorf("zombies inside the namespace: %q (exit %d)", out.String(), fin.exitCode())
	}
	if len(lines) < 2 || lines[1] != "pid1=sandbox-runtime" {
		t.Errorf("PID 1 of the namespace is not the daemon: %q", out.String())
	}
	if len(hostZombies) > 0 {
		t.Errorf("zombies below the daemon seen from the host: %+v", hostZombies)
	}

	code, took, err := d.stop(30 * time.Second)
	figure(t, "pid1: SIGTERM to PID 1 -> exit %d in %v", code, took.Round(time.Millisecond))
	if err != nil || code != 0 {
		t.Errorf("stop: exit %d, %v", code, err)
	}
	d.assertCleanLogs()
}
