//go:build linux

package runtime

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// freePort returns a TCP port of 127.0.0.1 free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func needPython(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed (a machine precondition of this test)")
	}
	return p
}

// TestPortsLoopbackOnlyAndWaitPort (issue 23 item 2): python3 -m
// http.server bound to 0.0.0.0 and another bound to 127.0.0.1 (no traffic
// is sent but to loopback): wait_port returns "listening" after the bind
// and before its wait runs out, each command's listeners have the right
// loopback_only, GET /v1/ports names the owners, and a feed opened before
// the creates has listening before exited for each.
func TestPortsLoopbackOnlyAndWaitPort(t *testing.T) {
	py := needPython(t)
	m := newManager(t, nil)
	feed, err := m.OpenEvents("now", EventFilter{Types: []string{wire.FeedListening, wire.FeedExited}})
	if err != nil {
		t.Fatal(err)
	}
	stopWatch := m.WatchPorts() // as a feed subscriber does
	defer stopWatch()
	type srv struct {
		bind     string
		port     int
		loopback bool
		c        *Command
	}
	srvs := []*srv{{bind: "0.0.0.0"}, {bind: "127.0.0.1", loopback: true}}
	for _, s := range srvs {
		s.port = freePort(t)
		s.c = mustCreate(t, m, CreateRequest{Argv: []string{py, "-m", "http.server", "--bind", s.bind, strconv.Itoa(s.port)}})
	}
	for _, s := range srvs {
		start := time.Now()
		st := s.c.WaitPort(context.Background(), s.port, 20*time.Second)
		if st.WaitPortResult != wire.WaitPortListening {
			t.Fatalf("%s: wait_port %d: %q after %v, want listening (status %+v)", s.bind, s.port, st.WaitPortResult, time.Since(start), st)
		}
		var got *wire.Listener
		for i := range st.Listeners {
			if st.Listeners[i].Port == s.port {
				got = &st.Listeners[i]
			}
		}
		if got == nil || got.Protocol != "tcp" || got.Address != s.bind || got.LoopbackOnly != s.loopback {
			t.Errorf("%s: listeners %+v; want tcp %s:%d loopback_only %v", s.bind, st.Listeners, s.bind, s.port, s.loopback)
		}
		// The server answers on loopback: it did listen.
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.port), 5*time.Second)
		if err != nil {
			t.Errorf("%s: dial 127.0.0.1:%d: %v", s.bind, s.port, err)
		} else {
			conn.Close()
		}
	}
	ports, err := m.Ports()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range srvs {
		found := false
		for _, p := range ports {
			if p.Port == s.port && p.Protocol == "tcp" {
				found = p.CommandID != nil && *p.CommandID == s.c.ID() && p.LoopbackOnly == s.loopback
			}
		}
		if !found {
			t.Errorf("GET /v1/ports %+v: no tcp %d owned by %s", ports, s.port, s.c.ID())
		}
	}
	// wait_port of a port nobody binds: the wait runs out, said so.
	t0 := time.Now()
	if st := srvs[0].c.WaitPort(context.Background(), freePort(t), 300*time.Millisecond); st.WaitPortResult != wire.WaitPortTimeout || time.Since(t0) > 5*time.Second {
		t.Errorf("wait_port of an unbound port: %q after %v, want timeout", st.WaitPortResult, time.Since(t0))
	}
	for _, s := range srvs {
		s.c.Kill(context.Background())
		waitDone(t, s.c)
	}
	// wait_port of a finished command: ended.
	if st := srvs[0].c.WaitPort(context.Background(), srvs[0].port, 5*time.Second); st.WaitPortResult != wire.WaitPortEnded {
		t.Errorf("wait_port of a finished command: %q, want ended", st.WaitPortResult)
	}
	evs := readEvents(t, feed, 4)
	for _, s := range srvs {
		li, xi := -1, -1
		for i, e := range evs {
			if e.CommandID != s.c.ID() {
				continue
			}
			if e.Type == wire.FeedListening && e.Listener != nil && e.Listener.Port == s.port && li < 0 {
				li = i
			}
			if e.Type == wire.FeedExited {
				xi = i
			}
		}
		if li < 0 || xi < 0 || li > xi {
			t.Errorf("%s: feed %+v: want listening (at %d) before exited (at %d)", s.bind, evs, li, xi)
		}
	}
}

// TestPortsClosedEvent: a running command that closes its listening
// socket gets a closed event (after its listening), while it still runs.
func TestPortsClosedEvent(t *testing.T) {
	py := needPython(t)
	m := newManager(t, nil)
	feed, err := m.OpenEvents("now", EventFilter{Types: []string{wire.FeedListening, wire.FeedClosed}})
	if err != nil {
		t.Fatal(err)
	}
	stop := m.WatchPorts()
	defer stop()
	port := freePort(t)
	prog := "import socket,sys,time\n" +
		"s=socket.socket(); s.bind(('127.0.0.1', " + strconv.Itoa(port) + ")); s.listen()\n" +
		"sys.stdin.read(); s.close(); time.sleep(60)\n"
	c := mustCreate(t, m, CreateRequest{Argv: []string{py, "-c", prog}, Stdin: true})
	defer func() { c.Kill(context.Background()); waitDone(t, c) }()
	if st := c.WaitPort(context.Background(), port, 20*time.Second); st.WaitPortResult != wire.WaitPortListening {
		t.Fatalf("wait_port: %q", st.WaitPortResult)
	}
	if _, _, err := c.WriteStdin(nil, true); err != nil { // the end of stdin: it closes the socket
		t.Fatal(err)
	}
	evs := readEvents(t, feed, 2)
	if evs[0].Type != wire.FeedListening || evs[1].Type != wire.FeedClosed || evs[1].Listener == nil || evs[1].Listener.Port != port || evs[1].CommandID != c.ID() {
		t.Fatalf("events %+v; want listening then closed of port %d", evs, port)
	}
	if !c.isRunning() {
		t.Fatal("the command ended: closed must come while it runs")
	}
}
