package fsroot

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

func openRoot(t *testing.T) (*os.Root, string) {
	t.Helper()
	dir := t.TempDir()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, dir
}

func names(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return strings.Join(out, " ")
}

func TestMkdirAll(t *testing.T) {
	r, dir := openRoot(t)
	created, err := MkdirAll(r, "a/b/c", 0o755)
	if err != nil || strings.Join(created, " ") != "a a/b a/b/c" {
		t.Fatalf("MkdirAll(a/b/c) = %q, %v; want all three created", created, err)
	}
	if created, err = MkdirAll(r, "a/b", 0o755); err != nil || len(created) != 0 {
		t.Errorf("MkdirAll of an existing dir = %q, %v; want nothing, nil", created, err)
	}
	if created, err = MkdirAll(r, "", 0o755); err != nil || len(created) != 0 {
		t.Errorf("MkdirAll(\"\") = %q, %v", created, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Like os.makedirs: the last component that is a file is EEXIST
	// naming it; below a file, ENOTDIR naming the first missing one.
	for name, want := range map[string]string{
		"f":     "mkdir f: " + syscall.EEXIST.Error(),
		"f/x/y": "mkdir f/x: " + syscall.ENOTDIR.Error(),
	} {
		created, err := MkdirAll(r, name, 0o755)
		if err == nil || err.Error() != want || len(created) != 0 {
			t.Errorf("MkdirAll(%q) = %q, %v; want %q", name, created, err, want)
		}
	}
	// Escaping is refused and creates nothing outside.
	if _, err := MkdirAll(r, "../escaped", 0o755); err == nil {
		t.Error("MkdirAll(../escaped) succeeded")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escaped")); err == nil {
		t.Error("a directory was created outside the root")
	}
	created, _ = MkdirAll(r, "a/n1/n2", 0o755)
	os.WriteFile(filepath.Join(dir, "a/n1/keep"), nil, 0o644)
	RemoveCreated(r, created)
	if got := names(t, dir); got != "a a/b a/b/c a/n1 a/n1/keep f" {
		t.Errorf("after RemoveCreated: %q; want n2 gone, n1 kept (not empty)", got)
	}
}

func TestWriteAtomic(t *testing.T) {
	r, dir := openRoot(t)
	fill := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
	}
	if err := WriteAtomic(r, "f", 0o640, fill("one")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "f"))
	if b, _ := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "one" || fi.Mode().Perm() != 0o640 {
		t.Errorf("after WriteAtomic: %q %v %v; want one 0640", b, fi.Mode(), err)
	}
	boom := errors.New("boom")
	if err := WriteAtomic(r, "f", 0o644, func(w io.Writer) error { io.WriteString(w, "partial"); return boom }); err != boom {
		t.Errorf("fill error: %v; want it returned as is", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "d", "x"), nil, 0o644)
	if err := WriteAtomic(r, "d", 0o644, fill("two")); err == nil {
		t.Error("WriteAtomic over a non-empty directory succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != "one" {
		t.Errorf("after failed writes f is %q; want one", b)
	}
	if got := names(t, dir); got != "d d/x f" {
		t.Errorf("after failed writes: %q; want no temporary file", got)
	}
}

func TestCreateTempNeverFollows(t *testing.T) {
	r, dir := openRoot(t)
	outside := t.TempDir()
	f, name, err := CreateTemp(r, TempPrefix)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if !strings.HasPrefix(name, TempPrefix) || strings.Contains(name, "/") {
		t.Errorf("temp name %q", name)
	}
	// A symlink planted at the name is not opened (O_EXCL).
	os.Remove(filepath.Join(dir, name))
	os.Symlink(filepath.Join(outside, "target"), filepath.Join(dir, name))
	if _, err := r.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); !errors.Is(err, fs.ErrExist) {
		t.Errorf("O_EXCL over a planted symlink: %v; want EEXIST", err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "target")); err == nil {
		t.Error("the planted symlink's target was created")
	}
}

func TestIsEscape(t *testing.T) {
	r, dir := openRoot(t)
	os.Symlink("/etc", filepath.Join(dir, "out"))
	for _, name := range []string{"../x", "out/passwd"} {
		if _, err := r.Open(name); !IsEscape(err) {
			t.Errorf("Open(%q): %v; want an escape", name, err)
		}
	}
	if _, err := r.Open("missing"); IsEscape(err) || err == nil {
		t.Errorf("Open(missing): %v; want not-exist, not an escape", err)
	}
	if IsEscape(nil) {
		t.Error("IsEscape(nil)")
	}
}

func TestSub(t *testing.T) {
	r, dir := openRoot(t)
	os.MkdirAll(filepath.Join(dir, "a/b"), 0o755)
	d, closeSub, err := Sub(r, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer closeSub()
	// Renaming the directory away does not change where d works.
	if err := os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(d, "f", 0o644, func(w io.Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "moved", "f")); err != nil {
		t.Errorf("the file did not land in the opened directory: %v", err)
	}
	if same, _, _ := Sub(r, ""); same != r {
		t.Error(`Sub(r, "") is not r`)
	}
}

// TestSubNotADirectory: Sub of a FIFO is ENOTDIR at once (never an open
// that waits for a writer), a symlink to a directory inside the root is
// followed, one leading out is the root's escape error.
func TestSubNotADirectory(t *testing.T) {
	r, dir := openRoot(t)
	os.MkdirAll(filepath.Join(dir, "a"), 0o755)
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Symlink("a", filepath.Join(dir, "in"))
	os.Symlink(t.TempDir(), filepath.Join(dir, "out"))
	done := make(chan error, 1)
	go func() { _, _, err := Sub(r, "fifo"); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, syscall.ENOTDIR) {
			t.Errorf("Sub(fifo) = %v, want ENOTDIR", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Sub(fifo) blocked")
	}
	d, closeSub, err := Sub(r, "in")
	if err != nil {
		t.Fatalf("Sub(in → a) = %v", err)
	}
	defer closeSub()
	if err := WriteAtomic(d, "f", 0o644, func(w io.Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a", "f")); err != nil {
		t.Errorf("Sub(in) is not a: %v", err)
	}
	if _, _, err := Sub(r, "out"); !IsEscape(err) {
		t.Errorf("Sub(out → outside) = %v, want the escape error", err)
	}
}
