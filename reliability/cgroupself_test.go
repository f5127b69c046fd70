//go:build reliability && linux

package reliability

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cgroupDaemon starts a PID-1 daemon in cgroup mode and returns it with its
// tree, or skips where this machine has no writable cgroup v2 tree.
func cgroupDaemon(t *testing.T) (*daemon, string) {
	t.Helper()
	d := startDaemon(t, daemonConfig{pidNS: true})
	iso := d.isolation()
	if iso.Mode != "cgroup" || iso.Cgroup == nil {
		t.Skipf("threads mode here (%s): no writable cgroup v2 tree", iso.Reason)
	}
	return d, *iso.Cgroup
}

// outputOf returns the stdout and stderr text of a finished command.
func (d *daemon) outputOf(id string) string {
	d.t.Helper()
	evs, err := d.output(id, 0)
	if err != nil {
		d.t.Fatalf("output of %s: %v", id, err)
	}
	var b strings.Builder
	for _, e := range evs {
		if e.Type == "output" {
			b.WriteString(e.Data)
		}
	}
	return b.String()
}

// runSh runs sh -c script to its end and returns its exit code and output.
func (d *daemon) runSh(script string) (int, string) {
	d.t.Helper()
	st := d.mustCreate(map[string]any{"argv": []string{"sh", "-c", script}, "timeout": 30})
	fin := d.mustWaitFinished(st.CommandID, 30*time.Second)
	return fin.exitCode(), d.outputOf(st.CommandID)
}

// TestCgroupSameUIDCommandCannotDoomLaterCommands (issue 20 item 10): a
// command sharing the daemon's uid moves PID 1 into its own cgroup and
// kills that cgroup; another writes cgroup.kill of the daemon's own leaf.
// Before: from then on every command ended at once with exit_code -9 and no
// output (the kernel SIGKILLs each child the daemon clones into another
// cgroup once the daemon's own cgroup was killed). Now the daemon notices
// (it is not in its leaf; a child died before it ran), moves into a fresh
// leaf, logs why, and the next commands run.
func TestCgroupSameUIDCommandCannotDoomLaterCommands(t *testing.T) {
	d, _ := cgroupDaemon(t)
	// The cgroup2 mount as the command sees it, and its own cgroup in it.
	const mnt = `m=$(grep -m1 ' - cgroup2 ' /proc/self/mountinfo | cut -d' ' -f5); `
	code, out := d.runSh(mnt + `cg=$m$(sed -n 's/^0:://p' /proc/self/cgroup); echo "$cg"; echo 1 > "$cg/cgroup.procs" && grep 0:: /proc/1/cgroup && echo 1 > "$cg/cgroup.kill"; echo survived`)
	t.Logf("the command that moved PID 1 into its cgroup: exit %d, output %q", code, out)
	if strings.Count(out, "/commands/c") < 2 {
		t.Fatalf("the command did not move PID 1 into its own cgroup: %q", out)
	}
	for i := range 3 {
		if code, out := d.runSh("echo ran-" + string(rune('a'+i))); code != 0 || out != "ran-"+string(rune('a'+i))+"\n" {
			t.Fatalf("a later command %d: exit %d output %q; want 0 and its output", i, code, out)
		}
	}

	// The daemon's leaf killed, again and again (issue 20 item 10 and D1):
	// the child of the next fork dies before it runs, but ForkExec returns
	// before it is a zombie, so one look right after the fork missed it
	// about one time in five and the command was reported as exited -9
	// with no output.
	const killLeaf = mnt + `echo 1 > "$m$(sed -n 's/^0:://p' /proc/1/cgroup)/cgroup.kill" && echo killed-leaf`
	const rounds = 20
	for i := range rounds {
		if code, out := d.runSh(killLeaf); code != 0 || !strings.Contains(out, "killed-leaf") {
			t.Fatalf("round %d: the command that kills the daemon's leaf: exit %d %q", i, code, out)
		}
		want := fmt.Sprintf("after-%d\n", i)
		if code, out := d.runSh("echo after-" + strconv.Itoa(i)); code != 0 || out != want {
			t.Fatalf("round %d: a command after the daemon's leaf was killed: exit %d output %q; want 0 and %q", i, code, out, want)
		}
	}
	// The legacy route runs through the same fork: before, it answered
	// {"stdout":"","exit_code":-9} as often.
	for i := range 5 {
		if code, out := d.runSh(killLeaf); code != 0 || !strings.Contains(out, "killed-leaf") {
			t.Fatalf("legacy round %d: the command that kills the daemon's leaf: exit %d %q", i, code, out)
		}
		req, _ := http.NewRequest("POST", d.url+"/execute", strings.NewReader(`{"command":"echo legacy-`+strconv.Itoa(i)+`"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := d.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var a execAnswer
		err = json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if want := fmt.Sprintf("legacy-%d\n", i); err != nil || resp.StatusCode != 200 || a.Stdout != want || a.ExitCode != 0 {
			t.Fatalf("legacy round %d: POST /execute after the daemon's leaf was killed: %d %+v %v; want 200, exit 0 and %q", i, resp.StatusCode, a, err, want)
		}
	}
	if n := d.logCount("the runtime moved into a fresh cgroup leaf"); n < 1+rounds+5 {
		t.Errorf("%d fresh-leaf moves logged; want one for each attack (%d)", n, 1+rounds+5)
	}

	// The same with a command that kills the daemon's leaf every 50 ms
	// (bounded: 200 times) while others run.
	loop := d.mustCreate(map[string]any{"argv": []string{"sh", "-c", mnt + `for i in $(seq 200); do echo 1 > "$m$(sed -n 's/^0:://p' /proc/1/cgroup)/cgroup.kill"; sleep 0.05; done`}, "timeout": 60})
	defer d.kill(loop.CommandID)
	bad := 0
	for i := range 60 {
		want := fmt.Sprintf("loop-%d\n", i)
		if code, out := d.runSh("echo loop-" + strconv.Itoa(i)); code != 0 || out != want {
			bad++
			t.Errorf("command %d while the daemon's leaf is killed every 50 ms: exit %d output %q; want 0 and %q", i, code, out, want)
		}
	}
	t.Logf("60 commands under a cgroup.kill loop: %d wrong", bad)
}

// TestCgroupKilledCommandsParentIsNotTheDaemonsLeaf (D3): a command writes
// cgroup.kill of the commands' parent cgroup. That kills every running
// command (the writer too) and dooms the pre-made pool cgroups, not the
// daemon's leaf. Before: the next 3 creates failed with 503 "the runtime's
// cgroup was killed and it could not move into a fresh one". Now the pool
// is replaced, the daemon stays in its leaf, and the next commands run.
func TestCgroupKilledCommandsParentIsNotTheDaemonsLeaf(t *testing.T) {
	d, tree := cgroupDaemon(t)
	for round := range 3 {
		code, out := d.runSh(`echo 1 > ` + tree + `/commands/cgroup.kill; sleep 5; echo not-killed`)
		if code != -9 || strings.Contains(out, "not-killed") {
			t.Fatalf("round %d: the command that kills the commands' parent: exit %d %q; want -9 (it is one of them)", round, code, out)
		}
		for i := range 5 {
			want := fmt.Sprintf("next-%d-%d\n", round, i)
			st, err := d.create(map[string]any{"argv": []string{"echo", fmt.Sprintf("next-%d-%d", round, i)}, "timeout": 30})
			if err != nil {
				t.Fatalf("round %d: create %d after the commands' parent was killed: %v", round, i, err)
			}
			fin := d.mustWaitFinished(st.CommandID, 30*time.Second)
			if out := d.outputOf(st.CommandID); fin.exitCode() != 0 || out != want {
				t.Fatalf("round %d: command %d: exit %d output %q; want 0 and %q", round, i, fin.exitCode(), out, want)
			}
		}
	}
	if n := d.logCount("the runtime moved into a fresh cgroup leaf"); n != 0 {
		t.Errorf("the daemon moved %d times; its leaf was never killed", n)
	}
	if n := d.logCount("the pre-made command cgroups were replaced"); n < 1 {
		t.Errorf("no pool replacement logged")
	}
}

// TestCgroupOtherUIDCommandCannotWriteDaemonFiles (issue 20 item 10): a
// command that runs as another uid than the daemon (dropped with setpriv)
// can open no file of the daemon's cgroup tree for writing, its own
// command cgroup included; and no file or directory of the tree is
// writable by group or others.
func TestCgroupOtherUIDCommandCannotWriteDaemonFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run a command as another uid")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv here")
	}
	d, tree := cgroupDaemon(t)
	// One command running meanwhile, so its cgroup is in the tree too.
	bg := d.mustCreate(map[string]any{"argv": []string{"sleep", "30"}, "timeout": 60})
	defer d.kill(bg.CommandID)
	code, out := d.runSh(`exec setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'n=0; for f in $(find ` + tree + ` -type f) $(find ` + tree + ` -type d); do n=$((n+1)); if [ -f "$f" ] && (exec 3>>"$f") 2>/dev/null; then echo "WRITABLE $f"; fi; if [ -d "$f" ] && mkdir "$f/x" 2>/dev/null; then echo "MKDIR $f"; fi; done; echo "checked $n"'`)
	if code != 0 || !strings.Contains(out, "checked ") || strings.Contains(out, "WRITABLE") || strings.Contains(out, "MKDIR") {
		t.Errorf("as uid 65534: exit %d\n%s", code, out)
	}
	t.Logf("as uid 65534: %s", strings.TrimSpace(out[strings.LastIndex(out, "checked"):]))
	filepath.Walk(tree, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm()&0o022 != 0 || int(st.Uid) != 0 {
			t.Errorf("%s: mode %v owner %d; want writable by its owner (the daemon's uid 0) only", p, fi.Mode(), st.Uid)
		}
		return nil
	})
}

// TestCgroupRemovedPoolIsReplaced (D2): a command sharing the daemon's uid
// removes the daemon's pre-made (empty) command cgroups. Before: every
// later create failed with a false `422 spawn_failed "exec \"echo\": no
// such file or directory"` (clone3 into a removed cgroup). Now the pool is
// replaced and the command runs.
func TestCgroupRemovedPoolIsReplaced(t *testing.T) {
	d, tree := cgroupDaemon(t)
	for round := range 3 {
		code, out := d.runSh(`n=0; for c in ` + tree + `/commands/c*/; do rmdir "$c" 2>/dev/null && n=$((n+1)); done; echo "removed $n"`)
		if code != 0 || !strings.Contains(out, "removed ") || strings.Contains(out, "removed 0") {
			t.Fatalf("round %d: the command that removes the pool: exit %d %q", round, code, out)
		}
		for i := range 3 {
			want := fmt.Sprintf("next-%d-%d\n", round, i)
			st, err := d.create(map[string]any{"argv": []string{"echo", fmt.Sprintf("next-%d-%d", round, i)}, "timeout": 30})
			if err != nil {
				t.Fatalf("round %d: create %d after the pool was removed: %v", round, i, err)
			}
			fin := d.mustWaitFinished(st.CommandID, 30*time.Second)
			if out := d.outputOf(st.CommandID); fin.exitCode() != 0 || out != want {
				t.Fatalf("round %d: command %d: exit %d output %q; want 0 and %q", round, i, fin.exitCode(), out, want)
			}
		}
	}
}

// TestCgroupRemovedTreeIsRebuilt (D2): a command moves the daemon out of
// its leaf, to the root cgroup, and the daemon's whole tree is then
// removed, as another PID-1 daemon sharing the cgroup root did (it took
// the tree, whose leaves were empty, for a dead runtime's). Before: the
// daemon fell back to process groups silently. Now it makes the tree
// again, moves into a leaf of it, and commands run in cgroups of their own.
func TestCgroupRemovedTreeIsRebuilt(t *testing.T) {
	d, tree := cgroupDaemon(t)
	const mnt = `m=$(grep -m1 ' - cgroup2 ' /proc/self/mountinfo | cut -d' ' -f5); `
	if code, out := d.runSh(mnt + `echo 1 > "$m/cgroup.procs" && grep 0:: /proc/1/cgroup`); code != 0 || !strings.Contains(out, "0::/\n") {
		t.Fatalf("the command that moves PID 1 to the root cgroup: exit %d %q", code, out)
	}
	// What another runtime's removeStale does: every empty cgroup of the
	// tree, deepest first (the finished command's cgroup may linger a
	// moment until the daemon removes it).
	deadline := time.Now().Add(10 * time.Second)
	for {
		var dirs []string
		filepath.Walk(tree, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			syscall.Rmdir(dirs[i])
		}
		if _, err := os.Stat(tree); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cannot remove %s: %v", tree, dirs)
		}
		time.Sleep(20 * time.Millisecond) // polling for the daemon to release the last command cgroup
	}
	for i := range 3 {
		code, out := d.runSh(`echo run-` + strconv.Itoa(i) + `; sed -n 's/^0:://p' /proc/self/cgroup /proc/1/cgroup`)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 3 || lines[0] != "run-"+strconv.Itoa(i) {
			t.Fatalf("command %d after the tree was removed: exit %d %q", i, code, out)
		}
		if !strings.Contains(lines[1], "/commands/c") || !strings.Contains(lines[2], "/daemon-") {
			t.Errorf("command %d: its cgroup %q and the daemon's %q; want a command cgroup and a fresh daemon leaf of the rebuilt tree", i, lines[1], lines[2])
		}
	}
	if _, err := os.Stat(tree + "/commands"); err != nil {
		t.Errorf("the tree was not made again: %v", err)
	}
	if n := d.logCount("the runtime's cgroup tree was gone and was made again"); n < 1 {
		t.Errorf("no rebuild logged")
	}
}

// TestCgroupTreeRemovedByAnotherDaemonIsRebuilt (D2's sibling): two PID-1
// daemons share a cgroup root. A command of the first moves it out of its
// leaf (to the root); the second, starting, takes the first's tree (empty
// leaves, a pid 1 that is not its owner) for a dead runtime's and removes
// it. Before: the first could make no command cgroup any more (false "no
// such file" refusals, or process groups only). Now it makes its tree
// again, moves into a leaf of it, and its commands run in cgroups of it.
func TestCgroupTreeRemovedByAnotherDaemonIsRebuilt(t *testing.T) {
	a, tree := cgroupDaemon(t)
	const mnt = `m=$(grep -m1 ' - cgroup2 ' /proc/self/mountinfo | cut -d' ' -f5); `
	if code, out := a.runSh(mnt + `echo 1 > "$m/cgroup.procs" && grep 0:: /proc/1/cgroup`); code != 0 || !strings.Contains(out, "0::/\n") {
		t.Fatalf("the command that moves PID 1 to the root cgroup: exit %d %q", code, out)
	}
	// A tree whose owner started under 5 s ago may still be moving in and
	// is left alone: wait (bounded) until the first daemon's tree is older
	// than that by the start time in its name.
	parts := strings.Split(strings.TrimPrefix(filepath.Base(tree), "sandbox-runtime-"), "-")
	start, err := strconv.ParseFloat(parts[1], 64)
	if err != nil {
		t.Fatalf("tree name %s: %v", tree, err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		b, _ := os.ReadFile("/proc/uptime")
		up, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
		if up*100 > start+700 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("uptime %v never passed the tree's start %v + 7 s", up, start/100)
		}
		time.Sleep(100 * time.Millisecond) // waiting on the clock itself
	}
	cgroupDaemon(t) // the second daemon: its start removes stale trees
	if _, err := os.Stat(tree); !os.IsNotExist(err) {
		t.Fatalf("the second daemon left the first's tree (%v): the attack did not happen", err)
	}
	for i := range 3 {
		code, out := a.runSh(`echo run-` + strconv.Itoa(i) + `; sed -n 's/^0:://p' /proc/self/cgroup /proc/1/cgroup`)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 3 || lines[0] != "run-"+strconv.Itoa(i) {
			t.Fatalf("command %d of the first daemon after the second started: exit %d %q", i, code, out)
		}
		// The paths are relative to the cgroup2 mount; tree is absolute.
		cut := strings.Index(lines[1], "/commands/c")
		if cut <= 0 || !strings.HasSuffix(tree, lines[1][:cut]) || !strings.HasPrefix(lines[2], lines[1][:cut]+"/daemon-") {
			t.Errorf("command %d: its cgroup %q and the daemon's %q; want a command cgroup and a fresh daemon leaf of %s", i, lines[1], lines[2], tree)
		}
	}
}
