//go:build !linux

package fsroot

import (
	"errors"
	"os"
)

// ErrMountBelow is the error of RemoveAllSameMount when a directory below
// the one removed is on another mount (detected on Linux only).
var ErrMountBelow = errors.New("a file system is mounted below it")

// RemoveAllSameMount is os.Root.RemoveAll here: no mount ids to compare.
func RemoveAllSameMount(dir *os.Root, name string) error {
	return dir.RemoveAll(name)
}

// removeAllAt is RemoveAllSameMount of name in the open directory d.
func removeAllAt(d *os.File, name string) error {
	r, err := os.OpenRoot(d.Name())
	if err != nil {
		return err
	}
	defer r.Close()
	return r.RemoveAll(name)
}
