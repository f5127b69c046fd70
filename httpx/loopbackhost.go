package httpx

import (
	"net"
	"net/netip"
	"strings"
)

// LoopbackHost reports whether host (a request's Host header or an HTTP/2
// :authority, with or without a port) names the loopback interface by a
// loopback IP literal (127.0.0.0/8, ::1, [::1]:port) or as "localhost".
//
// A listener that asks no token (sandboxd's REST and gRPC on loopback)
// serves only such hosts: a web page whose own name an attacker has
// re-pointed at 127.0.0.1 (DNS rebinding) sends its own name as Host (and
// as Origin, so the origin rule lets it through), which is refused here,
// as Jupyter and webpack-dev-server do.
func LoopbackHost(host string) bool {
	h := host
	if sh, port, err := net.SplitHostPort(host); err == nil {
		if port == "" || strings.Trim(port, "0123456789") != "" {
			return false
		}
		h = sh
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		h = host[1 : len(host)-1]
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Zone() == "" && a.Unmap().IsLoopback()
}
