package runtime

import (
	"bytes"
	"context"
	"errors"
	"os"
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
	readHeld(t, c, h, 64<<10, goruntime.Gosched, func(r ringbuf.Record) { out[r.Stream] = append(out[r.Stream], r.Data...) })
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

// TestFinalDrainIsHeld: a command whose pipes a background `yes` still
// holds when its pipe grace ends takes its last read (at most
// maxFinalDrain per pipe) held, as every other: a holding reader that
// keeps reading gets everything up to the end with no gap, and the
// command still ends (the last read is bounded) while yes goes on.
func TestFinalDrainIsHeld(t *testing.T) {
	m := newManager(t, func(c *Config) { c.OutputLimit = 64 << 10; c.KillGrace = 100 * time.Millisecond })
	c := mustCreate(t, m, CreateRequest{Argv: []string{"sh", "-c", "timeout 20 yes & exit 0"}, Hold: time.Second})
	h := c.TakeCreateHold()
	defer h.Release()
	// A reader slower than yes; the sleeps pace it, nothing waits on them.
	readHeld(t, c, h, 16<<10, func() { time.Sleep(time.Millisecond) }, func(ringbuf.Record) {})
	if st := waitDone(t, c); string(st.State) != "exited" {
		t.Fatalf("state %s", st.State)
	}
}

// TestShutdownEndsHolds: a reader that keeps its hold by reading a byte
// every 10 ms holds its command's pumps for as long as it reads; Shutdown
// ends the holds (Ring.EndHolds), so it still returns inside its budget.
func TestShutdownEndsHolds(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BaseDir = t.TempDir()
	cfg.Env = os.Environ()
	cfg.OutputLimit = 64 << 10
	cfg.KillGrace = 100 * time.Millisecond
	m, err := New(cfg, testReaper)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := mustCreate(t, m, CreateRequest{Argv: []string{"yes"}, Hold: time.Second})
	h := c.TakeCreateHold()
	defer h.Release()
	stop := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		var cursor int64
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond): // a trickle: one byte per 10 ms
			}
			res, err := c.Read(cursor, 1, nil, nil)
			if err != nil || res.Done {
				return
			}
			cursor = res.Next
			h.Advance(cursor)
		}
	}()
	defer func() { close(stop); <-read }()
	for c.ring.Stats().Waiting == 0 {
		goruntime.Gosched() // until the pump waits for the hold
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with a held command: %v", err)
	}
	if !c.ring.Stats().HoldsEnded {
		t.Fatal("Shutdown returned with the holds still honoured")
	}
}

// TestHoldsPerCommandAreBounded: a command takes MaxHolds holding streams
// at once; one more is ErrConflict, and a Release makes room.
func TestHoldsPerCommandAreBounded(t *testing.T) {
	m := newManager(t, nil)
	c := mustCreate(t, m, CreateRequest{Argv: []string{"true"}})
	var hs []*ringbuf.Hold
	for range MaxHolds {
		h, err := c.Hold(0, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	if _, err := c.Hold(0, time.Second); !errors.Is(err, ErrConflict) {
		t.Fatalf("hold %d: %v; want ErrConflict", MaxHolds+1, err)
	}
	hs[0].Release()
	if _, err := c.Hold(0, time.Second); err != nil {
		t.Fatalf("after a Release: %v", err)
	}
	waitDone(t, c)
}

// TestDrainIsHeld: the reads that take what a pipe or terminal still holds
// (drain: a terminal's reads after EIO, the last read at the end of the
// pipe grace) append held like the pump's: 40 KiB waiting in a pipe, a 16 KiB
// ring, a holding reader 0.3 s late (within its hold) gets every byte.
func TestDrainIsHeld(t *testing.T) {
	m := newManager(t, func(c *Config) { c.OutputLimit = 16 << 10 })
	c := mustCreate(t, m, CreateRequest{Argv: []string{"sleep", "30"}, Hold: 5 * time.Second})
	defer c.Kill(context.Background())
	h := c.TakeCreateHold()
	defer h.Release()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := bytes.Repeat([]byte("0123456789abcde\n"), 40<<10/16)
	if _, err := w.Write(want); err != nil { // fits the pipe's 64 KiB
		t.Fatal(err)
	}
	w.Close()
	drained := make(chan int)
	go func() {
		_, n, _, _ := c.drain(r, ringbuf.Stdout, make([]byte, pumpBufSize), 0)
		drained <- n
	}()
	time.Sleep(300 * time.Millisecond) // a reader late by less than its hold; nothing waits on it
	var got []byte
	var res ringbuf.ReadResult
	var cursor int64
	for cursor < int64(len(want)) {
		notify := c.Notify()
		res, err = c.Read(cursor, 4<<10, res.Buf[:0], res.Records[:0])
		if err != nil {
			t.Fatal(err)
		}
		if res.Gap {
			t.Fatalf("gap at %d: %d bytes lost", cursor, res.GapFrom-cursor)
		}
		for _, rec := range res.Records {
			got = append(got, rec.Data...)
		}
		cursor = res.Next
		h.Advance(cursor)
		if len(res.Records) == 0 {
			<-notify
		}
	}
	if n := <-drained; n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("drained %d, read %d of %d bytes (equal %v)", n, len(got), len(want), bytes.Equal(got, want))
	}
}

// TestKillEndsHolds: a kill (any end asked for) ends the holds, so a
// stalled holding reader (a 10 s hold, never advanced) does not keep a
// killed `yes` from finishing until its hold lapses.
func TestKillEndsHolds(t *testing.T) {
	m := newManager(t, func(c *Config) { c.OutputLimit = 64 << 10 })
	c := mustCreate(t, m, CreateRequest{Argv: []string{"yes"}, Hold: 10 * time.Second})
	h := c.TakeCreateHold()
	defer h.Release()
	for c.ring.Stats().Waiting == 0 {
		goruntime.Gosched() // until the pump waits for the hold
	}
	if _, err := c.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitDone(t, c)
	if st := c.ring.Stats(); !st.HoldsEnded || st.Lapses != 0 {
		t.Fatalf("after the kill: holds ended %v, lapses %d; want the kill to end them", st.HoldsEnded, st.Lapses)
	}
}

// readHeld reads c's output from cursor 0 to its end with the hold h, at
// most size bytes a read, calling each with every record and pace after
// each read; a gap fails the test.
func readHeld(t *testing.T, c *Command, h *ringbuf.Hold, size int, pace func(), each func(ringbuf.Record)) {
	t.Helper()
	var res ringbuf.ReadResult
	var cursor int64
	for {
		notify := c.Notify()
		var err error
		res, err = c.Read(cursor, size, res.Buf[:0], res.Records[:0])
		if err != nil {
			t.Fatal(err)
		}
		if res.Gap {
			t.Fatalf("gap at %d of %d: %d bytes lost (lapses %d)", cursor, c.NextCursor(), res.GapFrom-cursor, c.ring.Stats().Lapses)
		}
		for _, r := range res.Records {
			each(r)
		}
		cursor = res.Next
		h.Advance(cursor)
		if res.Done {
			return
		}
		if len(res.Records) == 0 {
			<-notify
		}
		pace()
	}
}
