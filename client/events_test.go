package client

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// TestFollowEventsExactlyOnceThroughCuttingProxy follows the feed of the
// real daemon through a proxy that cuts every connection after at most
// 2 KiB (a few events): every event of 100 commands arrives exactly once,
// in order, without a gap.
func TestFollowEventsExactlyOnceThroughCuttingProxy(t *testing.T) {
	t.Parallel()
	const commands = 100
	d := startDaemon(t)
	direct := newClient(t, d.url, Options{})
	ctx := testCtx(t, 2*time.Minute)
	p := newCutProxy(t, strings.TrimPrefix(d.url, "http://"), 2<<10, 5)
	c := newClient(t, p.url(), Options{})
	created := make(chan error, 1)
	go func() {
		for range commands {
			st, err := direct.Start(ctx, wire.CreateRequest{Argv: []string{"true"}})
			if err == nil {
				_, err = direct.Wait(ctx, st.CommandID, 30*time.Second)
			}
			if err != nil {
				created <- err
				return
			}
		}
		created <- nil
	}()
	var last int64
	exited := map[string]int{}
	stop := errors.New("stop")
	_, err := c.FollowEvents(ctx, EventsOptions{}, func(ev *wire.FeedEvent) error {
		if ev.Type == wire.FeedGap {
			t.Fatalf("gap %+v", ev)
		}
		if last != 0 && ev.Seq != last+1 {
			t.Fatalf("seq %d after %d", ev.Seq, last)
		}
		last = ev.Seq
		if ev.Type == wire.FeedExited {
			exited[ev.CommandID]++
			if len(exited) == commands {
				return stop
			}
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("FollowEvents: %v", err)
	}
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	for id, n := range exited {
		if n != 1 {
			t.Errorf("%s exited %d times", id, n)
		}
	}
	if p.cuts.Load() < 5 {
		t.Errorf("only %d cuts", p.cuts.Load())
	}
}

// TestWaitCommands: any returns with the first command to end (and its
// exit code) while another runs on; all waits for the last one (one of
// them finished before the wait began, the other ends during it).
func TestWaitCommands(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	c := newClient(t, d.url, Options{})
	ctx := testCtx(t, time.Minute)
	quick, err := c.Start(ctx, wire.CreateRequest{Argv: []string{"sh", "-c", "sleep 0.3; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	slow, err := c.Start(ctx, wire.CreateRequest{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	sts, err := c.WaitCommands(ctx, []string{slow.CommandID, quick.CommandID}, true)
	if err != nil {
		t.Fatal(err)
	}
	if sts[0] != nil || sts[1] == nil || ExitCode(sts[1]) != 3 {
		t.Fatalf("any: %+v", sts)
	}
	medium, err := c.Start(ctx, wire.CreateRequest{Argv: []string{"sh", "-c", "sleep 1; exit 4"}})
	if err != nil {
		t.Fatal(err)
	}
	sts, err = c.WaitCommands(ctx, []string{quick.CommandID, medium.CommandID}, false)
	if err != nil {
		t.Fatal(err)
	}
	if sts[0] == nil || ExitCode(sts[0]) != 3 || sts[1] == nil || ExitCode(sts[1]) != 4 {
		t.Fatalf("all: %+v", sts)
	}
	if st, _ := c.Get(ctx, slow.CommandID); st.State != wire.StateRunning {
		t.Fatalf("the slow one: %s", st.State)
	}
	c.Kill(ctx, slow.CommandID)
	if _, err := c.WaitCommands(ctx, []string{"00000000-0000-4000-8000-000000000000"}, false); ErrorCode(err) != wire.CodeNotFound {
		t.Fatalf("an unknown id: %v", err)
	}
}

// TestEventsCursorRefusedAfterRestart: a cursor of the daemon before a
// restart (same base dir, new process) is refused as stale, never read as
// a position of the new one.
func TestEventsCursorRefusedAfterRestart(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	c := newClient(t, d.url, Options{})
	ctx := testCtx(t, time.Minute)
	st, err := c.Start(ctx, wire.CreateRequest{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	c.Wait(ctx, st.CommandID, 10*time.Second)
	cursor, err := c.Events(ctx, EventsOptions{}, func(*wire.FeedEvent) error { return nil })
	if err != nil || cursor == "" {
		t.Fatalf("Events: %q %v", cursor, err)
	}
	if _, _, err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	d2 := startDaemon(t)
	c2 := newClient(t, d2.url, Options{})
	for range 3 { // the new daemon's own events reach past the old cursor's seq
		st, err := c2.Start(ctx, wire.CreateRequest{Argv: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		c2.Wait(ctx, st.CommandID, 10*time.Second)
	}
	_, err = c2.Events(ctx, EventsOptions{Cursor: cursor}, func(ev *wire.FeedEvent) error {
		t.Errorf("an event for a stale cursor: %+v", ev)
		return nil
	})
	var e *Error
	if !errors.As(err, &e) || e.StatusCode != 409 || e.Code != wire.CodeStaleCursor || !strings.Contains(e.Message, "another daemon instance") {
		t.Fatalf("a cursor from before the restart: %v", err)
	}
}
