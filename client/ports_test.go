//go:build linux

package client

import (
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// TestPortsEventsResumedAndRestart (issue 23, against the built daemon):
// a feed opened before the create sees the server's listening then its
// exited; a feed cut after the listening event and resumed from its
// cursor still gets the exited (once); wait_port answers after the bind;
// a cursor of the daemon before a restart is refused with stale_cursor.
func TestPortsEventsResumedAndRestart(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed (a machine precondition of this test)")
	}
	d := startDaemon(t)
	c := newClient(t, d.url, Options{})
	ctx := testCtx(t, time.Minute)
	var head string
	if head, err = c.Events(ctx, EventsOptions{Cursor: "now"}, func(*wire.FeedEvent) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// The feed opened before the create: it makes the daemon poll.
	type got struct {
		evs  []wire.FeedEvent
		next string
		err  error
	}
	stop := errors.New("stop")
	firstFeed := make(chan got, 1)
	cutAt := make(chan string, 1)
	opened := make(chan struct{})
	go func() {
		var g got
		o := EventsOptions{Cursor: head, Types: []string{wire.FeedListening, wire.FeedExited}}
		close(opened)
		g.next, g.err = c.FollowEvents(ctx, o, func(ev *wire.FeedEvent) error {
			g.evs = append(g.evs, *ev)
			if ev.Type == wire.FeedListening {
				cutAt <- ev.NextCursor // the disconnect: the reader leaves here
				return stop
			}
			return nil
		})
		firstFeed <- g
	}()
	<-opened
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	st, err := c.Start(ctx, wire.CreateRequest{Argv: []string{py, "-m", "http.server", "--bind", "0.0.0.0", strconv.Itoa(port)}})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := c.WaitPort(ctx, st.CommandID, port, 20*time.Second)
	if err != nil || ws.WaitPortResult != wire.WaitPortListening {
		t.Fatalf("WaitPort: %+v %v", ws, err)
	}
	if len(ws.Listeners) == 0 || ws.Listeners[0].LoopbackOnly {
		t.Errorf("listeners of a server on 0.0.0.0: %+v", ws.Listeners)
	}
	var cursor string
	select {
	case cursor = <-cutAt:
	case <-ctx.Done():
		t.Fatal("no listening event on the feed opened before the create")
	}
	g := <-firstFeed
	if !errors.Is(g.err, stop) || len(g.evs) != 1 || g.evs[0].CommandID != st.CommandID || g.evs[0].Listener == nil || g.evs[0].Listener.Port != port {
		t.Fatalf("first feed: %+v", g)
	}
	if _, err := c.Kill(ctx, st.CommandID); err != nil {
		t.Fatal(err)
	}
	// Resumed from the cursor after the listening event: exactly the exited.
	var after []wire.FeedEvent
	_, err = c.FollowEvents(ctx, EventsOptions{Cursor: cursor, CommandIDs: []string{st.CommandID}}, func(ev *wire.FeedEvent) error {
		after = append(after, *ev)
		if ev.Type == wire.FeedExited {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatal(err)
	}
	for _, ev := range after {
		if ev.Type == wire.FeedListening && ev.Listener.Port == port {
			t.Errorf("the resumed feed repeated the listening event: %+v", after)
		}
	}
	if after[len(after)-1].Type != wire.FeedExited {
		t.Errorf("resumed feed %+v", after)
	}
	// A restart: the old cursor is refused, never misread.
	if _, _, err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	d2 := startDaemon(t)
	c2 := newClient(t, d2.url, Options{})
	_, err = c2.Events(ctx, EventsOptions{Cursor: cursor}, func(*wire.FeedEvent) error { return nil })
	if ErrorCode(err) != wire.CodeStaleCursor || !strings.Contains(err.Error(), "another daemon instance") {
		t.Errorf("a cursor from before the restart: %v; want %s", err, wire.CodeStaleCursor)
	}
}
