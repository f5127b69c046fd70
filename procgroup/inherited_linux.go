//go:build linux

package procgroup

import (
	"math"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// MarkInheritedFDs marks close-on-exec every descriptor from 3 up, so that
// none the daemon inherited without the flag (a socket or a file its
// launcher left open) reaches the commands it runs: each command gets only
// the stdin, stdout and stderr Start gives it. It returns the descriptors
// that lacked the flag, for the log. Call it first in main, before anything
// opens a descriptor to hand on (nothing does: every descriptor Go and this
// module open is close-on-exec already, so marking them again changes
// nothing, and the flag only matters at exec; the Go runtime's own epoll and
// wake-up descriptors are among them).
//
// close_range(3, ~0, CLOSE_RANGE_CLOEXEC) does it in one call (Linux
// 5.11+); older kernels get one fcntl per descriptor found in /proc/self/fd.
func MarkInheritedFDs() []int {
	var found []int
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil { // its own fd is close-on-exec
		for _, e := range ents {
			fd, err := strconv.Atoi(e.Name())
			if err != nil || fd < 3 {
				continue
			}
			if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
				found = append(found, fd)
			}
		}
	}
	slices.Sort(found) // ReadDir sorts by name
	if unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC) != nil {
		for _, fd := range found {
			unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
	return found
}
