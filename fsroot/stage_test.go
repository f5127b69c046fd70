package fsroot

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func entries(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil && p != dir {
			r, _ := filepath.Rel(dir, p)
			out = append(out, r)
		}
		return nil
	})
	return out
}

// TestStage: missing parents appear only at Commit, with the file; when
// the outermost was made meanwhile the file is moved into it; when a file
// took its name, Commit fails and nothing is left; Close without Commit
// leaves nothing.
func TestStage(t *testing.T) {
	write := func(s *Staged) {
		t.Helper()
		if err := WriteAtomic(s.Dir, "f", 0o644, func(w io.Writer) error { _, err := io.WriteString(w, "x"); return err }); err != nil {
			t.Fatal(err)
		}
	}
	r, dir := openRoot(t)
	os.Mkdir(filepath.Join(dir, "top"), 0o755)
	s, err := Stage(r, "top/a/b", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	write(s)
	if got := entries(t, dir); slices.Contains(got, "top/a") {
		t.Errorf("before Commit: %q; want no top/a", got)
	}
	if err := s.Commit("f", 0o755); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if got := entries(t, dir); !slices.Equal(got, []string{"top", "top/a", "top/a/b", "top/a/b/f"}) {
		t.Errorf("after Commit: %q", got)
	}

	// Made meanwhile: the file moves into the existing directory.
	s, err = Stage(r, "c/d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	write(s)
	os.MkdirAll(filepath.Join(dir, "c", "other"), 0o755)
	if err := s.Commit("f", 0o755); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if b, err := os.ReadFile(filepath.Join(dir, "c", "d", "f")); err != nil || string(b) != "x" {
		t.Errorf("c/d/f = %q, %v", b, err)
	}

	// A file took the name: ENOTDIR, and no staging directory is left.
	s, err = Stage(r, "e/g", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	write(s)
	os.WriteFile(filepath.Join(dir, "e"), nil, 0o644)
	if err := s.Commit("f", 0o755); !errors.Is(err, syscall.ENOTDIR) && !errors.Is(err, syscall.EEXIST) {
		t.Errorf("Commit over a file: %v; want ENOTDIR", err)
	}
	s.Close()

	// Closed without Commit.
	s, err = Stage(r, "h/i", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	write(s)
	s.Close()
	for _, e := range entries(t, dir) {
		if Hidden(filepath.Base(e)) || e == "h" {
			t.Errorf("left behind: %s", e)
		}
	}
}

// TestCleanTemps removes the daemon's temporary names older than since,
// anywhere below the root (files and staged directories), and keeps newer
// ones, look-alikes, and what lies behind a symlink.
func TestCleanTemps(t *testing.T) {
	r, dir := openRoot(t)
	outside := t.TempDir()
	old := ".sandbox-put-0123456789abcdef.tmp"
	up := UploadTempPrefix + "0b6a5ef8-8f7d-4b6b-9d1a-4f1e2d3c4b5a.tmp"
	for _, p := range []string{"a/b/" + old, up, "keep/.sandbox-put-x.tmp", "new/.sandbox-put-fedcba9876543210.tmp"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(dir, p), nil, 0o600)
	}
	os.MkdirAll(filepath.Join(dir, "s", old, "deeper"), 0o755) // a staged parent
	os.WriteFile(filepath.Join(outside, old), nil, 0o600)
	os.Symlink(outside, filepath.Join(dir, "link"))
	past := mustStat(t, filepath.Join(dir, "a/b/"+old)).ModTime().Add(-1)
	for _, p := range []string{"a/b/" + old, up, "keep/.sandbox-put-x.tmp", "s/" + old} {
		os.Chtimes(filepath.Join(dir, p), past, past)
	}
	since := past.Add(1)
	os.Chtimes(filepath.Join(dir, "new/.sandbox-put-fedcba9876543210.tmp"), since.Add(1e9), since.Add(1e9))
	removed, err := CleanTemps(r, since, nil)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{up, "a/b/" + old, "s/" + old}; !slices.Equal(removed, want) {
		t.Errorf("removed %q; want %q", removed, want)
	}
	for _, p := range []string{"keep/.sandbox-put-x.tmp", "new/.sandbox-put-fedcba9876543210.tmp", "link/" + old} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s: %v; want it kept", p, err)
		}
	}
}

func mustStat(t *testing.T, p string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}
