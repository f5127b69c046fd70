package api

import (
	"net"
	"testing"
	"time"
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
	time.Sleep(20 * time.Millisecond)
	if recentlyHeard(s, time.Second) {
		t.Fatal("a silent connection was heard")
	}
	c.Write([]byte("GET / HTTP/1.1\r\n"))
	time.Sleep(20 * time.Millisecond)
	if !recentlyHeard(s, time.Second) {
		t.Fatal("bytes waiting unread were not heard")
	}
	s.Read(make([]byte, 100))
	if !recentlyHeard(s, time.Second) {
		t.Fatal("bytes read just now were not heard")
	}
	time.Sleep(1100 * time.Millisecond)
	if recentlyHeard(s, time.Second) {
		t.Fatal("heard 1.1 s after the last byte")
	}
}
