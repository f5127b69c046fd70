//go:build reliability && linux

package reliability

import (
	"fmt"
	"os"
	"slices"
	"strconv"
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
		return true, ""
	})
	if !ok {
		t.Fatalf("the command's fds: %s", msg)
	}
	slices.Sort(fds)
	if !slices.Equal(fds, []int{0, 1, 2}) {
		t.Errorf("the command holds fds %v; want only 0 1 2", fds)
	}
	if d.logCount("inherited descriptors marked close-on-exec", `"fds":[3,7`) == 0 {
		t.Errorf("the marked descriptors 3 and 7 were not logged; log:\n%s", d.logs.tailText())
	}
}
