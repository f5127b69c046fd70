//go:build !linux

package httpx

import "net"

// LimitUnsent is a no-op where TCP_NOTSENT_LOWAT is not available.
func LimitUnsent(net.Conn, int) {}
