//go:build reliability && linux

package reliability

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// treeScript builds a process tree of depth 3 and width 5 (1 + 5 + 25
// processes) in the command's group. ignoreTerm makes every member ignore
// SIGTERM (the disposition is inherited), so only SIGKILL ends it.
func treeScript(ignoreTerm bool) string {
	s := `for i in 1 2 3 4 5; do sh -c 'for j in 1 2 3 4 5; do sleep 300 & done; wait' & done; wait`
	if ignoreTerm {
		s = `trap '' TERM; ` + s
	}
	return s
}

const treeSize = 1 + 5 + 25

// TestProcessTrees checks that kill and timeout leave no process in the
// command's group (scanning all of /proc for that pgid), and that a process
// that escaped with setsid is not killed but is reaped when it exits
// (threads mode; in cgroup mode the kill reaches it too, with cgroup.kill).
func TestProcessTrees(t *testing.T) {
	d := startDaemon(t, daemonConfig{env: map[string]string{"SANDBOX_KILL_GRACE_SECONDS": "0.5"}})

	cases := []struct {
		name       string
		ignoreTerm bool
		timeout    float64 // 0: ended by kill
		wantState  wire.State
	}{
		{"kill", false, 0, "cancelled"},
		{"kill-ignoring-SIGTERM", true, 0, "cancelled"},
		{"timeout", false, 1.5, "timed_out"},
		{"timeout-ignoring-SIGTERM", true, 1.5, "timed_out"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := map[string]any{"argv": []string{"sh", "-c", treeScript(c.ignoreTerm)}}
			if c.timeout > 0 {
				body["timeout"] = c.timeout
			}
			st := d.mustCreate(body)
			ok, msg := poll(10*time.Second, 10*time.Millisecond, func() (bool, string) {
				n := len(inGroup(st.PID))
				return n >= treeSize, fmt.Sprintf("%d of %d processes in group %d", n, treeSize, st.PID)
			})
			if !ok {
				t.Fatalf("the tree did not grow: %s", msg)
			}
			grown := len(inGroup(st.PID))
			start := time.Now()
			var fin cmdStatus
			if c.timeout > 0 {
				fin = d.mustWaitFinished(st.CommandID, 20*time.Second)
			} else {
				code, s, err := d.kill(st.CommandID)
				if err != nil || code != http.StatusOK {
					t.Fatalf("kill: %d %v", code, err)
				}
				fin = s
			}
			took := time.Since(start)
			atAnswer := inGroup(st.PID)
			var left []procInfo
			ok, _ = poll(3*time.Second, 5*time.Millisecond, func() (bool, string) {
				left = inGroup(st.PID)
				return len(left) == 0, ""
			})
			gone := time.Since(start)
			figure(t, "proctree %s: %d processes in the group; state %s signal %s after %v; %d left in the group at the answer, 0 after %v",
				c.name, grown, fin.State, deref(fin.Signal), took.Round(time.Millisecond), len(atAnswer), gone.Round(time.Millisecond))
			if fin.State != c.wantState {
				t.Errorf("state %q; want %q", fin.State, c.wantState)
			}
			if !ok {
				t.Errorf("%d processes still in group %d 3 s after the command finished: %+v", len(left), st.PID, left)
			}
		})
	}

	t.Run("escaped-setsid", func(t *testing.T) {
		pidFile := filepath.Join(t.TempDir(), "escaped.pid")
		script := `setsid sh -c 'echo $$ > "$ESC_FILE"; exec sleep 2' </dev/null >/dev/null 2>&1 & exec sleep 300`
		m0 := d.mustMetrics()
		st := d.mustCreate(map[string]any{"argv": []string{"sh", "-c", script}, "envs": map[string]string{"ESC_FILE": pidFile}})
		var esc int
		ok, msg := poll(5*time.Second, 5*time.Millisecond, func() (bool, string) {
			data, err := os.ReadFile(pidFile)
			if err != nil || !strings.HasSuffix(string(data), "\n") {
				return false, "no pid file yet"
			}
			esc, err = strconv.Atoi(strings.TrimSpace(string(data)))
			return err == nil, fmt.Sprint(err)
		})
		if !ok {
			t.Fatalf("escaped pid: %s", msg)
		}
		code, fin, err := d.kill(st.CommandID)
		if err != nil || code != http.StatusOK || fin.State != "cancelled" {
			t.Fatalf("kill: %d %+v %v", code, fin, err)
		}
		p, alive := readProc(esc)
		if d.isolation().Mode == "cgroup" {
			// cgroup mode: the kill ends the command's whole cgroup
			// (cgroup.kill after the grace), the escapee included; it is
			// reaped below like any orphan. SIGKILL is delivered as the
			// kill answers; the process may take a moment to die.
			ok, _ := poll(5*time.Second, 5*time.Millisecond, func() (bool, string) {
				p, alive = readProc(esc)
				return !alive || p.state == 'Z' || p.comm != "sleep", ""
			})
			if !ok {
				t.Errorf("cgroup mode: the escaped process %d survived the kill (%+v); cgroup.kill must reach it", esc, p)
			}
		} else if !alive || p.state == 'Z' {
			t.Fatalf("the escaped process %d was killed (%+v); the group kill must not reach it", esc, p)
		}
		if alive && p.pgid == st.PID {
			t.Fatalf("the escaped process %d is still in group %d", esc, st.PID)
		}
		if left := inGroup(st.PID); len(left) > 0 {
			// Wait for the group's own members only.
			poll(3*time.Second, 5*time.Millisecond, func() (bool, string) { return len(inGroup(st.PID)) == 0, "" })
		}
		// It exits on its own (sleep 2) and must then be reaped: it is an
		// orphan of the daemon, its subreaper.
		var zombieSince time.Time
		var maxZombie time.Duration
		ok, _ = poll(10*time.Second, 5*time.Millisecond, func() (bool, string) {
			p, present := readProc(esc)
			if !present || p.comm != "sleep" { // gone (or the pid was reused)
				return true, ""
			}
			if p.state == 'Z' {
				if zombieSince.IsZero() {
					zombieSince = time.Now()
				}
				maxZombie = time.Since(zombieSince)
			}
			return false, ""
		})
		m1 := d.mustMetrics()
		reaped := m1["sandbox_runtime_orphans_reaped_total"] - m0["sandbox_runtime_orphans_reaped_total"]
		figure(t, "proctree escaped-setsid: survived the group kill (pgid %d != %d); reaped after exit, zombie for %v; orphans_reaped_total +%v",
			p.pgid, st.PID, maxZombie.Round(time.Millisecond), reaped)
		if !ok {
			t.Errorf("the escaped process %d was not reaped within 10 s", esc)
		}
		if reaped < 1 {
			t.Errorf("orphans_reaped_total did not count the escaped process")
		}
		if maxZombie > 1500*time.Millisecond {
			t.Errorf("the escaped process stayed a zombie for %v", maxZombie)
		}
	})

	// No zombie anywhere below the daemon.
	if z := zombies(descendants(d.pid)); len(z) > 0 {
		ok, _ := poll(2*time.Second, 10*time.Millisecond, func() (bool, string) { return len(zombies(descendants(d.pid))) == 0, "" })
		if !ok {
			t.Errorf("zombies below the daemon: %+v", z)
		}
	}
	if err := syscall.Kill(d.pid, 0); err != nil {
		t.Fatalf("daemon gone: %v", err)
	}
	d.assertCleanLogs()
}

func deref(p *string) string {
	if p == nil {
		return "none"
	}
	return *p
}
