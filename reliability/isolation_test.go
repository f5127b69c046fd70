//go:build reliability && linux

package reliability

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// isolationInfo is the isolation object of /v1/info.
type isolationInfo = wire.Isolation

// isolation returns the isolation object of /v1/info; a missing one fails
// the test (not at once) and reads as the zero value.
func (d *daemon) isolation() isolationInfo {
	d.t.Helper()
	code, body := d.mustCall("GET", "/v1/info", nil)
	var info struct {
		Isolation *isolationInfo `json:"isolation"` // a pointer, to tell a missing object
	}
	if err := json.Unmarshal(body, &info); code != http.StatusOK || err != nil || info.Isolation == nil {
		d.t.Errorf("/v1/info: %d %s; want 200 with an isolation object", code, body)
		return isolationInfo{}
	}
	return *info.Isolation
}

// pidNSWithPidMax skips unless a PID namespace with its own pid_max can be
// made here (CAP_SYS_ADMIN, Linux 6.14+).
func pidNSWithPidMax(t *testing.T, pidMax int) {
	out, err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "sh", "-c",
		fmt.Sprintf("echo %d > /proc/sys/kernel/pid_max", pidMax)).CombinedOutput()
	if err != nil {
		t.Skipf("cannot make a PID namespace with its own pid_max here (needs CAP_SYS_ADMIN and Linux 6.14+): %v %s", err, out)
	}
}

// TestForkStormPIDLimit (issue 10 item 1): the daemon is PID 1 of a PID
// namespace with pid_max 400 and a command fills it with sleeps. The daemon
// must survive: health keeps answering under concurrent probes, the storm's
// output can still be read, a create answers 503 resource_exhausted naming
// the limit and registers nothing, a kill ends the storm, and commands start
// again afterwards. Before the fix the daemon died at the first thread it
// needed ("runtime/cgo: pthread_create failed", SIGABRT).
func TestForkStormPIDLimit(t *testing.T) {
	pidNSWithPidMax(t, 400)
	d := startDaemon(t, daemonConfig{pidNS: true, pidMax: 400})
	forkStorm(t, d, "pid_max 400")
}

// TestForkStormNPROC (issue 10 item 1, threads mode): the daemon runs as a
// uid of its own under RLIMIT_NPROC 150 (so its cgroup tree is not
// writable), and a command fills the limit; the same promises hold.
func TestForkStormNPROC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the daemon as another uid")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	const uid = "64123" // a uid nothing else on the machine uses: RLIMIT_NPROC counts per uid
	base, err := os.MkdirTemp("", "reliability-nproc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	n, _ := strconv.Atoi(uid)
	if err := os.Chown(base, n, n); err != nil {
		t.Fatal(err)
	}
	// The daemon binary must be reachable by that uid.
	if err := os.Chmod(filepath.Dir(binPath), 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, daemonConfig{
		env:    map[string]string{"SANDBOX_BASE_DIR": base},
		prefix: []string{"prlimit", "--nproc=150", "setpriv", "--reuid=" + uid, "--regid=" + uid, "--clear-groups"},
	})
	forkStorm(t, d, "RLIMIT_NPROC 150 for uid "+uid)
}

// forkStorm runs the storm against d and checks every promise of item 1;
// limit is the text the refusal must name.
func forkStorm(t *testing.T, d *daemon, limit string) {
	iso := d.isolation()
	t.Logf("isolation: %+v", iso)
	figure(t, "fork storm (%s): isolation mode %s (%s)", limit, iso.Mode, iso.Reason)

	// The subshell forks until the namespace is full (and dies of it); the
	// leader then becomes a long sleep without forking, so the command runs on.
	storm := d.mustCreate(map[string]any{"argv": []string{"sh", "-c",
		"(for i in $(seq 600); do sleep 120 & done) 2>/dev/null; echo full; exec sleep 120"}})

	// Wait for the storm's line, then take the pids it left with long
	// commands of our own until a create is refused for lack of pids.
	ok, msg := poll(30*time.Second, 20*time.Millisecond, func() (bool, string) {
		evs, err := d.output(storm.CommandID, 0)
		return err == nil && len(evs) > 0 && strings.Contains(evs[0].Data, "full"), fmt.Sprintf("%+v %v", evs, err)
	})
	if !ok {
		t.Fatalf("the storm did not fill the namespace: %s", msg)
	}
	var refusal []byte
	var fillers []string
	for refusal == nil {
		code, body, _, err := d.call("POST", "/v1/commands", map[string]any{"argv": []string{"sleep", "120"}})
		switch {
		case err != nil:
			t.Fatalf("create while the namespace is full: %v (the daemon is alive: %v)\n%s", err, d.alive(), d.logs.tailText())
		case code == http.StatusCreated:
			var st cmdStatus
			json.Unmarshal(body, &st)
			fillers = append(fillers, st.CommandID)
		default:
			refusal = body
			if code != http.StatusServiceUnavailable {
				t.Errorf("create while the namespace is full: %d %s; want 503", code, body)
			}
		}
	}
	t.Logf("%d commands took the pids the storm left", len(fillers))
	if c := errorCode(refusal); c != "resource_exhausted" {
		t.Errorf("create while the pids are gone: code %q (%s); want resource_exhausted", c, refusal)
	}
	if !strings.Contains(string(refusal), limit) {
		t.Errorf("refusal %s does not name the limit (%s)", refusal, limit)
	}
	figure(t, "fork storm: create while full answers 503: %s", refusal)
	// docs/operations.md's alert on running out: every 503 resource_exhausted is a
	// failed start of class resources.
	if n := d.mustMetrics()[`sandbox_runtime_spawn_failures_total{class="resources"}`]; n < 1 {
		t.Errorf("spawn_failures_total{class=\"resources\"} is %v after a 503 resource_exhausted; want >= 1", n)
	}

	// Health under 16 concurrent probers, 25 requests each, while full, with
	// 16 clients writing and reading files beside them (file I/O blocks a
	// thread per call: the Go runtime wants more threads).
	var wg sync.WaitGroup
	var errs errSet
	blob := strings.Repeat("x", 256<<10)
	for i := range 16 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 25 {
				code, body, _, err := d.callTimeout("GET", "/v1/health", nil, 10*time.Second)
				if err != nil || code != http.StatusOK {
					errs.add("health: %d %s %v", code, body, err)
				}
			}
		}()
		go func() {
			defer wg.Done()
			path := fmt.Sprintf("/v1/files/storm-%d.txt", i)
			for range 10 {
				if code, body, _, err := d.callTimeout("PUT", path, blob, 10*time.Second); err != nil || code/100 != 2 {
					errs.add("PUT %s: %d %s %v", path, code, truncate(string(body), 200), err)
				}
				if code, body, _, err := d.callTimeout("GET", path, nil, 10*time.Second); err != nil || code != http.StatusOK || len(body) != len(blob) {
					errs.add("GET %s: %d %d bytes %v", path, code, len(body), err)
				}
			}
		}()
	}
	wg.Wait()
	errs.report(t, "health probes during the fork storm")
	if !d.alive() {
		t.Fatalf("the daemon died during the storm:\n%s", d.logs.tailText())
	}

	// Still exactly one command (the refused creates registered nothing), and
	// its output is readable.
	list, err := d.list("")
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, c := range list {
		if c.State == "running" {
			running++
		}
	}
	if running != 1+len(fillers) {
		t.Errorf("%d running commands; want the storm and %d fillers (a refused create registers nothing)", running, len(fillers))
	}
	evs, err := d.output(storm.CommandID, 0)
	if err != nil {
		t.Fatalf("reading the storm's output: %v", err)
	}
	var out strings.Builder
	for _, e := range evs {
		out.WriteString(e.Data)
	}
	if !strings.Contains(out.String(), "full") {
		t.Errorf("storm output %q; want its line", out.String())
	}

	code, st, err := d.kill(storm.CommandID)
	if err != nil || code != http.StatusOK || st.State != "cancelled" {
		t.Fatalf("kill of the storm: %d %+v %v; want 200 cancelled", code, st, err)
	}
	for _, id := range fillers {
		d.kill(id)
	}
	// The storm's sleeps die with it (group, or cgroup.kill); once they are
	// reaped, commands start again.
	ok, msg = poll(30*time.Second, 50*time.Millisecond, func() (bool, string) {
		st, err := d.create(map[string]any{"argv": []string{"true"}})
		if err != nil {
			return false, err.Error()
		}
		fin, err := d.waitFinished(st.CommandID, 10*time.Second)
		return err == nil && fin.State == "exited", fmt.Sprintf("%+v %v", fin, err)
	})
	if !ok {
		t.Errorf("commands do not start after the storm was killed: %s", msg)
	}
	code2, took, err := d.stop(30 * time.Second)
	if err != nil || code2 != 0 {
		t.Errorf("stop: exit %d after %v: %v; want 0", code2, took, err)
	}
}

// TestCgroupKillEndsSetsidEscapees (issue 10 item 1, cgroup mode): a kill
// ends a descendant that left the command's process group with setsid, and
// the daemon's cgroup tree is gone after it exits.
func TestCgroupKillEndsSetsidEscapees(t *testing.T) {
	d := startDaemon(t, daemonConfig{env: map[string]string{"SANDBOX_KILL_GRACE_SECONDS": "0.5"}})
	iso := d.isolation()
	if iso.Mode == "threads" {
		t.Skipf("threads mode here (%s): no writable cgroup v2 tree", iso.Reason)
	}
	tree := "/nonexistent"
	if iso.Cgroup != nil {
		tree = *iso.Cgroup
	}
	st := d.mustCreate(map[string]any{"argv": []string{"sh", "-c", "setsid sleep 300 & echo $!; wait"}})
	var escapee int
	ok, msg := poll(10*time.Second, 10*time.Millisecond, func() (bool, string) {
		evs, err := d.output(st.CommandID, 0)
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs {
			if n, err := strconv.Atoi(strings.TrimSpace(e.Data)); err == nil {
				escapee = n
			}
		}
		if escapee == 0 {
			return false, "no pid printed yet"
		}
		pg, _ := syscall.Getpgid(escapee)
		return pg == escapee, fmt.Sprintf("escapee %d in group %d", escapee, pg)
	})
	if !ok {
		t.Fatal(msg)
	}
	t.Cleanup(func() {
		if p, ok := readProc(escapee); ok && p.state != 'Z' {
			syscall.Kill(escapee, syscall.SIGKILL)
		}
	})
	code, fin, err := d.kill(st.CommandID)
	if err != nil || code != http.StatusOK || fin.State != "cancelled" {
		t.Fatalf("kill: %d %+v %v", code, fin, err)
	}
	ok, msg = poll(10*time.Second, 10*time.Millisecond, func() (bool, string) {
		p, ok := readProc(escapee)
		return !ok || p.state == 'Z', fmt.Sprintf("escapee %d: %+v", escapee, p)
	})
	if !ok {
		t.Errorf("the setsid escapee survived the kill: %s", msg)
	}
	if code, took, err := d.stop(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("stop: exit %d after %v: %v", code, took, err)
	}
	if _, err := os.Stat(tree); !os.IsNotExist(err) {
		t.Errorf("the daemon's cgroup tree %s still exists after it exited: %v", tree, err)
	}
}

// TestOOMKilledReported (issue 10 item 3): the daemon runs in a v1 memory
// cgroup limited to 96 MiB; a command that grows past it is reported with
// "oom_killed": true in its status and end log line; a command that exits
// normally is not.
func TestOOMKilledReported(t *testing.T) {
	parent := v1MemoryDir()
	if parent == "" {
		t.Skip("no cgroup v1 memory controller here")
	}
	dir := filepath.Join(parent, fmt.Sprintf("reliability-oom-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("the memory controller is not writable here: %v", err)
	}
	d := startDaemon(t, daemonConfig{})
	// Registered after startDaemon's cleanup, so it runs first… so remove the
	// cgroup only once the daemon has exited.
	t.Cleanup(func() {
		if d.alive() {
			d.stop(30 * time.Second)
		}
		<-d.d.Exited()
		if err := os.Remove(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.Itoa(96<<20)), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(d.pid)), 0); err != nil {
		t.Fatalf("moving the daemon into %s: %v", dir, err)
	}
	oomStatus := func(id string) (cmdStatus, bool) {
		fin := d.mustWaitFinished(id, 60*time.Second)
		_, body, _, err := d.call("GET", "/v1/commands/"+id, nil)
		var raw struct {
			OOMKilled *bool `json:"oom_killed"`
		}
		if err != nil || json.Unmarshal(body, &raw) != nil || raw.OOMKilled == nil {
			t.Fatalf("status of %s: %s %v; want an oom_killed field", id, body, err)
		}
		return fin, *raw.OOMKilled
	}
	normal := d.mustCreate(map[string]any{"argv": []string{"sh", "-c", "x=$(head -c 1000000 /dev/zero | tr '\\0' x); echo ${#x}"}})
	if fin, oom := oomStatus(normal.CommandID); fin.exitCode() != 0 || oom {
		t.Errorf("1 MB under a 96 MiB limit: %s exit %d oom_killed %v; want exit 0, false", fin.State, fin.exitCode(), oom)
	}
	hog := d.mustCreate(map[string]any{"argv": []string{"sh", "-c", "x=$(tr '\\0' x < /dev/zero)"}})
	fin, oom := oomStatus(hog.CommandID)
	if fin.exitCode() != -9 || !oom {
		t.Errorf("unbounded growth under a 96 MiB limit: %s exit %d oom_killed %v; want exit -9 (SIGKILL), oom_killed true", fin.State, fin.exitCode(), oom)
	}
	figure(t, "OOM: a command past a 96 MiB memory cgroup: state %s exit %d oom_killed %v", fin.State, fin.exitCode(), oom)
	ok, msg := poll(5*time.Second, 10*time.Millisecond, func() (bool, string) {
		d.logs.mu.Lock()
		defer d.logs.mu.Unlock()
		for _, l := range d.logs.tail {
			if strings.Contains(l, `"msg":"command finished"`) && strings.Contains(l, hog.CommandID) && strings.Contains(l, `"oom_killed":true`) {
				return true, ""
			}
		}
		return false, "no end log line with oom_killed true"
	})
	if !ok {
		t.Error(msg)
	}
}

// v1MemoryDir returns this process's cgroup v1 memory directory, or "".
func v1MemoryDir() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[1] == "memory" {
			if _, err := os.Stat("/sys/fs/cgroup/memory" + parts[2]); err == nil {
				return "/sys/fs/cgroup/memory" + parts[2]
			}
		}
	}
	return ""
}

// TestShutdownGraceLongerThanBudget (issue 10 item 7): with a 20 s kill grace
// and a 3 s shutdown budget, SIGTERM ends a command that ignores SIGTERM as
// terminated, its open stream gets the final exit line, every process of
// the command is gone, and the daemon exits 0 within the budget.
func TestShutdownGraceLongerThanBudget(t *testing.T) {
	d := startDaemon(t, daemonConfig{env: map[string]string{
		"SANDBOX_KILL_GRACE_SECONDS":       "20",
		"SANDBOX_SHUTDOWN_TIMEOUT_SECONDS": "3",
	}})
	st := d.mustCreate(map[string]any{"argv": []string{"sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/commands/%s/output?max_wait=60", d.url, st.CommandID), nil)
	resp, err := d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan event, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				lines <- e
			}
		}
	}()
	for e := range lines {
		if e.Type == "output" && strings.Contains(e.Data, "ready") {
			break
		}
	}
	pgid := st.PID
	code, took, err := d.stop(10 * time.Second)
	if err != nil || code != 0 {
		t.Fatalf("stop: exit %d after %v: %v; want 0", code, took, err)
	}
	figure(t, "shutdown with kill grace 20 s, budget 3 s: exit %d after %v", code, took)
	if took > 3*time.Second+time.Second {
		t.Errorf("the daemon took %v to exit; want the 3 s budget (+1 s of slack)", took)
	}
	var last event
	for e := range lines {
		last = e
		if e.Type == "exit" {
			break
		}
	}
	if last.Type != "exit" || last.Status == nil || last.Status.State != "terminated" {
		t.Errorf("last stream line %+v; want exit with state terminated", last)
	}
	if left := zombieFree(inGroup(pgid)); len(left) > 0 {
		t.Errorf("processes of the command outlived the daemon: %+v", left)
		for _, p := range left {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
}

// zombieFree drops zombies (dead, waiting for their new parent to reap them).
func zombieFree(ps []procInfo) []procInfo {
	var out []procInfo
	for _, p := range ps {
		if p.state != 'Z' {
			out = append(out, p)
		}
	}
	return out
}
