// Package netports finds the listening sockets of processes from /proc:
// the TCP sockets in LISTEN state and the bound, unconnected UDP sockets
// of a network namespace (/proc/<pid>/net/{tcp,tcp6,udp,udp6}), and which
// of them the given processes hold (their /proc/<pid>/fd links
// "socket:[inode]"). Linux sends no notification on listen() or bind(): a
// caller polls (protocol.md §4 "Listening ports").
package netports

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Limits of one read.
const (
	// MaxSockets bounds the sockets one table read records (a namespace
	// with more listening sockets has the first MaxSockets of them).
	MaxSockets = 1 << 14
	// maxTableBytes bounds what is read of one /proc/net table (about
	// 150 bytes a line: every socket of a busy namespace, listening or not).
	maxTableBytes = 64 << 20
	// MaxFDs bounds the descriptors read per process.
	MaxFDs = 1 << 16
)

// Socket is one listening socket of a namespace.
type Socket struct {
	Protocol string     // "tcp" or "udp" (an IPv6 socket is "tcp"/"udp" too: its address says)
	Addr     netip.Addr // the local address (unspecified: every address)
	Port     uint16
	Inode    uint64
}

// LoopbackOnly reports whether the socket is reachable only from inside
// the host: bound to 127.0.0.0/8, ::1 or an IPv4-mapped loopback address.
func (s Socket) LoopbackOnly() bool { return s.Addr.Unmap().IsLoopback() }

// Key identifies a listener by what a client sees: protocol, address, port.
func (s Socket) Key() string {
	return s.Protocol + " " + netip.AddrPortFrom(s.Addr, s.Port).String()
}

// Namespace reads the listening sockets of the network namespace of pid
// (0: this process's), oldest table first: tcp, tcp6, udp, udp6. A table
// that does not exist (no IPv6) is skipped.
func Namespace(pid int) ([]Socket, error) {
	dir := "/proc/self/net/"
	if pid > 0 {
		dir = "/proc/" + strconv.Itoa(pid) + "/net/"
	}
	var out []Socket
	for _, t := range []struct {
		file, proto string
		v6          bool
	}{{"tcp", "tcp", false}, {"tcp6", "tcp", true}, {"udp", "udp", false}, {"udp6", "udp", true}} {
		f, err := os.Open(dir + t.file)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return out, err
		}
		out, err = parseTable(io.LimitReader(f, maxTableBytes), t.proto, t.v6, out)
		f.Close()
		if err != nil {
			return out, fmt.Errorf("%s%s: %w", dir, t.file, err)
		}
	}
	return out, nil
}

// TCP states of /proc/net/tcp (include/net/tcp_states.h).
const (
	tcpListen = 0x0A
	udpUnconn = 0x07 // TCP_CLOSE: a UDP socket that is bound but not connected
)

// parseTable appends the listening sockets of one /proc/net table.
func parseTable(r io.Reader, proto string, v6 bool, out []Socket) ([]Socket, error) {
	// 64 KiB reads: the kernel resumes its walk of the socket hash at
	// each read() of /proc/net/tcp (measured on a 340-socket namespace:
	// 6.3 ms a table with 4 KiB reads, 3.0 ms with 64 KiB).
	sc := bufio.NewScanner(bufio.NewReaderSize(r, 64<<10))
	sc.Buffer(make([]byte, 0, 512), 4096)
	first := true
	for sc.Scan() {
		if first { // the header line
			first = false
			continue
		}
		// "sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode …"
		f := bytes.Fields(sc.Bytes())
		if len(f) < 10 {
			return out, fmt.Errorf("a line of %d fields: %q", len(f), sc.Bytes())
		}
		st, err := strconv.ParseUint(string(f[3]), 16, 8)
		if err != nil {
			return out, fmt.Errorf("state %q: %w", f[3], err)
		}
		want := uint64(tcpListen)
		if proto == "udp" {
			want = udpUnconn
		}
		if st != want {
			continue
		}
		addr, port, err := parseAddr(string(f[1]), v6)
		if err != nil {
			return out, err
		}
		if port == 0 { // an unbound UDP socket
			continue
		}
		inode, err := strconv.ParseUint(string(f[9]), 10, 64)
		if err != nil {
			return out, fmt.Errorf("inode %q: %w", f[9], err)
		}
		if len(out) >= MaxSockets {
			break
		}
		out = append(out, Socket{Protocol: proto, Addr: addr, Port: port, Inode: inode})
	}
	return out, sc.Err()
}

// parseAddr parses "0100007F:1F90" (IPv4: one little-endian word) or the
// IPv6 form (four 32-bit words, each in host order: little-endian here).
func parseAddr(s string, v6 bool) (netip.Addr, uint16, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.Addr{}, 0, fmt.Errorf("address %q", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("port of %q: %w", s, err)
	}
	b, err := hex.DecodeString(h)
	if err != nil || (!v6 && len(b) != 4) || (v6 && len(b) != 16) {
		return netip.Addr{}, 0, fmt.Errorf("address %q", s)
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	a, _ := netip.AddrFromSlice(b)
	return a, uint16(port), nil
}

// SocketInodes adds to set the socket inodes the descriptors of pid hold
// (at most MaxFDs descriptors). A process that is gone, or whose fds
// cannot be read, adds nothing.
func SocketInodes(pid int, set map[uint64]bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	defer d.Close()
	names, _ := d.Readdirnames(MaxFDs)
	for _, n := range names {
		l, err := os.Readlink(dir + n)
		if err != nil || !strings.HasPrefix(l, "socket:[") || !strings.HasSuffix(l, "]") {
			continue
		}
		if ino, err := strconv.ParseUint(l[len("socket:["):len(l)-1], 10, 64); err == nil {
			set[ino] = true
		}
	}
}

// NetNS returns the identity of pid's network namespace (its
// /proc/<pid>/ns/net link, "net:[…]"), "" when it cannot be read.
func NetNS(pid int) string {
	p := "/proc/self/ns/net"
	if pid > 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/ns/net"
	}
	l, _ := os.Readlink(p)
	return l
}

// Held returns the sockets of socks that the processes pids hold, in
// socks' order, each listener (Key) once.
func Held(socks []Socket, pids []int) []Socket {
	if len(pids) == 0 || len(socks) == 0 {
		return nil
	}
	set := make(map[uint64]bool)
	for _, pid := range pids {
		SocketInodes(pid, set)
	}
	var out []Socket
	for _, s := range socks {
		if set[s.Inode] && !slices.ContainsFunc(out, func(o Socket) bool { return o.Key() == s.Key() }) {
			out = append(out, s)
		}
	}
	return out
}
