package fsroot

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestOpenReadable: a regular file is opened, a directory only when asked
// for, and a FIFO (which would block a plain open) or a socket is refused
// with ErrNotFileOrDir, nothing left open.
func TestOpenReadable(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, c := range []struct {
		rel  string
		dirs bool
		ok   bool
	}{
		{"f", false, true}, {"f", true, true},
		{"d", true, true}, {"d", false, false}, {"", true, true}, {"", false, false},
		{"fifo", true, false}, {"sock", true, false},
	} {
		f, fi, err := OpenReadable(root, c.rel, c.dirs)
		switch {
		case c.ok && (err != nil || f == nil || fi == nil):
			t.Errorf("OpenReadable(%q, dirs=%v) = %v; want the file", c.rel, c.dirs, err)
		case !c.ok && !errors.Is(err, ErrNotFileOrDir):
			t.Errorf("OpenReadable(%q, dirs=%v) = %v; want ErrNotFileOrDir", c.rel, c.dirs, err)
		}
		if f != nil {
			f.Close()
		}
	}
	if _, _, err := OpenReadable(root, "missing", true); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v; want the open's ErrNotExist", err)
	}
}
