//go:build reliability && linux

package reliability

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPID1Signals runs the daemon as PID 1 of a new PID namespace and has
// commands send it every signal a process can send (`kill -N 1`, N = 1…64
// but TERM and INT, the graceful shutdown). After each one the daemon must
// still be PID 1, answer health, and run a command; a stream opened before
// the first signal must keep going; the catchable ones must be logged
// ("signal ignored"). The commands must not inherit an ignored disposition
// (catching, not ignoring, is what keeps SIGPIPE and SIGHUP normal in
// them). SIGTERM then ends the streamed command as terminated and the daemon
// with exit 0. On today's main, `kill -HUP 1` ends the daemon at once.
func TestPID1Signals(t *testing.T) {
	if out, err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("SKIP: cannot create a PID namespace here (unshare --pid --fork --mount-proc needs CAP_SYS_ADMIN): %v %s", err, out)
	}
	signalsTest(t, true)
}

// TestChildSignals is TestPID1Signals for a daemon that is not PID 1 (a
// container with an init in front, or a daemon started by hand): the
// commands signal their parent, `kill -N $PPID`. The kernel protects
// nothing here, so only the signals a process can catch are sent: not
// KILL, STOP, nor 32-34, which the Go runtime reserves (as PID 1 the kernel
// drops those).
func TestChildSignals(t *testing.T) { signalsTest(t, false) }

func signalsTest(t *testing.T, pid1 bool) {
	d := startDaemon(t, daemonConfig{pidNS: pid1})
	target := "1"
	if !pid1 {
		target = "$PPID"
	}

	// A long command whose stream stays open through every signal.
	long := d.mustCreate(map[string]any{"argv": []string{"sh", "-c", "i=0; while :; do i=$((i+1)); echo tick $i; sleep 0.2; done"}, "timeout": 120})
	req, _ := http.NewRequest("GET", d.url+"/v1/commands/"+long.CommandID+"/output?cursor=0&max_wait=60", nil)
	resp, err := d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // the test reads only the last few
			}
		}
	}()

	var sigs []int
	for n := 1; n <= 64; n++ {
		uncatchable := n == int(syscall.SIGKILL) || n == int(syscall.SIGSTOP) || n >= 32 && n <= 34
		if n != int(syscall.SIGTERM) && n != int(syscall.SIGINT) && (pid1 || !uncatchable) {
			sigs = append(sigs, n)
		}
	}
	uncatchable := map[int]bool{int(syscall.SIGKILL): true, int(syscall.SIGSTOP): true,
		int(syscall.SIGCONT): true, int(syscall.SIGCHLD): true, int(syscall.SIGURG): true, int(syscall.SIGWINCH): true, int(syscall.SIGPROF): true, 32: true, 33: true, 34: true}
	var survived, logged int
	for _, n := range sigs {
		st := d.mustCreate(map[string]any{"argv": []string{"sh", "-c", `kill -s "$0" ` + target + ` 2>&1 || kill -"$0" ` + target, fmt.Sprint(n)}})
		fin, err := d.waitFinished(st.CommandID, 20*time.Second)
		if err != nil || !d.alive() {
			t.Fatalf("kill -%d %s (%s): the daemon is gone: %v %v\n%s", n, target, syscall.Signal(n), err, d.exitErr(), d.logs.tailText())
		}
		if fin.State != "exited" || fin.exitCode() != 0 {
			t.Errorf("kill -%d 1: the command ended %s (exit %d)", n, fin.State, fin.exitCode())
		}
		if code, body, _, err := d.callTimeout("GET", "/v1/health", nil, 10*time.Second); err != nil || code != http.StatusOK {
			t.Fatalf("after kill -%d 1: health %d %s %v", n, code, body, err)
		}
		survived++
		if !uncatchable[n] {
			ok, _ := poll(5*time.Second, 10*time.Millisecond, func() (bool, string) {
				return d.logs.contains(fmt.Sprintf(`"signal_number":%d,`, n)), ""
			})
			if !ok {
				t.Errorf("kill -%d 1 (%s): no \"signal ignored\" log line", n, syscall.Signal(n))
			} else {
				logged++
			}
		}
	}

	// The daemon still runs commands, and their dispositions are normal.
	st := d.mustCreate(map[string]any{"argv": []string{"sh", "-c", "grep -E '^(SigIgn|SigBlk):' /proc/self/status; echo pid1=$(cat /proc/1/comm)"}})
	if fin := d.mustWaitFinished(st.CommandID, 20*time.Second); fin.exitCode() != 0 {
		t.Fatalf("command after the signals: %+v", fin)
	}
	evs, err := d.output(st.CommandID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, e := range evs {
		if e.Type == "output" {
			out.WriteString(e.Data)
		}
	}
	wantIgn := procStatusField(os.Getpid(), "SigIgn")
	if !strings.Contains(out.String(), "SigIgn:\t"+wantIgn+"\n") || !strings.Contains(out.String(), "SigBlk:\t0000000000000000\n") {
		t.Errorf("a command's signal dispositions: %q; want SigIgn %s (what the daemon inherited) and nothing blocked", out.String(), wantIgn)
	}
	if pid1 && !strings.Contains(out.String(), "pid1=sandbox-runtime") {
		t.Errorf("PID 1 of the namespace is no longer the daemon: %q", out.String())
	}

	// The stream opened before the signals is still live.
	before := d.mustCreate(map[string]any{"argv": []string{"true"}})
	d.mustWaitFinished(before.CommandID, 10*time.Second)
	var last string
	ok, _ := poll(5*time.Second, 50*time.Millisecond, func() (bool, string) {
		for {
			select {
			case l, open := <-lines:
				if !open {
					return false, ""
				}
				last = l
				continue
			default:
			}
			return strings.Contains(last, "tick"), ""
		}
	})
	if !ok {
		t.Errorf("the stream opened before the signals is not live: last line %q", last)
	}

	code, took, err := d.stop(30 * time.Second)
	figure(t, "signals (pid 1: %v): %d signals sent to the daemon (kill -N %s) by commands, daemon survived %d, %d logged as ignored; then SIGTERM -> exit %d in %v",
		pid1, len(sigs), target, survived, logged, code, took.Round(time.Millisecond))
	if err != nil || code != 0 {
		t.Errorf("stop: exit %d, %v", code, err)
	}
	var final string
	for l := range lines {
		final = l
	}
	if !strings.Contains(final, `"exit"`) || !strings.Contains(final, `"terminated"`) {
		t.Errorf("the stream's final line after SIGTERM: %q; want the exit event of a terminated command", final)
	}
	d.assertCleanLogs()
}

// procStatusField is one field of /proc/pid/status, trimmed.
func procStatusField(pid int, name string) string {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// contains reports whether one of the last log lines contains s.
func (w *logWatch) contains(s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.tail {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}
