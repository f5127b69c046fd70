//go:build reliability && linux

package reliability

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestInheritedFDsNotPassedOn (issue 20 item 13): descriptors the daemon
// inherits without close-on-exec (here 3 and 7, left open by the shell that
// starts it) reached every command it ran. Now a command holds only its
// stdin, stdout and stderr, and the daemon logs what it marked.
func TestInheritedFDsNotPassedOn(t *testing.T) {
	d := startDaemon(t, daemonConfig{prefix: []string{"sh", "-c", `exec 3</dev/null 7>/dev/null; exec "$0" "$@"`}})
	st := d.mustCreate(map[string]any{"argv": []string{"sleep", "30"}, "timeout": 60})
	defer d.kill(st.CommandID)
	// Right after its exec the loader of sleep holds fds of its own (the
	// libraries it maps, fd 3 for a moment), so the test waits for the set
	// to be 0 1 2: an inherited descriptor would stay open for good, and
	// the wait would end in a failure naming it.
	var fds []int
	ok, msg := poll(10*time.Second, 10*time.Millisecond, func() (bool, string) {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", st.PID))
		if exe == "" || exe == binPath {
			return false, "not exec'd yet"
		}
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", st.PID))
		if err != nil {
			return false, err.Error()
		}
		fds = fds[:0]
		for _, e := range ents {
			n, _ := strconv.Atoi(e.Name())
			fds = append(fds, n)
		}
		slices.Sort(fds)
		return slices.Equal(fds, []int{0, 1, 2}), fmt.Sprintf("the command holds fds %v; want only 0 1 2", fds)
	})
	if !ok {
		t.Errorf("%s", msg)
	}
	// The list holds 3 and 7 and whatever the test binary itself
	// inherited without close-on-exec (a CI runner's pipes pass through
	// go test to every child): only 3 and 7 are ours to require.
	marked := markedFDs(d.d.Log())
	if !slices.Contains(marked, 3) || !slices.Contains(marked, 7) {
		t.Errorf("the marked descriptors %v do not include 3 and 7; log:\n%s", marked, d.logs.tailText())
	}
}

// markedFDs returns the fds of the daemon's "marked close-on-exec" line.
func markedFDs(log string) []int {
	for _, line := range strings.Split(log, "\n") {
		var l struct {
			Msg string `json:"msg"`
			FDs []int  `json:"fds"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && strings.HasPrefix(l.Msg, "inherited descriptors marked close-on-exec") {
			return l.FDs
		}
	}
	return nil
}
