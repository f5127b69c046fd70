//go:build !linux

package api

import (
	"net"
	"time"
)

// recentlyHeard is false where SIOCINQ and TCP_INFO are not available.
func recentlyHeard(net.Conn, time.Duration) bool { return false }
