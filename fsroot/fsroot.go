// Package fsroot does file operations inside one directory tree, relative to
// an open directory (os.Root: openat with O_NOFOLLOW, symlinks resolved by
// hand and never past the root), so that a symlink or a directory swapped in
// mid-operation cannot take a read, a write or a delete outside the tree.
//
// Names given to these functions are slash-separated and relative to the
// root ("" or "." is the root itself). Nothing here opens a path string
// outside the root; callers open the root itself with os.OpenRoot.
//
// The functions are safe for concurrent use; the file system may change
// under them at any time, and then they fail or act on what they find, but
// always inside the root.
package fsroot

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// TempPrefix starts the name of every temporary file this package creates
// (always in the directory of the file it will replace).
const TempPrefix = ".sandbox-put-"

// IsEscape reports whether err is os.Root's refusal of a path that leaves
// the root (through `..` or a symlink). os does not export the error, so it
// is recognised by its text under a *PathError or *LinkError.
func IsEscape(err error) bool {
	for err != nil {
		if err.Error() == "path escapes from parent" {
			return true
		}
		err = errors.Unwrap(err)
	}
	return false
}

// Components splits a relative name into its non-empty components; "" and
// "." give none.
func Components(name string) []string {
	var out []string
	for _, c := range strings.Split(name, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// Sub opens the directory dir below r as a root of its own ("" is r
// itself, returned with a no-op close). Every later operation through the
// result happens in that very directory, whatever is renamed meanwhile.
// Anything but a directory at dir is ENOTDIR, at once: os.Root opens every
// component but the last with O_DIRECTORY|O_NOFOLLOW, so Sub asks it for
// dir + "/." — the last component is then ".", opened relative to dir's
// own descriptor, which the kernel has just checked to be a directory (a
// FIFO at dir cannot block the open). No path is ever re-opened by a name
// outside the root (no /proc/self/fd/N, which whoever can mount over /proc
// could point anywhere).
func Sub(r *os.Root, dir string) (*os.Root, func(), error) {
	parts := Components(dir)
	if len(parts) == 0 {
		return r, func() {}, nil
	}
	d, err := r.OpenRoot(strings.Join(parts, "/") + "/.")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			pe.Path = dir
		}
		return nil, nil, err
	}
	return d, func() { d.Close() }, nil
}

// MkdirAll creates dir and its missing parents below r like Python's
// os.makedirs(dir, exist_ok=True): going down from the root, components
// that exist (as anything) are skipped until the first one that does not;
// from there every component is created, the last one always (an existing
// directory there is fine). It returns the directories it created, outermost
// first, also on error, so that a caller that fails later can remove them
// (RemoveCreated). An error is a *fs.PathError naming the component (relative
// to r) whose mkdir failed.
func MkdirAll(r *os.Root, dir string, perm fs.FileMode) (created []string, err error) {
	parts := Components(dir)
	creating := false
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		last := i == len(parts)-1
		if !creating && !last {
			if _, err := r.Stat(p); err == nil {
				continue
			}
			creating = true
		}
		if err := r.Mkdir(p, perm); err != nil {
			fi, serr := r.Stat(p)
			switch {
			case serr == nil && fi.IsDir():
				continue
			case IsEscape(serr):
				return created, serr // it is there, as a symlink leading out
			}
			return created, &fs.PathError{Op: "mkdir", Path: p, Err: underlying(err)}
		}
		created = append(created, p)
	}
	return created, nil
}

// RemoveCreated removes the directories MkdirAll reported, innermost
// first. A directory that is no longer empty (someone wrote into it
// meanwhile) is kept, and so are its parents.
func RemoveCreated(r *os.Root, created []string) {
	for i := len(created) - 1; i >= 0; i-- {
		if r.Remove(created[i]) != nil {
			return
		}
	}
}

// WriteAtomic replaces (or creates) the file name in dir with what fill
// writes: fill writes to a new temporary file in dir, which gets mode,
// is synced, and is renamed over name; dir is synced after the rename. A
// reader sees the old content or the new, never a mix; once WriteAtomic
// returns nil the new content survives a crash. On any error the temporary
// file is removed and name is untouched. fill's error is returned as it is.
//
// name must be a single component: dir is the directory handle that pins
// where the file goes.
func WriteAtomic(dir *os.Root, name string, mode fs.FileMode, fill func(io.Writer) error) (err error) {
	tmp, tmpName, err := CreateTemp(dir, TempPrefix)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			dir.Remove(tmpName)
		}
	}()
	if err = fill(tmp); err != nil {
		return err
	}
	if err = tmp.Chmod(mode); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = dir.Rename(tmpName, name); err != nil {
		return err
	}
	// The rename is done: a failed directory sync is not a failed write
	// (the content is in place and readable), so it is not reported.
	SyncDir(dir)
	return nil
}

// SyncDir fsyncs the directory r is rooted at.
func SyncDir(r *os.Root) error {
	d, err := r.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// CreateTemp creates a new empty file prefix+random+".tmp" in dir with mode
// 0600 (O_EXCL: an existing name, or a symlink planted there, is never
// opened) and returns it with its name.
func CreateTemp(dir *os.Root, prefix string) (*os.File, string, error) {
	for range 100 {
		var b [8]byte
		rand.Read(b[:])
		name := prefix + hex.EncodeToString(b[:]) + ".tmp"
		f, err := dir.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, name, err
	}
	return nil, "", &fs.PathError{Op: "createtemp", Path: prefix + "*.tmp", Err: syscall.EEXIST}
}

// underlying is the errno (or other cause) inside a *PathError.
func underlying(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
