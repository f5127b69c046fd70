//go:build linux && !amd64

package procgroup

// This architecture has only pselect6 and ppoll (or WaitingForInput does not
// decode its select and poll): no system call number matches these.
const (
	sysSelect = -1
	sysPoll   = -1
)
