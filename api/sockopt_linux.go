package api

import (
	"net"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// recentlyHeard reports whether c has bytes waiting unread in the kernel
// (SIOCINQ), or received some within the last `within` (TCP_INFO): a
// connection whose request has arrived, or is being read, is not silent
// even while net/http still reports it new.
func recentlyHeard(c net.Conn, within time.Duration) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	heard := false
	raw.Control(func(fd uintptr) {
		n := 0
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n))); errno == 0 && n > 0 {
			heard = true
			return
		}
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return
		}
		// Last_data_recv is the time since the last data (ms); for a
		// connection that never received any, its age.
		since := time.Duration(info.Last_data_recv) * time.Millisecond
		heard = info.Data_segs_in > 0 && since < within
	})
	return heard
}
