package httpx

import (
	"net"
	"syscall"
)

// tcpNotsentLowat is TCP_NOTSENT_LOWAT (linux/tcp.h), absent from syscall.
const tcpNotsentLowat = 0x19

// LimitUnsent makes the kernel hold at most about n bytes of c that are
// not yet sent (TCP_NOTSENT_LOWAT): a write to a slow reader then blocks
// once the reader's window and n bytes are queued, instead of filling a
// send buffer that autotuning grows to megabytes, and it is woken as the
// reader takes bytes rather than once megabytes have drained. Throughput is
// not affected: what is in flight is still governed by the peer's window.
// Errors are ignored.
func LimitUnsent(c net.Conn, n int) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpNotsentLowat, n)
	})
}
