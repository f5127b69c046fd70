//go:build linux && amd64

package procgroup

import "golang.org/x/sys/unix"

// select(2) and poll(2), which newer architectures no longer have.
const (
	sysSelect = unix.SYS_SELECT
	sysPoll   = unix.SYS_POLL
)
