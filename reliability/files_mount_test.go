//go:build reliability && linux

package reliability

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFilesDeleteMountBelow: DELETE ?recursive=true of a directory with a
// bind mount of an outside directory below it. The daemon runs in a mount
// namespace of its own (unshare -m) where the bind mount is made; in the
// fake-proc case an empty mountinfo is mounted over its /proc too, so the
// mount table shows nothing (as for a mount made after the daemon read
// it). Either way the answer is 409 busy and nothing is removed: not the
// outside file, not the rest of the tree. Before issue 20 D2 the fake-proc
// case answered 409 too, but after removing the outside file.
func TestFilesDeleteMountBelow(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: mount namespaces and bind mounts need root (CAP_SYS_ADMIN)")
	}
	if out, err := exec.Command("unshare", "-m", "true").CombinedOutput(); err != nil {
		t.Skipf("SKIP: cannot create a mount namespace here (unshare -m): %v %s", err, out)
	}
	for _, fakeProc := range []bool{false, true} {
		name := "mountinfo"
		if fakeProc {
			name = "fake-proc"
		}
		t.Run(name, func(t *testing.T) {
			parent, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			base, outside, fake := filepath.Join(parent, "base"), filepath.Join(parent, "outside"), filepath.Join(parent, "fakeproc")
			mnt := filepath.Join(base, "d", "inner", "bm")
			for _, d := range []string{outside, mnt, filepath.Join(base, "d", "a"), filepath.Join(fake, "self")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			files := []string{filepath.Join(outside, "victim.txt"), filepath.Join(base, "d", "a", "x"), filepath.Join(base, "d", "z"), filepath.Join(fake, "self", "mountinfo")}
			for _, f := range files[:3] {
				if err := os.WriteFile(f, []byte("v"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(files[3], nil, 0o644); err != nil {
				t.Fatal(err)
			}
			script := `mount --make-rprivate / && mount --bind "$1" "$2"`
			if fakeProc {
				script += ` && mount --bind "$3" /proc`
			}
			script += ` && shift 3 && exec "$@"`
			d := startDaemon(t, daemonConfig{
				env:    map[string]string{"SANDBOX_BASE_DIR": base},
				prefix: []string{"unshare", "-m", "sh", "-c", script, "sh", outside, mnt, fake},
			})
			code, body, _, err := d.call("DELETE", "/v1/files/d?recursive=true", nil)
			if err != nil {
				t.Fatal(err)
			}
			var e struct {
				Error struct{ Code, Message string }
			}
			json.Unmarshal(body, &e)
			if code != 409 || e.Error.Code != "busy" || !strings.Contains(e.Error.Message, "mounted below") {
				t.Errorf("DELETE = %d %s, want 409 busy (a file system mounted below)", code, body)
			}
			for _, f := range files[:3] {
				if _, err := os.Stat(f); err != nil {
					t.Errorf("%s: %v (removed although a mount is below the tree)", f, err)
				}
			}
		})
	}
}
