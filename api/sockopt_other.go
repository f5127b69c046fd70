//go:build !linux

package api

import (
	"net"
	"time"
)

// limitUnsent is a no-op where TCP_NOTSENT_LOWAT is not available.
func limitUnsent(net.Conn, int) {}

// recentlyHeard is false where SIOCINQ and TCP_INFO are not available.
func recentlyHeard(net.Conn, time.Duration) bool { return false }
