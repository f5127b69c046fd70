package ringbuf

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// waitForRoomWaiter returns once an AppendHeld is waiting (it made the
// room channel).
func waitForRoomWaiter(r *Ring) {
	for {
		r.mu.Lock()
		ok := r.room != nil
		r.mu.Unlock()
		if ok {
			return
		}
		runtime.Gosched()
	}
}

// mustHold registers a hold (no limit that matters here).
func mustHold(t testing.TB, r *Ring, next int64, bound time.Duration) *Hold {
	t.Helper()
	h, ok := r.Hold(next, bound, 64)
	if !ok {
		t.Fatal("Hold refused")
	}
	return h
}

// appendHeldAsync runs AppendHeld in a goroutine and returns how long it
// waited, once it has returned.
func appendHeldAsync(r *Ring, s Stream, p string) <-chan time.Duration {
	done := make(chan time.Duration, 1)
	go func() { done <- r.AppendHeld(s, []byte(p)) }()
	return done
}

func TestAppendHeldWithoutHolds(t *testing.T) {
	r := New(8, 4)
	if d := r.AppendHeld(Stdout, []byte("12345678")); d != 0 {
		t.Fatalf("AppendHeld with no hold waited %v", d)
	}
	h := mustHold(t, r, 8, time.Hour) // has read everything: nothing of its in the way
	defer h.Release()
	if d := r.AppendHeld(Stdout, []byte("abcdefgh")); d != 0 {
		t.Fatalf("AppendHeld for a hold that read everything waited %v", d)
	}
	if st := r.Stats(); st.Start != 8 || st.End != 16 {
		t.Fatalf("window [%d,%d); want [8,16)", st.Start, st.End)
	}
}

// TestHoldLosesNothing: two writers (stdout and stderr, as a command's two
// pumps) push 8 MiB through a 4 KiB ring with AppendHeld to a reader with
// a hold that yields between its reads; the reader gets every byte of each
// stream, in order, and never a gap. With plain Append (the control) the
// same reader loses most of it.
func TestHoldLosesNothing(t *testing.T) {
	const each, chunk = 4 << 20, 1000
	data := make([]byte, each)
	for i := range data {
		data[i] = byte(i*7 + i>>9)
	}
	run := func(hold bool) (got [3][]byte, gaps int, held time.Duration) {
		r := New(4<<10, 64)
		var h *Hold
		if hold {
			h = mustHold(t, r, 0, time.Minute)
		}
		var wg sync.WaitGroup
		for _, s := range []Stream{Stdout, Stderr} {
			wg.Go(func() {
				for off := 0; off < each; off += chunk {
					p := data[off:min(off+chunk, each)]
					if hold {
						r.AppendHeld(s, p)
					} else {
						r.Append(s, p)
					}
				}
			})
		}
		go func() { wg.Wait(); r.Close() }()
		var res ReadResult
		var cursor int64
		for {
			ch := r.Notify()
			var err error
			res, err = r.Read(cursor, 512, res.Buf[:0], res.Records[:0])
			if err != nil {
				t.Fatal(err)
			}
			if res.Gap {
				gaps++
			}
			for _, rec := range res.Records {
				got[rec.Stream] = append(got[rec.Stream], rec.Data...)
			}
			cursor = res.Next
			if h != nil {
				h.Advance(cursor)
			}
			if res.Done {
				break
			}
			runtime.Gosched() // a reader slower than the writers
			if len(res.Records) == 0 {
				<-ch
			}
		}
		if h != nil {
			h.Release()
		}
		return got, gaps, r.Stats().HeldFor
	}
	got, gaps, held := run(true)
	if gaps != 0 || !bytes.Equal(got[Stdout], data) || !bytes.Equal(got[Stderr], data) {
		t.Fatalf("with a hold: %d gaps, stdout %d and stderr %d of %d bytes (equal %v %v)", gaps,
			len(got[Stdout]), len(got[Stderr]), each, bytes.Equal(got[Stdout], data), bytes.Equal(got[Stderr], data))
	}
	if held <= 0 {
		t.Fatalf("the writers never waited (HeldFor %v): the reader was never behind?", held)
	}
	got, gaps, _ = run(false)
	t.Logf("with a hold: every byte, the writers held %v in all; without: %d gaps, %d and %d of %d bytes", held, gaps, len(got[Stdout]), len(got[Stderr]), each)
	if gaps == 0 {
		t.Fatalf("without a hold the slow reader lost nothing: the test cannot tell a hold from none")
	}
}

// TestHoldLapses: a reader that never reads holds the writer once, for its
// bound, then lapses: the writer's next AppendHeld does not wait; it holds
// again once it has caught up (Advance to End).
func TestHoldLapses(t *testing.T) {
	const bound = 50 * time.Millisecond
	r := New(8, 4)
	h := mustHold(t, r, 0, bound)
	defer h.Release()
	r.Append(Stdout, []byte("12345678"))
	if d := r.AppendHeld(Stdout, []byte("9")); d < bound {
		t.Fatalf("AppendHeld for a reader at 0 returned after %v; want its bound %v", d, bound)
	}
	if st := r.Stats(); st.Lapses != 1 || st.HeldFor < bound || st.End != 9 {
		t.Fatalf("Stats after the lapse: %+v", st)
	}
	if d := r.AppendHeld(Stdout, []byte("a")); d != 0 {
		t.Fatalf("a lapsed hold held the writer again for %v", d)
	}
	h.Advance(5) // not caught up: still lapsed
	if d := r.AppendHeld(Stdout, []byte("bcdefghi")); d != 0 {
		t.Fatalf("a lapsed hold that has not caught up held the writer for %v", d)
	}
	h.Advance(r.End()) // caught up: holds again
	r.Append(Stdout, []byte("jkl"))
	done := appendHeldAsync(r, Stdout, "mnopqrst")
	waitForRoomWaiter(r)
	h.Advance(r.End())
	if d := <-done; d <= 0 {
		t.Fatalf("a hold that caught up did not hold again (waited %v)", d)
	}
	if st := r.Stats(); st.Lapses != 1 {
		t.Fatalf("lapses %d; want 1", st.Lapses)
	}
}

// TestAppendHeldEndsAtReleaseAndClose: a waiting writer is let go by the
// Release of the hold it waits for (and appends), by Close (and appends
// nothing: the ring is closed) and by EndHolds (and appends, and waits no
// more after it).
func TestAppendHeldEndsAtReleaseAndClose(t *testing.T) {
	for _, how := range []string{"release", "close", "endholds"} {
		r := New(8, 4)
		h := mustHold(t, r, 0, time.Hour)
		r.Append(Stdout, []byte("12345678"))
		done := appendHeldAsync(r, Stdout, "abcd")
		waitForRoomWaiter(r)
		switch how {
		case "release":
			h.Release()
			h.Release() // idempotent
		case "close":
			r.Close()
		case "endholds":
			r.EndHolds()
		}
		if d := <-done; d <= 0 || d >= time.Hour {
			t.Fatalf("%s: AppendHeld returned after %v", how, d)
		}
		want := int64(12)
		if how == "close" {
			want = 8
		}
		if st := r.Stats(); st.Lapses != 0 || st.End != want {
			t.Fatalf("%s: %+v; want no lapse and End %d", how, st, want)
		}
		if how == "endholds" {
			if d := r.AppendHeld(Stdout, []byte("efgh")); d != 0 {
				t.Fatalf("AppendHeld after EndHolds waited %v", d)
			}
		}
	}
}

// TestAppendHeldRecordLimit: an Append that starts a record at the record
// limit evicts the oldest record whole, so it waits for a reader of that
// record although the byte limit has room.
func TestAppendHeldRecordLimit(t *testing.T) {
	r := New(100, 2)
	r.Append(Stdout, []byte("ab"))
	r.Append(Stderr, []byte("cd"))
	h := mustHold(t, r, 1, time.Hour)
	defer h.Release()
	if d := r.AppendHeld(Stderr, []byte("ef")); d != 0 {
		t.Fatalf("extending the newest record waited %v", d)
	}
	done := appendHeldAsync(r, Stdout, "gh") // a third record: "ab" goes
	waitForRoomWaiter(r)
	h.Advance(2)
	if d := <-done; d <= 0 {
		t.Fatalf("a new record at the record limit did not wait (%v)", d)
	}
}

// TestAppendHeldLargerThanRing: an Append larger than the ring goes in
// pieces of at most the ring's size, cut before a UTF-8 character, each
// waited for, so a holding reader gets all of it and never a piece that
// ends inside a character.
func TestAppendHeldLargerThanRing(t *testing.T) {
	r := New(5, 4)
	h := mustHold(t, r, 0, time.Minute)
	defer h.Release()
	p := []byte("aéééééé€€b") // 1 + 12 + 6 + 1 bytes
	done := appendHeldAsync(r, Stdout, string(p))
	var got []byte
	var cursor int64
	for cursor < int64(len(p)) {
		ch := r.Notify()
		res, err := r.Read(cursor, 0, nil, nil)
		if err != nil || res.Gap {
			t.Fatalf("Read at %d: %v, gap %v", cursor, err, res.Gap)
		}
		for _, rec := range res.Records {
			got = append(got, rec.Data...)
		}
		if len(res.Records) > 0 && !utf8.Valid(got) {
			t.Fatalf("a piece ended inside a character: %q", got)
		}
		cursor = res.Next
		h.Advance(cursor)
		if len(res.Records) == 0 {
			<-ch
		}
	}
	<-done
	if string(got) != string(p) {
		t.Fatalf("read %q; want %q", got, p)
	}
}

// TestHoldSlowSteadyReaderKeepsItsHold: a reader that takes 256 bytes every
// 20 ms (far less than the 8 KiB a writer's append needs within one bound)
// keeps its hold, because each Advance restarts the bound: nothing lapses
// and nothing is lost. (Measured from the wait's start alone, the bound
// lapsed it within the first append.)
func TestHoldSlowSteadyReaderKeepsItsHold(t *testing.T) {
	const size = 8 << 10
	r := New(size, 64)
	chunk := bytes.Repeat([]byte("x"), size)
	r.Append(Stdout, chunk)
	h := mustHold(t, r, 0, 300*time.Millisecond)
	defer h.Release()
	go func() {
		for range 2 {
			r.AppendHeld(Stdout, chunk)
		}
		r.Close()
	}()
	var cursor int64
	for {
		res, err := r.Read(cursor, 256, nil, nil)
		if err != nil || res.Gap {
			t.Fatalf("Read at %d: %v, gap %v", cursor, err, res.Gap)
		}
		cursor = res.Next
		h.Advance(cursor)
		if res.Done {
			break
		}
		time.Sleep(20 * time.Millisecond) // paces a slow reader; nothing waits on it
	}
	if st := r.Stats(); st.Lapses != 0 || cursor != 3*size {
		t.Fatalf("lapses %d, read to %d; want 0 and %d", st.Lapses, cursor, 3*size)
	}
}

// TestHeldForCountsConcurrentWaitsOnce: two writers that wait at the same
// time add the time either waited to HeldFor, not the sum of their waits.
func TestHeldForCountsConcurrentWaitsOnce(t *testing.T) {
	r := New(8, 8)
	r.Append(Stdout, []byte("12345678"))
	h := mustHold(t, r, 0, time.Minute)
	a := appendHeldAsync(r, Stdout, "a")
	b := appendHeldAsync(r, Stderr, "b")
	for {
		r.mu.Lock()
		both := r.waiters == 2
		r.mu.Unlock()
		if both {
			break
		}
		runtime.Gosched()
	}
	h.Release()
	da, db := <-a, <-b
	if st := r.Stats(); da <= 0 || db <= 0 || st.HeldFor >= da+db || st.HeldFor < max(da, db) {
		t.Fatalf("waits %v and %v, HeldFor %v; want at least the longer, less than their sum", da, db, st.HeldFor)
	}
}

// TestHoldLimit: Hold refuses once the given number of holds is registered,
// takes one again after a Release, and never refuses on a closed ring.
func TestHoldLimit(t *testing.T) {
	r := New(8, 8)
	h1, ok1 := r.Hold(0, time.Second, 2)
	_, ok2 := r.Hold(0, time.Second, 2)
	if _, ok := r.Hold(0, time.Second, 2); !ok1 || !ok2 || ok {
		t.Fatalf("holds taken: %v %v, third %v; want true true false", ok1, ok2, ok)
	}
	h1.Release()
	if _, ok := r.Hold(0, time.Second, 2); !ok {
		t.Fatal("no hold after a Release")
	}
	r.Close() // no writer left to hold: never refused, nothing registered
	if _, ok := r.Hold(0, time.Second, 2); !ok || r.nholds.Load() != 2 {
		t.Fatalf("a hold on a closed ring: taken %v, %d registered; want true, 2", ok, r.nholds.Load())
	}
}
