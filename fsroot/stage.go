package fsroot

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// Staged is the directory a write goes to when some of its parents do not
// exist yet: the missing parents are made under a Hidden temporary name in
// the deepest existing parent, and appear at their real names only in
// Commit, by one rename. A write cut short (an error, a SIGKILL) leaves no
// parent behind at its real name; only the temporary name, which listings
// hide and CleanTemps removes at the next start.
type Staged struct {
	Dir *os.Root // where the file goes (single names)

	parent  *os.Root // the deepest existing parent ("" when nothing is staged)
	tmp     string   // the temporary directory in parent, standing for missing[0]
	missing []string // the parents that did not exist, outermost first
	closers []func()
	done    bool
}

// Stage opens the directory dir below r for a write, staging its missing
// components (see Staged). Components that exist (as anything) are
// skipped until the first that does not; one that exists but is not a
// directory is ENOTDIR. The caller calls Commit once the file is in
// s.Dir, and Close always.
func Stage(r *os.Root, dir string, perm fs.FileMode) (*Staged, error) {
	parts := Components(dir)
	k := 0
	for ; k < len(parts); k++ {
		_, err := r.Stat(strings.Join(parts[:k+1], "/"))
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil && IsEscape(err) {
			return nil, err
		}
	}
	s := &Staged{}
	parent, closeParent, err := Sub(r, strings.Join(parts[:k], "/"))
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, closeParent)
	if k == len(parts) {
		s.Dir, s.done = parent, true
		return s, nil
	}
	s.parent, s.missing = parent, parts[k:]
	for range 100 {
		var b [8]byte
		rand.Read(b[:])
		s.tmp = TempPrefix + hex.EncodeToString(b[:]) + ".tmp"
		if err = parent.Mkdir(s.tmp, perm); !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		s.tmp = ""
		s.Close()
		return nil, err
	}
	inner := strings.Join(append([]string{s.tmp}, s.missing[1:]...), "/")
	if len(s.missing) > 1 {
		if err := parent.MkdirAll(inner, perm); err != nil {
			s.Close()
			return nil, err
		}
	}
	d, closeDir, err := Sub(parent, inner)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Dir = d
	s.closers = append(s.closers, closeDir)
	return s, nil
}

// Commit puts the staged parents, with name in the innermost, at their
// real names. When someone created the outermost meanwhile, the parents
// are made in place (as MkdirAll) and name alone is moved there: it
// replaces a file of that name, and a directory there is EISDIR or
// EEXIST. On error nothing is left at a real name but what was there.
func (s *Staged) Commit(name string, perm fs.FileMode) error {
	if s.done {
		return nil
	}
	err := renameNoReplace(s.parent, s.tmp, s.missing[0])
	if err == nil {
		s.done, s.tmp = true, "" // the staging directory is the real one now
		SyncDir(s.parent)
		return nil
	}
	if e := errors.Unwrap(err); e != syscall.EEXIST && e != syscall.EINVAL && e != syscall.ENOSYS {
		return err
	}
	real := strings.Join(s.missing, "/")
	created, err := MkdirAll(s.parent, real, perm)
	if err != nil {
		RemoveCreated(s.parent, created)
		return err
	}
	from := strings.Join(append([]string{s.tmp}, s.missing[1:]...), "/") + "/" + name
	if err := s.parent.Rename(from, real+"/"+name); err != nil {
		RemoveCreated(s.parent, created)
		return err
	}
	s.done = true
	return nil
}

// Close releases the directories and removes the staged parents unless
// they were committed (after a fallback Commit, the empty staging
// directory).
func (s *Staged) Close() {
	if s.tmp != "" {
		RemoveAllSameMount(s.parent, s.tmp) // never below a mount made in it meanwhile
		s.tmp = ""
	}
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}
