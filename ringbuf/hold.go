package ringbuf

import (
	"time"
	"unicode/utf8"
)

// Hold is a reader that asked the writer to wait for it, up to a bound,
// rather than evict bytes it has not read yet (the opt-in `hold` of an
// output stream, protocol.md §4). Append itself never waits; a writer that
// honours holds appends with AppendHeld.
//
// A hold lapses when the writer has waited for it for a whole bound during
// which the reader made no progress (no Advance): from then on it holds
// nothing (the reader sees a gap, as without a hold) until it has caught up
// with the output (Advance to End). So a reader that stopped reading stalls
// the writer once, by its bound, and a reader that keeps reading, however
// slowly, paces the writer.
type Hold struct {
	r      *Ring
	next   int64         // the first byte the reader has not read yet
	bound  time.Duration // how long AppendHeld waits for it without progress
	moved  time.Time     // the last Advance that moved next; zero before one
	lapsed bool
}

// Hold registers a reader whose next byte to read is next, for whom
// AppendHeld waits up to bound without progress (bound must be positive).
// It refuses (false) when most holds are registered already; on a closed
// ring, where there is no writer left to hold, it registers nothing and
// never refuses. Release it when the reader is done.
func (r *Ring) Hold(next int64, bound time.Duration, most int) (*Hold, bool) {
	h := &Hold{r: r, next: next, bound: max(bound, time.Nanosecond)}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return h, true
	}
	if len(r.holds) >= most {
		return nil, false
	}
	r.holds = append(r.holds, h)
	r.nholds.Store(int32(len(r.holds)))
	return h, true
}

// Advance records that the reader has read everything before next, which
// restarts the hold's bound. A lapsed hold holds again once next reaches
// End.
func (h *Hold) Advance(next int64) {
	r := h.r
	r.mu.Lock()
	if next > h.next {
		h.next = next
		h.moved = time.Now()
		if h.lapsed && next >= r.end {
			h.lapsed = false
		}
		r.wakeRoom()
	}
	r.mu.Unlock()
}

// Release unregisters the hold; an AppendHeld waiting for it returns. It is
// idempotent.
func (h *Hold) Release() {
	r := h.r
	r.mu.Lock()
	for i, o := range r.holds {
		if o == h {
			r.holds = append(r.holds[:i], r.holds[i+1:]...)
			r.nholds.Store(int32(len(r.holds)))
			r.wakeRoom()
			break
		}
	}
	r.mu.Unlock()
}

// EndHolds makes every later AppendHeld an Append and lets a waiting one
// go: the writer's owner has no more time to give the readers (a command
// that was asked to end: a kill, its timeout, shutdown).
func (r *Ring) EndHolds() {
	r.mu.Lock()
	r.holdsEnded = true
	r.wakeRoom()
	r.mu.Unlock()
}

// wakeRoom wakes an AppendHeld, if one waits.
func (r *Ring) wakeRoom() {
	if r.room != nil {
		close(r.room)
		r.room = nil
	}
}

// AppendHeld is Append, first waiting until it would evict no byte that a
// hold which has not lapsed has yet to read; it returns how long it waited.
// It waits for each such hold until the hold's bound has passed with no
// progress of its reader (counted from the wait's start or the reader's
// last Advance, whichever is later), and then lapses it. Without a hold
// (one atomic load) it is Append. The last check and the append are made
// under one lock, so two writers (stdout's and stderr's pumps) cannot both
// see room that only one of them has.
//
// p longer than the ring is appended in pieces of at most the ring's size,
// cut before a UTF-8 character's first byte where there is one, each
// waited for: a holding reader can read a piece whole before the next
// evicts it.
func (r *Ring) AppendHeld(s Stream, p []byte) time.Duration {
	if r.nholds.Load() == 0 || len(p) == 0 {
		r.Append(s, p)
		return 0
	}
	var waited time.Duration
	for len(p) > 0 {
		n := min(len(p), r.maxBytes)
		if n < len(p) {
			n = pieceEnd(p, n)
		}
		waited += r.appendPiece(s, p[:n])
		p = p[n:]
	}
	return waited
}

// pieceEnd is where to cut p, which is longer than n > 0, so that the first
// piece holds at most n bytes: before the last UTF-8 first byte among its
// last utf8.UTFMax bytes, or at n when there is none (or it is at 0).
func pieceEnd(p []byte, n int) int {
	for i := n; i > 0 && i > n-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			return i
		}
	}
	return n
}

// appendPiece is AppendHeld of p, at most the ring's size.
func (r *Ring) appendPiece(s Stream, p []byte) time.Duration {
	var began time.Time
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		r.mu.Lock()
		wait := r.holdWait(s, len(p), &began)
		if wait < 0 {
			r.appendLocked(s, p)
			var d time.Duration
			if !began.IsZero() {
				d = time.Since(began)
				r.stopWaiting()
			}
			r.mu.Unlock()
			return d
		}
		if r.room == nil {
			r.room = make(chan struct{})
		}
		room := r.room
		r.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-room:
			timer.Stop() // Go 1.23 timers: no stale tick after Stop or Reset
		case <-timer.C:
		}
	}
}

// holdWait, under r.mu, is how long an Append of n bytes to s should wait
// for the holds in its way (the shortest bound left), or -1 when none is
// (or the ring is closed, or EndHolds was called). It lapses the holds
// whose bound has passed without progress since *began, which it sets (and
// counts a waiting writer) when it first finds one in the way.
func (r *Ring) holdWait(s Stream, n int, began *time.Time) time.Duration {
	if r.closed || r.holdsEnded {
		return -1
	}
	newStart, _ := r.evictionStart(s, int64(n))
	limit := min(newStart, r.end)
	wait := time.Duration(-1)
	for _, h := range r.holds {
		if h.lapsed || h.next >= limit {
			continue
		}
		if began.IsZero() {
			*began = time.Now()
			r.startWaiting(*began)
		}
		from := *began
		if h.moved.After(from) {
			from = h.moved
		}
		left := h.bound - time.Since(from)
		if left <= 0 {
			h.lapsed = true
			r.lapses++
			continue
		}
		if wait < 0 || left < wait {
			wait = left
		}
	}
	return wait
}

// startWaiting and stopWaiting count the writers waiting in AppendHeld, so
// that heldFor adds up the time at least one of them waited (two pumps
// waiting at once count once).
func (r *Ring) startWaiting(now time.Time) {
	if r.waiters == 0 {
		r.waitSince = now
	}
	r.waiters++
}

func (r *Ring) stopWaiting() {
	r.waiters--
	if r.waiters == 0 {
		r.heldFor += time.Since(r.waitSince)
	}
}
