package runtime

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// ctxLog is the output of one execution: its events in order, bounded by
// bytes. The events are whole units (ringbuf's records are byte runs that a
// bounded read may split, and a result or display bundle must never be
// split), so this is a ring of events: the oldest are dropped while the
// total passes the bound, and a reader whose cursor is before the first
// retained event gets one gap event for the events it lost. The newest event
// is always kept, and no event is larger than the bound (the interpreter
// keeps each one under ContextMaxEvent).
type ctxLog struct {
	mu      sync.Mutex
	limit   int
	events  []wire.ContextEvent // retained, events[0] has cursor first
	sizes   []int
	first   int64
	bytes   int
	dropped bool
	closed  bool
	notify  chan struct{}
}

func newCtxLog(limit int) *ctxLog {
	return &ctxLog{limit: limit, notify: make(chan struct{})}
}

// size is what an event costs against the bound: its JSON encoding.
func eventSize(ev *wire.ContextEvent) int {
	b, _ := json.Marshal(ev)
	return len(b)
}

// add appends ev (its cursor assigned here); after close it is dropped.
func (l *ctxLog) add(ev wire.ContextEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	ev.Cursor = l.first + int64(len(l.events))
	n := eventSize(&ev)
	l.events = append(l.events, ev)
	l.sizes = append(l.sizes, n)
	l.bytes += n
	for l.bytes > l.limit && len(l.events) > 1 {
		l.bytes -= l.sizes[0]
		l.events[0] = wire.ContextEvent{}
		l.events, l.sizes = l.events[1:], l.sizes[1:]
		l.first++
		l.dropped = true
	}
	close(l.notify)
	l.notify = make(chan struct{})
}

// close ends the log (after the end event).
func (l *ctxLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.notify)
	}
}

// end is the cursor after the last event.
func (l *ctxLog) end() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first + int64(len(l.events))
}

func (l *ctxLog) truncated() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// read returns the events from cursor on (a gap event first when some are
// gone), the cursor to read from next, whether the log is over (closed and
// everything read), and a channel closed at the next change.
func (l *ctxLog) read(cursor int64) (evs []wire.ContextEvent, next int64, done bool, notify <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	end := l.first + int64(len(l.events))
	if cursor > end {
		cursor = end
	}
	if cursor < l.first {
		evs = append(evs, wire.ContextEvent{Type: wire.CtxEventGap, Cursor: cursor, From: cursor, To: l.first})
		cursor = l.first
	}
	evs = append(evs, l.events[cursor-l.first:]...)
	return evs, end, l.closed, l.notify
}

// wait blocks until there is an event at cursor or later, the log is
// closed, or ctx ends.
func (l *ctxLog) wait(ctx context.Context, cursor int64) error {
	for {
		l.mu.Lock()
		ready := l.closed || l.first+int64(len(l.events)) > cursor
		ch := l.notify
		l.mu.Unlock()
		if ready {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
