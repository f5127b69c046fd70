package ringbuf

import "time"

// Hold is a reader that asked the writer to wait for it, up to a bound,
// rather than evict bytes it has not read yet (the opt-in `hold` of an
// output stream, protocol.md §4). Append itself never waits; a writer that
// honours holds appends with AppendHeld.
//
// A hold lapses when the writer has waited for it for its whole bound in
// one AppendHeld: from then on it holds nothing (the reader sees a gap, as
// without a hold) until it has caught up with the output (Advance to End).
// So a reader that stopped reading stalls the writer once, by its bound,
// and a reader that is merely slower than the writer paces it while it
// keeps up and stops doing so once it falls a whole bound behind.
type Hold struct {
	r      *Ring
	next   int64         // the first byte the reader has not read yet
	bound  time.Duration // the longest one AppendHeld waits for it
	lapsed bool
}

// Hold registers a reader whose next byte to read is next, for whom
// AppendHeld waits up to bound (which must be positive). Release it when the
// reader is done.
func (r *Ring) Hold(next int64, bound time.Duration) *Hold {
	h := &Hold{r: r, next: next, bound: max(bound, time.Nanosecond)}
	r.mu.Lock()
	r.holds = append(r.holds, h)
	r.nholds.Store(int32(len(r.holds)))
	r.mu.Unlock()
	return h
}

// Advance records that the reader has read everything before next. A
// lapsed hold holds again once next reaches End.
func (h *Hold) Advance(next int64) {
	r := h.r
	r.mu.Lock()
	if next > h.next {
		h.next = next
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
// go: the writer's owner has no more time to give the readers (the end of
// a command's pipe grace, a shutdown's kill deadline).
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
// It waits for each such hold at most that hold's bound from the moment the
// wait began, and lapses a hold whose bound has passed. Without a hold
// (one atomic load) it is Append. The last check and the append are made
// under one lock, so two writers (stdout's and stderr's pumps) cannot both
// see room that only one of them has. An Append larger than the ring
// evicts its own head whatever the readers do: it waits only for what is
// retained.
func (r *Ring) AppendHeld(s Stream, p []byte) time.Duration {
	if r.nholds.Load() == 0 || len(p) == 0 {
		r.Append(s, p)
		return 0
	}
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
			if !began.IsZero() {
				d := time.Since(began)
				r.heldFor += d
				r.mu.Unlock()
				return d
			}
			r.mu.Unlock()
			return 0
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
// (or the ring is closed, or EndHolds was called). It lapses the holds whose bound has passed
// since *began, which it sets when it first finds one in the way.
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
		}
		left := h.bound - time.Since(*began)
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
