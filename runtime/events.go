package runtime

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// The lifecycle event feed (docs/protocol.md §4 "The event feed"): every
// command's created, started, exited, expired and evicted, in the order
// they happened, each with a sequence number. The log is a ring of the
// last EventLogSize events; a reader whose cursor is older than the log is
// told so (a gap) rather than given a later event as if it were the next.
//
// The hooks (commandStarted, commandExited, handleDropped) are one call each
// beside the Observer calls of the lifecycle; they never block for longer
// than an append under the log's own mutex, which nests inside m.mu and
// c.mu is never held with it.

// EventLogSize is how many events the feed retains: 128 bytes each
// (logEvent), 1 MiB in all, and the last 2,000 or more commands' events
// (a command makes 3 or 4). As lines they are 155–410 bytes: a full
// replay is about 2 MB.
const EventLogSize = 8192

// ErrStaleCursor: a feed cursor of another daemon incarnation (its instance
// id is not this daemon's); its sequence numbers mean nothing here.
var ErrStaleCursor = errors.New("stale cursor")

// Event kinds in the log.
const (
	evKindCreated uint8 = iota + 1
	evKindStarted
	evKindExited
	evKindExpired
	evKindEvicted
	evKindListening
	evKindClosed
)

var evKindNames = [...]string{
	evKindCreated:   wire.FeedCreated,
	evKindStarted:   wire.FeedStarted,
	evKindExited:    wire.FeedExited,
	evKindExpired:   wire.FeedExpired,
	evKindEvicted:   wire.FeedEvicted,
	evKindListening: wire.FeedListening,
	evKindClosed:    wire.FeedClosed,
}

// logEvent is one retained event, compact: no pointers but the id (the
// command's own string) and constant strings.
type logEvent struct {
	seq      int64
	kind     uint8
	oom      bool
	pid      int32
	code     int32
	id       string
	state    wire.State
	signal   string
	at       int64          // unix ns
	started  int64          // exited: unix ns
	finished int64          // exited: unix ns
	ucpu     int64          // exited: ms
	scpu     int64          // exited: ms
	rss      int64          // exited: KiB
	lis      *wire.Listener // listening, closed
}

// eventLog is the Manager's feed. Its zero value is ready: the instance id
// is drawn on first use.
type eventLog struct {
	once     sync.Once
	instance string
	size     int64 // events retained: Config.EventLog

	mu     sync.Mutex // guards the fields below
	ring   []logEvent // grows to size, then reused: seq s is at (s-1) % size
	next   int64      // seq of the next event; events next-len(ring) … next-1 are retained
	notify chan struct{}
	tickCh chan struct{} // closed at the janitor's next tick (Manager.Tick)
	tick0  time.Time     // when the janitor's ticker started: it ticks at tick0 + k×TickInterval
}

// TickInterval is the period of the Manager's own timer (the janitor's
// sweep). Streams that time their heartbeats by Manager.Tick wake the
// daemon together with it, not once more per stream.
const TickInterval = sweepInterval

// Tick returns a channel closed at the Manager's next timer tick (every
// TickInterval while the Manager is open).
func (m *Manager) Tick() <-chan struct{} {
	l := &m.feed
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tickCh == nil {
		l.tickCh = make(chan struct{})
	}
	return l.tickCh
}

// TickAfter returns the time of the Manager's first timer tick at or after
// t (t itself before the janitor started). A write deadline set there
// expires together with the tick, not as a wake-up of its own.
func (m *Manager) TickAfter(t time.Time) time.Time {
	l := &m.feed
	l.mu.Lock()
	t0 := l.tick0
	l.mu.Unlock()
	if t0.IsZero() || !t.After(t0) {
		return t
	}
	k := (t.Sub(t0) + TickInterval - 1) / TickInterval
	return t0.Add(k * TickInterval)
}

// tick wakes the Tick waiters (called by the janitor).
func (l *eventLog) tick() {
	l.mu.Lock()
	ch := l.tickCh
	l.tickCh = nil
	l.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

func (l *eventLog) init(size int) {
	l.once.Do(func() {
		l.size = int64(size)
		if l.size <= 0 {
			l.size = EventLogSize
		}
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			panic(fmt.Sprintf("runtime: no randomness for the instance id: %v", err))
		}
		l.instance = hex.EncodeToString(b[:])
		l.mu.Lock()
		l.next = 1
		l.mu.Unlock()
	})
}

// append adds events (their seq set here) and wakes the readers.
func (l *eventLog) append(size int, evs ...logEvent) {
	l.init(size)
	l.mu.Lock()
	for _, e := range evs {
		e.seq = l.next
		if int64(len(l.ring)) < l.size {
			l.ring = append(l.ring, e)
		} else {
			l.ring[(e.seq-1)%l.size] = e
		}
		l.next++
	}
	ch := l.notify
	l.notify = nil
	l.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// commandStarted logs created and started for a command whose process has
// just started (called beside Observer.CommandStarted).
func (l *eventLog) commandStarted(c *Command) {
	c.mu.Lock()
	created, started := c.createdAt.UnixNano(), c.startedAt.UnixNano()
	pid := int32(0)
	if c.proc != nil {
		pid = int32(c.proc.Pid)
	}
	c.mu.Unlock()
	l.append(c.m.cfg.EventLog,
		logEvent{kind: evKindCreated, id: c.id, at: created},
		logEvent{kind: evKindStarted, id: c.id, at: started, pid: pid},
	)
}

// commandExited logs the final status of c (called beside
// Observer.CommandFinished, once the state is final and before Done).
func (l *eventLog) commandExited(c *Command) {
	c.mu.Lock()
	e := logEvent{
		kind: evKindExited, id: c.id, state: c.state.Wire(),
		code: int32(c.exit.Code), oom: c.exit.OOMKilled,
		at: c.finishedAt.UnixNano(), started: c.startedAt.UnixNano(), finished: c.finishedAt.UnixNano(),
		ucpu: c.exit.UserCPU.Milliseconds(), scpu: c.exit.SysCPU.Milliseconds(), rss: c.exit.MaxRSSKB,
	}
	if c.exit.Signal != 0 {
		e.signal = SignalName(c.exit.Signal)
	}
	if c.proc != nil {
		e.pid = int32(c.proc.Pid)
	}
	c.mu.Unlock()
	l.append(c.m.cfg.EventLog, e)
}

// handleDropped logs that c's handle was dropped (called beside
// Observer.HandleEvicted and HandleExpired).
func (l *eventLog) handleDropped(c *Command, why GoneReason, now time.Time) {
	kind := evKindExpired
	if why == GoneEvicted {
		kind = evKindEvicted
	}
	l.append(c.m.cfg.EventLog, logEvent{kind: kind, id: c.id, at: now.UnixNano()})
}

// EventFilter selects the events of a feed. The zero value selects all.
type EventFilter struct {
	Types      []string // wire.FeedCommandTypes; empty: all
	CommandIDs []string // canonical command ids; empty: all
}

// Check validates the filter: known types, UUID ids (canonicalized in place).
func (f *EventFilter) Check() error {
	for _, t := range f.Types {
		if eventKind(t) == 0 {
			return errorf(ErrInvalid, "unknown event type %q; the types are created, started, listening, closed, exited, expired, evicted", t)
		}
	}
	for i, id := range f.CommandIDs {
		cid, err := ParseID(id)
		if err != nil {
			return errorf(ErrInvalid, "command_id %q is not a UUID", id)
		}
		f.CommandIDs[i] = cid
	}
	return nil
}

func eventKind(t string) uint8 {
	for k, n := range evKindNames {
		if n != "" && n == t {
			return uint8(k)
		}
	}
	return 0
}

// matcher is a compiled EventFilter.
type matcher struct {
	kinds uint32 // bit per kind; 0: all
	ids   map[string]struct{}
}

func (f EventFilter) compile() matcher {
	var m matcher
	for _, t := range f.Types {
		m.kinds |= 1 << eventKind(t)
	}
	if len(f.CommandIDs) > 0 {
		m.ids = make(map[string]struct{}, len(f.CommandIDs))
		for _, id := range f.CommandIDs {
			m.ids[id] = struct{}{}
		}
	}
	return m
}

func (m *matcher) match(e *logEvent) bool {
	if m.kinds != 0 && m.kinds&(1<<e.kind) == 0 {
		return false
	}
	if m.ids != nil {
		if _, ok := m.ids[e.id]; !ok {
			return false
		}
	}
	return true
}

// EventFeed is one reader's view of the Manager's feed: its filter and
// where it is.
type EventFeed struct {
	l     *eventLog
	m     matcher
	next  int64 // seq of the next event to read
	ready bool
}

// EventRead is what one EventFeed.Read returns.
type EventRead struct {
	Events []wire.FeedEvent // the matching events, in order
	// Dropped > 0: the events from the cursor up to the oldest retained one
	// were lost (a gap, before Events); GapFrom is the cursor asked for.
	Dropped int64
	GapFrom wire.FeedCursor
	Next    wire.FeedCursor // where the reader is now: after the last event scanned
}

// EventInstance is this Manager's instance id, the first part of its feed
// cursors: new at every start of the daemon.
func (m *Manager) EventInstance() string {
	m.feed.init(m.cfg.EventLog)
	return m.feed.instance
}

// EventHead is the cursor of the next event to happen.
func (m *Manager) EventHead() wire.FeedCursor {
	m.feed.init(m.cfg.EventLog)
	m.feed.mu.Lock()
	defer m.feed.mu.Unlock()
	return wire.FeedCursor{Instance: m.feed.instance, Seq: m.feed.next}
}

// OpenEvents returns a reader of the feed from cursor: "" for the oldest
// retained event, "now" for the next event to happen, or a next_cursor of
// this daemon's feed. Errors: ErrInvalid (bad cursor, a cursor beyond the
// head, bad filter), ErrStaleCursor (a cursor of another incarnation).
func (m *Manager) OpenEvents(cursor string, f EventFilter) (*EventFeed, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	l := &m.feed
	l.init(m.cfg.EventLog)
	r := &EventFeed{l: l, m: f.compile()}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch cursor {
	case "":
		r.next = l.next - int64(len(l.ring))
	case "now":
		r.next = l.next
	default:
		c, err := wire.ParseFeedCursor(cursor)
		if err != nil {
			return nil, errorf(ErrInvalid, "bad cursor %q: %v", cursorEcho(cursor), err)
		}
		if c.Instance != l.instance {
			return nil, errorf(ErrStaleCursor, "cursor %q is of another daemon instance (%s; this one is %s, started since): its events are gone; re-open without a cursor, and look up the commands you wait for", cursorEcho(cursor), c.Instance, l.instance)
		}
		if c.Seq > l.next {
			return nil, errorf(ErrInvalid, "cursor %q is beyond the newest event (next is %d)", cursorEcho(cursor), l.next)
		}
		r.next = c.Seq
	}
	return r, nil
}

// cursorEchoMax is how much of a refused cursor an error message quotes.
const cursorEchoMax = 64

// cursorEcho is cursor as an error message quotes it: its first
// cursorEchoMax bytes (cut at a character boundary) and "…" if longer.
func cursorEcho(cursor string) string {
	if len(cursor) <= cursorEchoMax {
		return cursor
	}
	n := cursorEchoMax
	for n > 0 && !utf8.RuneStart(cursor[n]) {
		n--
	}
	return cursor[:n] + "…"
}

// Cursor is where the reader is.
func (r *EventFeed) Cursor() wire.FeedCursor {
	return wire.FeedCursor{Instance: r.l.instance, Seq: r.next}
}

// Notify returns a channel closed when an event is added after the call.
func (r *EventFeed) Notify() <-chan struct{} {
	l := r.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.notify == nil {
		l.notify = make(chan struct{})
	}
	return l.notify
}

// eventScan bounds the events one Read looks at (the log's lock is held
// meanwhile).
const eventScan = 1024

// Read returns up to max matching events after the reader's position, and
// moves it on. dst is reused for the answer.
func (r *EventFeed) Read(dst []wire.FeedEvent, max int) EventRead {
	l := r.l
	out := EventRead{Events: dst[:0]}
	l.mu.Lock()
	oldest := l.next - int64(len(l.ring))
	if r.next < oldest {
		out.GapFrom = r.Cursor()
		out.Dropped = oldest - r.next
		r.next = oldest
	}
	for scanned := 0; r.next < l.next && scanned < eventScan && len(out.Events) < max; scanned++ {
		e := &l.ring[(r.next-1)%l.size]
		r.next++
		if r.m.match(e) {
			out.Events = append(out.Events, e.wire(l.instance))
		}
	}
	l.mu.Unlock()
	out.Next = r.Cursor()
	return out
}

// CaughtUp reports whether the reader has read every event so far.
func (r *EventFeed) CaughtUp() bool {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	return r.next >= r.l.next
}

func unixUTC(ns int64) *time.Time {
	t := time.Unix(0, ns).UTC()
	return &t
}

// wire is the protocol's form of e; NextCursor is the cursor after it.
func (e *logEvent) wire(instance string) wire.FeedEvent {
	out := wire.FeedEvent{
		Type: evKindNames[e.kind], Seq: e.seq, CommandID: e.id, Time: unixUTC(e.at),
		NextCursor: wire.FeedCursor{Instance: instance, Seq: e.seq + 1}.String(),
	}
	switch e.kind {
	case evKindStarted:
		out.PID = int(e.pid)
	case evKindListening, evKindClosed:
		l := *e.lis
		out.Listener = &l
	case evKindExited:
		out.PID = int(e.pid)
		out.State = e.state
		code := int(e.code)
		out.ExitCode = &code
		if e.signal != "" {
			sig := e.signal
			out.Signal = &sig
		}
		oom := e.oom
		out.OOMKilled = &oom
		if e.started != 0 {
			out.StartedAt = unixUTC(e.started)
		}
		out.FinishedAt = unixUTC(e.finished)
		d := time.Duration(e.finished - e.started).Seconds()
		out.DurationSeconds = &d
		out.Resources = &wire.Resources{UserCPUMillis: e.ucpu, SystemCPUMillis: e.scpu, MaxRSSKB: e.rss}
	}
	return out
}
