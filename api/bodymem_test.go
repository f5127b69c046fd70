package api

import (
	"net"
	"net/http"
	"sync"
	"testing"

	"go.uber.org/zap"
)

// fakeConn is a net.Conn that records its Close.
type fakeConn struct {
	net.Conn
	mu     sync.Mutex
	closed bool
}

func (c *fakeConn) Close() error { c.mu.Lock(); c.closed = true; c.mu.Unlock(); return nil }
func (c *fakeConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// TestConnLimiter: beyond the cap, the connections idle the longest are
// closed, never the newest nor one with a request in progress (until the
// hard cap); closed connections stop counting at once.
func TestConnLimiter(t *testing.T) {
	l := newConnLimiter(fdReserve+256, zap.NewNop())
	l.soft, l.hard = 128, 160
	if l.soft != 128 || l.hard != 160 {
		t.Fatalf("caps %d/%d; want 128/160", l.soft, l.hard)
	}
	if s, h := maxConnsFor(20000); s != 14616 || h != 15834 {
		t.Errorf("caps at 20,000 fds: %d/%d; want 14616/15834", s, h)
	}
	var conns []*fakeConn
	open := func(st ...http.ConnState) *fakeConn {
		c := &fakeConn{}
		conns = append(conns, c)
		l.connState(c, http.StateNew)
		for _, s := range st {
			l.connState(c, s)
		}
		return c
	}
	// 100 busy connections, then 28 idle ones: at the cap, nothing closed.
	for range 100 {
		open(http.StateActive)
	}
	for range 28 {
		open(http.StateActive, http.StateIdle)
	}
	for i, c := range conns {
		if c.isClosed() {
			t.Fatalf("connection %d closed under the cap", i)
		}
	}
	// 10 silent ones: each closes the oldest idle (keep-alive) connection.
	for range 10 {
		open()
	}
	closed := 0
	for i, c := range conns {
		if c.isClosed() {
			closed++
			if i < 100 || i >= 110 {
				t.Errorf("connection %d closed; want the 10 oldest idle ones (100–109)", i)
			}
		}
	}
	if closed != 10 || len(l.conns) != l.soft {
		t.Errorf("%d closed, %d open; want 10 and %d", closed, len(l.conns), l.soft)
	}
	// A probe among silent newcomers: a flood of 300 more silent
	// connections closes the older ones, each newest survives its arrival.
	for range 300 {
		c := open()
		if c.isClosed() {
			t.Fatal("the newest connection was closed")
		}
	}
	for i, c := range conns[:100] {
		if c.isClosed() {
			t.Fatalf("busy connection %d closed below the hard cap", i)
		}
	}
	// Only busy connections left beyond the cap: they are kept up to the
	// hard cap, then the oldest busy ones go.
	for _, c := range conns[100:] {
		if !c.isClosed() {
			l.connState(c, http.StateActive)
		}
	}
	for range l.hard - len(l.conns) + 5 {
		open(http.StateActive)
	}
	if len(l.conns) != l.hard {
		t.Errorf("%d open; want the hard cap %d", len(l.conns), l.hard)
	}
	for i, c := range conns[:5] {
		if !c.isClosed() {
			t.Errorf("busy connection %d open beyond the hard cap; want the oldest closed", i)
		}
	}
	// Closing and hijacking stop the count.
	before := len(l.conns)
	l.connState(conns[len(conns)-1], http.StateClosed)
	l.connState(conns[len(conns)-2], http.StateHijacked)
	l.connState(conns[0], http.StateClosed) // already closed by the limiter: no double count
	if len(l.conns) != before-2 {
		t.Errorf("%d open after two closes; want %d", len(l.conns), before-2)
	}
}
