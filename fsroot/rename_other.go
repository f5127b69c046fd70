//go:build !linux

package fsroot

import (
	"os"
	"syscall"
)

// renameNoReplace is not available here: EINVAL makes callers take their
// fallback.
func renameNoReplace(dir *os.Root, old, new string) error {
	return &os.LinkError{Op: "renameat2", Old: old, New: new, Err: syscall.EINVAL}
}
