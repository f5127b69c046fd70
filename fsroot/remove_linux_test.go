package fsroot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRemoveAllSameMountStopsAtMount: a bind mount of an outside directory
// below the tree removed (made in a mount namespace of this test's own
// thread, so nothing in /proc/self/mountinfo of the process shows it, as
// for a mount that appears after the daemon read the table): nothing
// outside is removed, the error names the mount and is EBUSY, and the
// tree is left whole. os.Root.RemoveAll removed the outside files.
func TestRemoveAllSameMountStopsAtMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: bind mounts need root (CAP_SYS_ADMIN)")
	}
	tmp := t.TempDir()
	outside := filepath.Join(tmp, "outside")
	base := filepath.Join(tmp, "base")
	mnt := filepath.Join(base, "d", "inner", "bm")
	for _, d := range []string{outside, mnt, filepath.Join(base, "d", "a")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(outside, "victim.txt"), filepath.Join(base, "d", "a", "x"), filepath.Join(base, "d", "z")} {
		if err := os.WriteFile(f, []byte("v"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	err := withBindMount(outside, mnt, func() error {
		r, err := os.OpenRoot(base)
		if err != nil {
			return err
		}
		defer r.Close()
		return RemoveAllSameMount(r, "d")
	})
	var pe *os.PathError
	if !errors.Is(err, ErrMountBelow) || !errors.Is(err, syscall.EBUSY) || !errors.As(err, &pe) || pe.Path != "d/inner/bm" {
		t.Errorf("RemoveAllSameMount = %v, want ErrMountBelow (EBUSY) at d/inner/bm", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "victim.txt")); err != nil {
		t.Fatalf("the file outside the base, below the mount, is gone: %v", err)
	}
	for _, f := range []string{"d/a/x", "d/z"} {
		if _, err := os.Stat(filepath.Join(base, f)); err != nil {
			t.Errorf("%s was removed although the tree has a mount below it: %v", f, err)
		}
	}
}

// TestRemoveAllSameMount: a tree without mounts (files, symlinks, nested
// and wide directories) is removed whole; a symlink to outside is removed,
// not followed; a missing name is no error.
func TestRemoveAllSameMount(t *testing.T) {
	tmp := t.TempDir()
	outside := filepath.Join(tmp, "outside")
	os.Mkdir(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "keep"), nil, 0o644)
	base := filepath.Join(tmp, "base")
	deep := filepath.Join(base, "d", "e", "f")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 2*listBatch + 3 {
		if err := os.WriteFile(filepath.Join(base, "d", "e", fmt.Sprintf("n%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink(outside, filepath.Join(deep, "link"))
	r, err := os.OpenRoot(base)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := RemoveAllSameMount(r, "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(base, "d")); !os.IsNotExist(err) {
		t.Errorf("d is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("the symlink's target lost its file: %v", err)
	}
	if err := RemoveAllSameMount(r, "missing"); err != nil {
		t.Errorf("missing name: %v", err)
	}
}

// withBindMount runs fn on a thread of its own, in a mount namespace of its
// own where from is bind-mounted at to: nothing else in the process (nor
// its /proc/self/mountinfo) sees the mount. The thread is never given back
// to the scheduler (it exits with the goroutine), and the namespace with it.
func withBindMount(from, to string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
			done <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			done <- err
			return
		}
		if err := unix.Mount(from, to, "", unix.MS_BIND, ""); err != nil {
			done <- err
			return
		}
		done <- fn()
	}()
	return <-done
}

// TestCleanTempsStopsAtMount: a leftover temporary directory (older than
// the start) with a bind mount of an outside directory inside it: CleanTemps
// reports the error and removes nothing outside.
func TestCleanTempsStopsAtMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: bind mounts need root (CAP_SYS_ADMIN)")
	}
	tmp := t.TempDir()
	outside := filepath.Join(tmp, "outside")
	base := filepath.Join(tmp, "base")
	leftover := filepath.Join(base, TempPrefix+"0123456789abcdef.tmp")
	mnt := filepath.Join(leftover, "m")
	for _, d := range []string{outside, mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	victim := filepath.Join(outside, "victim.txt")
	if err := os.WriteFile(victim, []byte("v"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(leftover, old, old); err != nil {
		t.Fatal(err)
	}
	var removed []string
	err := withBindMount(outside, mnt, func() error {
		r, err := os.OpenRoot(base)
		if err != nil {
			return err
		}
		defer r.Close()
		removed, err = CleanTemps(r, time.Now(), nil)
		return err
	})
	if !errors.Is(err, ErrMountBelow) || len(removed) != 0 {
		t.Errorf("CleanTemps = %q, %v; want nothing removed and ErrMountBelow", removed, err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("the file outside the base, below the mount, is gone: %v", err)
	}
}
