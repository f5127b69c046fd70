package runtime

import (
	"errors"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// readEvents reads f until want events have come or the bound passes,
// waiting on Notify between reads.
func readEvents(t *testing.T, f *EventFeed, want int) []wire.FeedEvent {
	t.Helper()
	var out []wire.FeedEvent
	deadline := time.After(30 * time.Second)
	for len(out) < want {
		n := f.Notify()
		r := f.Read(nil, 100)
		if r.Dropped != 0 {
			t.Fatalf("unexpected gap of %d events", r.Dropped)
		}
		out = append(out, r.Events...)
		if len(r.Events) > 0 {
			continue
		}
		select {
		case <-n:
		case <-deadline:
			t.Fatalf("got %d events of %d: %+v", len(out), want, out)
		}
	}
	return out
}

func TestEventLogLifecycle(t *testing.T) {
	m := newManager(t, func(c *Config) { c.MaxRetained, c.MaxRunning = 1, 1 })
	f, err := m.OpenEvents("now", EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	c1 := mustCreate(t, m, CreateRequest{Argv: []string{"sh", "-c", "exit 3"}})
	st1 := waitDone(t, c1)
	// c2 ends only once Create has returned (and logged the eviction):
	// it waits for the end of its stdin.
	c2 := mustCreate(t, m, CreateRequest{Argv: []string{"sh", "-c", "read x; kill -9 $$"}, Stdin: true})
	if _, _, err := c2.WriteStdin(nil, true); err != nil {
		t.Fatal(err)
	}
	waitDone(t, c2)
	// c1 is evicted when c2 is created (MaxRetained 1), after c2's start.
	evs := readEvents(t, f, 7)
	type tv struct{ typ, id string }
	want := []tv{{"created", c1.ID()}, {"started", c1.ID()}, {"exited", c1.ID()}, {"created", c2.ID()}, {"started", c2.ID()}, {"evicted", c1.ID()}, {"exited", c2.ID()}}
	for i, e := range evs {
		if e.Type != want[i].typ || e.CommandID != want[i].id {
			t.Fatalf("event %d = %s %s, want %s %s (all: %+v)", i, e.Type, e.CommandID, want[i].typ, want[i].id, evs)
		}
		if i > 0 && e.Seq != evs[i-1].Seq+1 {
			t.Fatalf("seq %d after %d", e.Seq, evs[i-1].Seq)
		}
		if c, err := wire.ParseFeedCursor(e.NextCursor); err != nil || c.Seq != e.Seq+1 || c.Instance != m.EventInstance() {
			t.Fatalf("next_cursor %q of seq %d: %v", e.NextCursor, e.Seq, err)
		}
	}
	if evs[1].PID != st1.PID || st1.PID == 0 {
		t.Fatalf("started pid %d, status pid %d", evs[1].PID, st1.PID)
	}
	ex := evs[2]
	if ex.State != wire.StateExited || ex.ExitCode == nil || *ex.ExitCode != 3 || ex.Signal != nil || ex.OOMKilled == nil || *ex.OOMKilled {
		t.Fatalf("exited event %+v", ex)
	}
	if ex.DurationSeconds == nil || *ex.DurationSeconds < 0 || !ex.FinishedAt.Equal(*st1.FinishedAt) || !ex.StartedAt.Equal(*st1.StartedAt) {
		t.Fatalf("exited event durations %+v vs status %+v", ex, st1)
	}
	if ex2 := evs[6]; ex2.Signal == nil || *ex2.Signal != "SIGKILL" || *ex2.ExitCode != -9 {
		t.Fatalf("exited by signal: %+v", ex2)
	}
	if r := f.Read(nil, 100); len(r.Events) != 0 || r.Next.Seq != evs[6].Seq+1 {
		t.Fatalf("after the last event: %+v", r)
	}
}

func TestEventLogFilters(t *testing.T) {
	m := newManager(t, nil)
	a := mustCreate(t, m, CreateRequest{Argv: []string{"true"}})
	b := mustCreate(t, m, CreateRequest{Argv: []string{"true"}})
	waitDone(t, a)
	waitDone(t, b)
	f, err := m.OpenEvents("", EventFilter{Types: []string{"exited"}, CommandIDs: []string{b.ID()}})
	if err != nil {
		t.Fatal(err)
	}
	evs := readEvents(t, f, 1)
	if evs[0].Type != "exited" || evs[0].CommandID != b.ID() {
		t.Fatalf("%+v", evs)
	}
	if !f.CaughtUp() {
		t.Fatal("the filtered reader did not move past the events it skipped")
	}
	for _, bad := range []EventFilter{{Types: []string{"exit"}}, {CommandIDs: []string{"nope"}}} {
		if _, err := m.OpenEvents("", bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("filter %+v: %v, want ErrInvalid", bad, err)
		}
	}
}

func TestEventLogGapAndCursors(t *testing.T) {
	m := newManager(t, nil)
	head := m.EventHead()
	const extra = 10
	for i := 0; i < EventLogSize+extra; i++ {
		m.feed.append(0, logEvent{kind: evKindExpired, id: "x", at: 1})
	}
	f, err := m.OpenEvents(head.String(), EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	r := f.Read(nil, 5)
	if r.Dropped != extra || r.GapFrom != head || len(r.Events) != 5 || r.Events[0].Seq != head.Seq+extra {
		t.Fatalf("gap read: dropped %d from %v, %d events from seq %d", r.Dropped, r.GapFrom, len(r.Events), r.Events[0].Seq)
	}
	// Oldest-retained ("") never gaps; a cursor beyond the head, a bad one
	// and one of another instance are refused.
	if f, _ := m.OpenEvents("", EventFilter{}); f.Read(nil, 1).Dropped != 0 {
		t.Fatal("a reader from the oldest event got a gap")
	}
	other := newManager(t, nil)
	for cur, want := range map[string]error{
		wire.FeedCursor{Instance: m.EventInstance(), Seq: m.EventHead().Seq + 1}.String(): ErrInvalid,
		"12":                       ErrInvalid,
		head.String() + "x":        ErrInvalid,
		other.EventHead().String(): ErrStaleCursor,
	} {
		if _, err := m.OpenEvents(cur, EventFilter{}); !errors.Is(err, want) {
			t.Errorf("cursor %q: %v, want %v", cur, err, want)
		}
	}
	if m.EventInstance() == other.EventInstance() {
		t.Fatal("two managers share an instance id")
	}
}
