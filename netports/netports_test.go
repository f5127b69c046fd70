//go:build linux

package netports

import (
	"net"
	"net/netip"
	"os"
	"testing"
)

// TestOwnSockets: real sockets of this process, TCP on ::1 (when the host
// has IPv6) and 127.0.0.1, UDP bound on 127.0.0.1, and a connected UDP
// socket that is not a listener: the tables show the listeners with their
// addresses, Held finds them among this process's descriptors, and the
// connected one is not there.
func TestOwnSockets(t *testing.T) {
	tcp4, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp4.Close()
	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	conn, err := net.Dial("udp4", udp.LocalAddr().String()) // connected: not a listener
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	want := []Socket{
		{Protocol: "tcp", Addr: netip.MustParseAddr("127.0.0.1"), Port: uint16(tcp4.Addr().(*net.TCPAddr).Port)},
		{Protocol: "udp", Addr: netip.MustParseAddr("127.0.0.1"), Port: uint16(udp.LocalAddr().(*net.UDPAddr).Port)},
	}
	if tcp6, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		defer tcp6.Close()
		want = append(want, Socket{Protocol: "tcp", Addr: netip.MustParseAddr("::1"), Port: uint16(tcp6.Addr().(*net.TCPAddr).Port)})
	}
	socks, err := Namespace(0)
	if err != nil {
		t.Fatal(err)
	}
	held := Held(socks, []int{os.Getpid()})
	for _, w := range want {
		found := false
		for _, h := range held {
			if h.Key() == w.Key() {
				found = true
				if !h.LoopbackOnly() {
					t.Errorf("%s: loopback_only false", w.Key())
				}
			}
		}
		if !found {
			t.Errorf("%s not among this process's listeners %v", w.Key(), held)
		}
	}
	cport := uint16(conn.LocalAddr().(*net.UDPAddr).Port)
	for _, h := range held {
		if h.Protocol == "udp" && h.Port == cport {
			t.Errorf("the connected UDP socket %d is listed as a listener", cport)
		}
	}
	if NetNS(0) == "" || NetNS(os.Getpid()) != NetNS(0) {
		t.Errorf("NetNS: %q, %q", NetNS(0), NetNS(os.Getpid()))
	}
}
