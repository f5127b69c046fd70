package fsroot

import (
	"errors"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrMountBelow is the error of RemoveAllSameMount (wrapped in a
// *PathError naming the directory, with EBUSY inside) when a directory
// below the one removed is on another mount.
var ErrMountBelow = errors.New("a file system is mounted below it")

// mountError is a *PathError for the mount at rel whose Unwrap chain holds
// both ErrMountBelow and EBUSY.
type mountError struct{}

func (mountError) Error() string { return ErrMountBelow.Error() }
func (mountError) Is(target error) bool {
	return target == ErrMountBelow || target == syscall.EBUSY
}

// RemoveAllSameMount removes name (a single component) of the directory
// dir is rooted at, and everything below it, like os.Root.RemoveAll, but
// never below a mount: every directory is opened relative to its parent's
// descriptor (O_NOFOLLOW, no path re-opened) and its mount (statx
// STATX_MNT_ID, or the device where the kernel has no mount ids) compared
// with dir's own before anything in it is touched. A directory on another
// mount (a bind mount, however it got there, whatever /proc says) fails
// the removal with a *PathError naming it relative to dir and matching
// ErrMountBelow and syscall.EBUSY.
//
// The tree is walked twice: once to look for mounts, removing nothing (a
// tree with a mount below it is left whole), then to remove, checking
// again (a mount that appears between the walks stops the removal there:
// what was removed before stays removed, nothing below the mount is
// touched).
func RemoveAllSameMount(dir *os.Root, name string) error {
	d, err := dir.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	return removeAllAt(d, name)
}

// removeAllAt is RemoveAllSameMount of name in the open directory d.
func removeAllAt(d *os.File, name string) error {
	want, err := mountOf(int(d.Fd()))
	if err != nil {
		return &os.PathError{Op: "statx", Path: ".", Err: err}
	}
	for _, remove := range []bool{false, true} {
		if err := removeTree(int(d.Fd()), name, name, want, remove); err != nil {
			return err
		}
	}
	return nil
}

// mountID is where a directory is mounted: statx's mount id when the
// kernel gives one (5.8+), else the device.
type mountID struct {
	id       uint64
	hasID    bool
	maj, min uint32
}

func (a mountID) same(b mountID) bool {
	if a.maj != b.maj || a.min != b.min {
		return false
	}
	return !a.hasID || !b.hasID || a.id == b.id
}

// mountOf is the mount of the open descriptor fd.
func mountOf(fd int) (mountID, error) {
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &st); err != nil {
		return mountID{}, err
	}
	return mountID{id: st.Mnt_id, hasID: st.Mask&unix.STATX_MNT_ID != 0, maj: st.Dev_major, min: st.Dev_minor}, nil
}

// removeTree checks (and, if remove, removes) the entry name of the
// directory open as parent, rel being its name for errors.
func removeTree(parent int, name, rel string, want mountID, remove bool) error {
	if remove {
		err := unix.Unlinkat(parent, name, 0)
		switch {
		case err == nil, err == unix.ENOENT:
			return nil
		case err != unix.EISDIR && err != unix.EPERM:
			return &os.PathError{Op: "unlinkat", Path: rel, Err: err}
		}
	}
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case err == unix.ENOENT:
		return nil
	case !remove && (err == unix.ENOTDIR || err == unix.ELOOP):
		return nil // not a directory: nothing below it
	case remove && (err == unix.ENOTDIR || err == unix.ELOOP):
		// Replaced by a file or a symlink since the unlink: remove that.
		if err := unix.Unlinkat(parent, name, 0); err != nil && err != unix.ENOENT {
			return &os.PathError{Op: "unlinkat", Path: rel, Err: err}
		}
		return nil
	case err != nil:
		return &os.PathError{Op: "openat", Path: rel, Err: err}
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	got, err := mountOf(fd)
	if err != nil {
		return &os.PathError{Op: "statx", Path: rel, Err: err}
	}
	if !got.same(want) {
		return &os.PathError{Op: "remove", Path: rel, Err: mountError{}}
	}
	for {
		ents, rerr := f.ReadDir(listBatch)
		for _, e := range ents {
			if !remove && !e.IsDir() {
				continue
			}
			if err := removeTree(fd, e.Name(), rel+"/"+e.Name(), want, remove); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return &os.PathError{Op: "readdir", Path: rel, Err: rerr}
		}
		if remove {
			// Removing while reading: start again from the first entry
			// that is left, so none is skipped.
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return &os.PathError{Op: "seek", Path: rel, Err: err}
			}
		}
	}
	if !remove {
		return nil
	}
	if err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "rmdir", Path: rel, Err: err}
	}
	return nil
}
