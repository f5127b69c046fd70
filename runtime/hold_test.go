package runtime

import (
	"bytes"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/ringbuf"
)

// TestCreateHoldKeepsEveryByte: a create's hold exists before the process
// starts, so a reader that takes it after Create returns still finds cursor
// 0, although the command (two `yes`, one per pipe) overflows the 64 KiB
// ring within microseconds; reading on with Advance, it gets all 4 MiB of
// both pipes, no gap, while both pumps wait for it.
func TestCreateHoldKeepsEveryByte(t *testing.T) {
	m := newManager(t, func(c *Config) { c.OutputLimit = 64 << 10 })
	const each = 2 << 20
	c := mustCreate(t, m, CreateRequest{
		Argv: []string{"sh", "-c", "yes o | head -c 2097152 & yes e | head -c 2097152 >&2; wait"},
		Hold: 10 * time.Second, // clamped to MaxHold
	})
	h := c.TakeCreateHold()
	if h == nil {
		t.Fatal("TakeCreateHold: nil for a create with a hold")
	}
	defer h.Release()
	if c.TakeCreateHold() != nil {
		t.Fatal("TakeCreateHold gave the hold twice")
	}
	var out [4][]byte
	var res ringbuf.ReadResult
	var cursor int64
	for {
		notify := c.Notify()
		var err error
		res, err = c.Read(cursor, 64<<10, res.Buf[:0], res.Records[:0])
		if err != nil {
			t.Fatal(err)
		}
		if res.Gap {
			t.Fatalf("gap at %d: %d bytes lost", cursor, res.GapFrom-cursor)
		}
		for _, r := range res.Records {
			out[r.Stream] = append(out[r.Stream], r.Data...)
		}
		cursor = res.Next
		h.Advance(cursor)
		if res.Done {
			break
		}
		if len(res.Records) == 0 {
			<-notify
		}
		goruntime.Gosched()
	}
	if !bytes.Equal(out[ringbuf.Stdout], bytes.Repeat([]byte("o\n"), each/2)) || !bytes.Equal(out[ringbuf.Stderr], bytes.Repeat([]byte("e\n"), each/2)) {
		t.Fatalf("stdout %d bytes, stderr %d; want %d of each pattern", len(out[ringbuf.Stdout]), len(out[ringbuf.Stderr]), each)
	}
	if st := c.ring.Stats(); st.HeldFor <= 0 || st.Lapses != 0 {
		t.Fatalf("the pumps held %v with %d lapses; want a wait and no lapse", st.HeldFor, st.Lapses)
	}
	if st := waitDone(t, c); string(st.State) != "exited" {
		t.Fatalf("state %s", st.State)
	}
}

// TestPipeGraceEndsHolds: when the pipe grace ends with a pipe still open
// (a background `yes` holds it after the leader exited), the readers stop
// waiting for holding streams (Ring.EndHolds) before their last read, so a
// hold cannot stretch the end of a command past the grace by its bound.
func TestPipeGraceEndsHolds(t *testing.T) {
	m := newManager(t, func(c *Config) { c.OutputLimit = 64 << 10; c.KillGrace = 100 * time.Millisecond })
	c := mustCreate(t, m, CreateRequest{Argv: []string{"sh", "-c", "timeout 5 yes & exit 0"}})
	h := c.Hold(0, time.Second) // never advanced: holds until it lapses
	defer h.Release()
	waitDone(t, c)
	if !c.ring.Stats().HoldsEnded {
		t.Fatal("the command ended with its pipes held open and the ring's holds still honoured")
	}
}
