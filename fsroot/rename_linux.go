package fsroot

import (
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames old to new, both single names in the directory
// dir is rooted at, failing with EEXIST if new exists (renameat2
// RENAME_NOREPLACE, relative to dir's own descriptor: no path is re-opened).
// EINVAL or ENOSYS: the file system or kernel cannot.
func renameNoReplace(dir *os.Root, old, new string) error {
	d, err := dir.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	fd := int(d.Fd())
	if err := unix.Renameat2(fd, old, fd, new, unix.RENAME_NOREPLACE); err != nil {
		return &os.LinkError{Op: "renameat2", Old: old, New: new, Err: err}
	}
	return nil
}
