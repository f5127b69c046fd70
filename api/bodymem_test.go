package api

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// TestBodyReadGrowsAsBytesArrive: a body that announces 1 MiB and sends 12
// bytes costs 12 bytes, not the announced size. Before: the /execute reader
// grew its buffer to Content-Length up front (cap 1 MiB + 512 here).
func TestBodyReadGrowsAsBytesArrive(t *testing.T) {
	r := httptest.NewRequest("POST", "/execute", strings.NewReader(`{"command":1}`[:12]))
	r.ContentLength = 1 << 20
	data, err := readLegacyBody(httptest.NewRecorder(), r)
	if err != nil || len(data) != 12 {
		t.Fatalf("read %d bytes, %v; want 12", len(data), err)
	}
	if c := cap(data); c > 16<<10 {
		t.Errorf("12 bytes read into a buffer of %d bytes: allocated from Content-Length", c)
	}
	// Past the limit: a MaxBytesError, as before.
	r = httptest.NewRequest("POST", "/execute", strings.NewReader(strings.Repeat("x", maxJSONBody+1)))
	if _, err := readLegacyBody(httptest.NewRecorder(), r); err == nil {
		t.Errorf("a body over %d bytes was read whole", maxJSONBody)
	}
}

// TestDecodeGate: at most maxBigDecodes bodies over bigBody hold a turn;
// the next waits until one is given back or its context ends; small bodies
// never wait.
func TestDecodeGate(t *testing.T) {
	g := newDecodeGate()
	ctx := context.Background()
	var leaves []func()
	for range maxBigDecodes {
		leave, err := g.enter(ctx, bigBody+1)
		if err != nil {
			t.Fatal(err)
		}
		leaves = append(leaves, leave)
	}
	small, err := g.enter(ctx, bigBody)
	if err != nil {
		t.Fatalf("a body of %d bytes waited: %v", bigBody, err)
	}
	small()
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := g.enter(tctx, bigBody+1); err == nil {
		t.Fatalf("a %d-th large decode got a turn", maxBigDecodes+1)
	}
	got := make(chan error, 1)
	go func() {
		leave, err := g.enter(ctx, 1<<20)
		if err == nil {
			leave()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("entered while the gate was full: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	leaves[0]()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	for _, l := range leaves[1:] {
		l()
	}
}

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

// TestLegacyExecuteLargeCommand: a command over bigBody, split again once
// it has an execution slot, runs exactly as a small one would, also when
// it had to wait for the only slot.
func TestLegacyExecuteLargeCommand(t *testing.T) {
	ts := newTestServer(t, func(c *runtime.Config, _ *Options) { c.MaxExecutions = 1 })
	words := strings.Repeat(" ab", 30000) // 90,000 bytes
	type res struct {
		code int
		out  legacyExecResponse
	}
	first := make(chan res, 1)
	go func() {
		code, out := legacyExec(t, ts.URL, "sh -c 'sleep 0.5; echo first'", nil)
		first <- res{code, out}
	}()
	time.Sleep(100 * time.Millisecond)
	code, out := legacyExec(t, ts.URL, "echo"+words, nil)
	if code != 200 || out.ExitCode != 0 || out.Stdout != strings.TrimPrefix(words, " ")+"\n" {
		t.Errorf("large command: %d exit %d stdout %d bytes %q…; want the words back", code, out.ExitCode, len(out.Stdout), out.Stdout[:min(40, len(out.Stdout))])
	}
	if f := <-first; f.code != 200 || f.out.Stdout != "first\n" {
		t.Errorf("first call: %d %+v", f.code, f.out)
	}
	// A large command that does not split is refused like a small one.
	code, out = legacyExec(t, ts.URL, "echo"+words+" 'unterminated", nil)
	if code != 200 || out.ExitCode != 1 || !strings.Contains(out.Stderr, "Failed to execute command: ") {
		t.Errorf("large unsplittable command: %d %+v", code, out)
	}
	select {
	case ts.Server.execSlots <- struct{}{}:
		<-ts.Server.execSlots
	default:
		t.Errorf("an execution place was not given back")
	}
}
