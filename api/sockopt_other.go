//go:build !linux

package api

import "net"

// limitUnsent is a no-op where TCP_NOTSENT_LOWAT is not available.
func limitUnsent(net.Conn, int) {}
