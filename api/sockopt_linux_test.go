package api

import (
	"net"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// TestRecentlyHeard: a connection is heard while its bytes wait unread and
// for a second after they arrived, never before it sent any.
func TestRecentlyHeard(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if recentlyHeard(s, time.Second) {
		t.Fatal("a silent connection was heard")
	}
	sent := time.Now()
	c.Write([]byte("GET / HTTP/1.1\r\n"))
	waitFor(t, "the bytes sent to arrive", func() bool { return inq(t, s) > 0 })
	if !recentlyHeard(s, time.Second) {
		t.Fatal("bytes waiting unread were not heard")
	}
	s.Read(make([]byte, 100))
	if !recentlyHeard(s, time.Second) {
		t.Fatal("bytes read just now were not heard")
	}
	// The last byte ages: within a short window it stops counting as heard.
	waitFor(t, "the last byte to age past 100 ms", func() bool { return !recentlyHeard(s, 100*time.Millisecond) })
	if age := time.Since(sent); age < 90*time.Millisecond { // the kernel counts in jiffies
		t.Fatalf("not heard %v after the last byte was sent; want at least 100 ms", age)
	}
}

// inq returns the bytes waiting unread on c (TIOCINQ).
func inq(t *testing.T, c net.Conn) int {
	t.Helper()
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	raw.Control(func(fd uintptr) {
		syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	})
	return n
}

// waitFor polls cond (a kernel state nobody can notify the test of) for up
// to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
