package runtime

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// markEnv carries a per-test marker to every process a test's command
// starts, so the test can find them in /proc whatever their parent is.
const markEnv = "RUNTIME_TEST_MARK"

// environValues returns every value of key in the environment pid started
// with, in order (a key set twice appears twice).
func environValues(pid int, key string) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil
	}
	var vals []string
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(key+"=")); ok {
			vals = append(vals, string(v))
		}
	}
	return vals
}

// markedProcs lists the live (not zombie) processes whose environment holds
// markEnv=mark.
func markedProcs(mark string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if i := bytes.LastIndexByte(stat, ')'); err != nil || i < 0 || bytes.HasPrefix(stat[i+1:], []byte(" Z")) {
			continue
		}
		if slices.Contains(environValues(pid, markEnv), mark) {
			out = append(out, pid)
		}
	}
	slices.Sort(out) // ReadDir sorts names as strings: "1004" before "998"
	return out
}

// markedHelper is a helper request whose processes carry a fresh marker;
// when the test ends every process with the marker is SIGKILLed (by the PIDs
// found, again until none is left: a helper that spawns without end is
// what these tests look for).
func markedHelper(t *testing.T, name string) (CreateRequest, string) {
	mark := strconv.FormatUint(rand.Uint64(), 36)
	req := helper(name, "")
	req.Envs[markEnv] = mark
	t.Cleanup(func() {
		deadline := time.Now().Add(20 * time.Second)
		for left := markedProcs(mark); len(left) > 0; left = markedProcs(mark) {
			if time.Now().After(deadline) {
				t.Errorf("processes %v of this test still alive", left)
				return
			}
			for _, pid := range left {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return req, mark
}

// TestHelperGrandchildIsNotTheHelper: spawn-grandchild's grandchild runs
// ignore-sigterm (its environment names that helper once), and the
// command's processes are exactly the two: before the fix the grandchild
// inherited RUNTIME_TEST_HELPER=spawn-grandchild first and spawned again,
// without end.
func TestHelperGrandchildIsNotTheHelper(t *testing.T) {
	m := newManager(t, nil)
	req, mark := markedHelper(t, "spawn-grandchild")
	c := mustCreate(t, m, req)
	gpid, err := strconv.Atoi(readLine(t, c))
	if err != nil {
		t.Fatalf("the helper did not print its grandchild's pid: %v", err)
	}
	if got := environValues(gpid, helperEnv); !slices.Equal(got, []string{"ignore-sigterm"}) {
		t.Errorf("grandchild %d: %s values %q; want [ignore-sigterm]", gpid, helperEnv, got)
	}
	pid := c.Status().PID
	if got, want := markedProcs(mark), []int{min(pid, gpid), max(pid, gpid)}; !slices.Equal(got, want) {
		t.Errorf("the command's processes are %v; want %v (the helper and its one grandchild)", got, want)
	}
}

// TestHelperBackgroundChildIsNotTheHelper: background-holds-pipe leaves
// one grandchild that runs hang (it prints "ready" into the shared pipe);
// before the fix each grandchild ran background-holds-pipe again ("parent
// done" without end).
func TestHelperBackgroundChildIsNotTheHelper(t *testing.T) {
	m := newManager(t, func(c *Config) { c.KillGrace = 10 * time.Second })
	req, mark := markedHelper(t, "background-holds-pipe")
	c := mustCreate(t, m, req)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out string
	for {
		ch := c.Notify()
		out, _ = output(t, c)
		if strings.Contains(out, "ready\n") || strings.Count(out, "parent done") > 1 {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("output %q: no ready line from the grandchild", out)
		}
	}
	if strings.Count(out, "parent done") != 1 || strings.Count(out, "ready\n") != 1 {
		t.Fatalf("output %q; want one parent done and one ready", out)
	}
	// The helper exits right after its line: poll (bounded) until it is gone.
	leader := c.Status().PID
	left := markedProcs(mark)
	for deadline := time.Now().Add(20 * time.Second); slices.Contains(left, leader) && time.Now().Before(deadline); left = markedProcs(mark) {
		time.Sleep(5 * time.Millisecond) // polling the process table, which has no wake-up
	}
	if len(left) != 1 || left[0] == leader {
		t.Fatalf("processes left %v; want the one hang grandchild", left)
	}
	if got := environValues(left[0], helperEnv); !slices.Equal(got, []string{"hang"}) {
		t.Errorf("grandchild %d: %s values %q; want [hang]", left[0], helperEnv, got)
	}
}
