// Package ringbuf keeps the most recent output of one command: a bounded ring of
// records (a stream id and its bytes) addressed by absolute cursor.
//
// Every byte ever appended has a cursor, its offset in the command's combined
// stdout+stderr output since start (0, 1, 2, …). The ring retains the window
// [Start, End): End is the number of bytes ever appended and Start moves forward
// as old bytes are evicted. The window is bounded in bytes and in records; a record
// is a maximal run of bytes of one stream, so an Append to the same stream as the
// newest record extends that record instead of adding one. Eviction drops the
// oldest bytes first, and may trim the oldest record at its front. stdout/stderr
// order is preserved.
//
// Append never fails and never waits for a reader: a slow or absent reader loses
// old output (it sees a gap), never stalls the writer. The one exception is
// opt-in on both sides: a reader that registers a Hold is waited for, up to
// its bound, by a writer that appends with AppendHeld (hold.go).
//
// Memory is allocated lazily: a new Ring holds no buffer; the byte buffer starts
// small (4 KiB) and, once outgrown, is replaced by one of maxBytes, a circular
// buffer, so a full ring appends without allocating (the pages of a fresh large
// allocation become resident only as output reaches them). The record metadata
// is a circular slice that doubles up to maxRecords.
//
// # Concurrency
//
// A Ring is safe for concurrent use: typically one writer (the pipe readers) and
// any number of readers, each with its own cursor. One mutex, Ring.mu, guards
// every field of the Ring. Read copies the data out under the lock into the
// caller's buffer, so returned records never alias the ring. Wait and Notify let
// readers sleep until the next Append or Close; the package starts no goroutines,
// does no I/O and does not log.
package ringbuf

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Stream identifies the output stream a byte was written to.
type Stream uint8

// The streams of a command's output.
const (
	Stdout Stream = 1 // standard output
	Stderr Stream = 2 // standard error
	PTY    Stream = 3 // a terminal's output (stdout and stderr are one); counted in neither total
)

// String returns "stdout", "stderr" or "pty", or "Stream(N)" for any other value.
func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	case PTY:
		return "pty"
	}
	return "Stream(" + strconv.Itoa(int(s)) + ")"
}

// Record is a run of bytes of one stream. Cursor is the absolute offset of Data[0]
// in the command's combined output since start.
type Record struct {
	Stream Stream
	Cursor int64
	Data   []byte
}

// ReadResult is what Read returns.
type ReadResult struct {
	// Records holds the data read, in order, one entry per run of one stream.
	// Consecutive records have different streams, except that a record cut by the
	// maxBytes limit of one Read continues in the first record of the next.
	// Data slices point into Buf (copies), never into the ring.
	Records []Record
	// Buf is the buffer the Data slices point into (dst grown), for reuse.
	Buf []byte
	// Gap reports that the cursor asked for was older than Start: the bytes
	// [cursor, GapFrom) are gone.
	Gap bool
	// GapFrom is, when Gap, the first retained cursor (== Records[0].Cursor if any).
	GapFrom int64
	// Next is the cursor to read from next time.
	Next int64
	// Done reports that the ring is closed and Next == End: nothing more will
	// ever come.
	Done bool
}

// Stats is a snapshot of a ring's counters.
type Stats struct {
	Start, End  int64 // retained window [Start, End); End == total bytes ever appended
	StdoutTotal int64 // bytes ever appended to Stdout
	StderrTotal int64 // bytes ever appended to Stderr
	Records     int   // records currently retained
	Truncated   bool  // anything was ever evicted (Start > 0)
	Closed      bool  // Close was called
	// HeldFor is how long at least one AppendHeld has waited for holds, in
	// all (concurrent waits count once); Lapses is how many holds it lapsed
	// (hold.go).
	HeldFor    time.Duration
	Lapses     int
	HoldsEnded bool // EndHolds was called
	Waiting    int  // AppendHeld calls waiting for holds now
}

// ErrCursorAhead is returned by Read when the cursor is beyond End: no byte with
// that cursor has been written yet.
var ErrCursorAhead = errors.New("ringbuf: cursor is beyond the end of the output")

// ErrNegativeCursor is returned by Read when the cursor is negative.
var ErrNegativeCursor = errors.New("ringbuf: negative cursor")

// Initial sizes of the lazily allocated buffers: the byte buffer then jumps to
// its limit, the record slice doubles up to its limit.
const (
	initialBytes   = 4 << 10
	initialRecords = 16
)

// recMeta is one retained record: its stream and the cursor of its first retained
// byte. Its length is the next record's cursor (or End, for the newest) minus its
// cursor; records are never empty.
type recMeta struct {
	cursor int64
	stream Stream
}

// Ring is a bounded ring of output records addressed by absolute cursor. Create
// one with New. All methods are safe for concurrent use.
type Ring struct {
	// Limits, fixed by New; not guarded.
	maxBytes, maxRecords int
	initBytes, initRecs  int

	mu sync.Mutex // guards every field below

	// buf holds the bytes [start, end): the byte with cursor c is at
	// buf[(off + c - start) % len(buf)]. len(buf) grows from 0 to maxBytes.
	buf        []byte
	off        int
	start, end int64

	// recs is a circular slice of the retained records, oldest at recs[rhead],
	// nrec of them. recs[rhead].cursor == start whenever nrec > 0, and nrec == 0
	// exactly when start == end.
	recs  []recMeta
	rhead int
	nrec  int

	stdoutTotal, stderrTotal int64
	truncated                bool
	closed                   bool

	// notify is closed (and set to nil) by the next Append or Close; it is made
	// on demand by Notify and Wait, so appends with nobody waiting allocate
	// nothing.
	notify chan struct{}

	// holds are the readers AppendHeld waits for (hold.go), nholds their
	// number (read without the lock: AppendHeld's fast path); room is closed
	// by the next Advance or Release, made on demand by AppendHeld. heldFor
	// and lapses add up AppendHeld's waits and the holds it lapsed.
	holds      []*Hold
	nholds     atomic.Int32
	room       chan struct{}
	heldFor    time.Duration
	lapses     int
	holdsEnded bool      // EndHolds: AppendHeld waits no more
	waiters    int       // AppendHeld calls waiting now
	waitSince  time.Time // when waiters last rose from 0
}

// New returns an empty ring that retains at most maxBytes bytes in at most
// maxRecords records. It panics unless both are positive. No buffer is allocated
// until the first Append; see the package doc for how memory grows.
func New(maxBytes, maxRecords int) *Ring {
	return newRing(maxBytes, maxRecords, initialBytes, initialRecords)
}

// newRing is New with explicit initial buffer sizes, so tests can exercise growth
// with small rings.
func newRing(maxBytes, maxRecords, initBytes, initRecs int) *Ring {
	if maxBytes <= 0 || maxRecords <= 0 {
		panic("ringbuf: New needs maxBytes > 0 and maxRecords > 0")
	}
	return &Ring{
		maxBytes:   maxBytes,
		maxRecords: maxRecords,
		initBytes:  max(1, min(initBytes, maxBytes)),
		initRecs:   max(1, min(initRecs, maxRecords)),
	}
}

// Append adds p, written to stream s, at the end of the output. It copies p, so
// the caller may reuse it at once. It never fails and never blocks beyond the
// mutex: when the limits are reached the oldest bytes are evicted. If p is longer
// than maxBytes only its last maxBytes bytes are kept (the rest counts as written
// and evicted). An empty p, and any Append after Close, is a no-op.
//
// s should be Stdout or Stderr; any other value is stored as given but counted in
// neither StdoutTotal nor StderrTotal.
func (r *Ring) Append(s Stream, p []byte) {
	if len(p) == 0 {
		return
	}
	r.mu.Lock()
	r.appendLocked(s, p)
	r.mu.Unlock()
}

// appendLocked is Append under r.mu, p not empty.
func (r *Ring) appendLocked(s Stream, p []byte) {
	if r.closed {
		return
	}
	switch s {
	case Stdout:
		r.stdoutTotal += int64(len(p))
	case Stderr:
		r.stderrTotal += int64(len(p))
	}

	if len(p) > r.maxBytes {
		// Everything retained and the head of p are evicted at once.
		skip := len(p) - r.maxBytes
		p = p[skip:]
		r.end += int64(skip)
		r.start, r.off = r.end, 0
		r.rhead, r.nrec = 0, 0
		r.truncated = true
	}

	n := int64(len(p))
	newStart, needRecord := r.evictionStart(s, n)
	// Drop the records that lie wholly before newStart.
	for r.nrec > 0 && r.recEnd(0) <= newStart {
		r.popRecord()
	}
	if r.nrec > 0 {
		r.recAt(0).cursor = newStart
	}
	if newStart > r.start {
		r.truncated = true
	}

	keep := int(r.end - newStart) // retained old bytes, all <= maxBytes-n
	if need := keep + len(p); need > len(r.buf) {
		r.growBytes(need, newStart)
	} else if len(r.buf) > 0 {
		r.off = r.wrap(r.off + int(newStart-r.start))
	}
	r.start = newStart

	// Copy p in at the end of the retained bytes, wrapping around.
	w := r.wrap(r.off + keep)
	c := copy(r.buf[w:], p)
	copy(r.buf, p[c:])

	if needRecord {
		r.pushRecord(recMeta{cursor: r.end, stream: s})
	}
	r.end += n
	r.wake()
}

// evictionStart is where the retained window starts after an Append of n
// bytes (n <= maxBytes) to stream s, and whether that Append starts a
// record: the byte limit evicts the oldest bytes, and a new record at the
// record limit evicts the oldest record whole. It changes nothing.
func (r *Ring) evictionStart(s Stream, n int64) (newStart int64, needRecord bool) {
	newStart = max(r.start, r.end+n-int64(r.maxBytes))
	gone := 0 // the records that lie wholly before newStart
	for gone < r.nrec && r.recEnd(gone) <= newStart {
		gone++
	}
	needRecord = gone == r.nrec || r.recAt(r.nrec-1).stream != s
	if needRecord && r.nrec-gone == r.maxRecords {
		newStart = r.recEnd(gone) // record limit: the oldest left goes whole
	}
	return newStart, needRecord
}

// wrap reduces i, which must be below 2*len(r.buf), modulo len(r.buf).
func (r *Ring) wrap(i int) int {
	if i >= len(r.buf) {
		i -= len(r.buf)
	}
	return i
}

// growBytes replaces r.buf with a larger one that holds at least need bytes,
// keeping the retained bytes from cursor from on at its front.
func (r *Ring) growBytes(need int, from int64) {
	size := len(r.buf)
	if size == 0 {
		size = r.initBytes
	}
	// A command that outgrows the first small buffer gets the whole ring at
	// once: doubling would leave a ring's worth of garbage per command for
	// the GC, and the pages of a large fresh allocation only become resident
	// as output reaches them.
	if size < need {
		size = r.maxBytes
	}
	nb := make([]byte, size)
	if k := int(r.end - from); k > 0 {
		r.copyOut(nb[:k], r.wrap(r.off+int(from-r.start)))
	}
	r.buf, r.off = nb, 0
}

// copyOut fills dst with the ring bytes starting at buffer position pos.
func (r *Ring) copyOut(dst []byte, pos int) {
	c := copy(dst, r.buf[pos:])
	copy(dst[c:], r.buf)
}

// recAt returns the i-th oldest retained record.
func (r *Ring) recAt(i int) *recMeta {
	j := r.rhead + i
	if j >= len(r.recs) {
		j -= len(r.recs)
	}
	return &r.recs[j]
}

// recEnd returns the cursor just past the i-th oldest retained record.
func (r *Ring) recEnd(i int) int64 {
	if i+1 < r.nrec {
		return r.recAt(i + 1).cursor
	}
	return r.end
}

func (r *Ring) popRecord() {
	r.rhead++
	if r.rhead == len(r.recs) {
		r.rhead = 0
	}
	r.nrec--
}

func (r *Ring) pushRecord(m recMeta) {
	if r.nrec == len(r.recs) {
		size := len(r.recs) * 2
		if size == 0 {
			size = r.initRecs
		}
		size = min(size, r.maxRecords)
		nr := make([]recMeta, size)
		for i := range r.nrec {
			nr[i] = *r.recAt(i)
		}
		r.recs, r.rhead = nr, 0
	}
	*r.recAt(r.nrec) = m
	r.nrec++
}

// wake closes the notify channel, if anyone asked for one.
func (r *Ring) wake() {
	if r.notify != nil {
		close(r.notify)
		r.notify = nil
	}
}

// Close marks the end of the output: later Appends are no-ops, Read reports Done
// once a reader reaches End, and every waiter is woken. Close is idempotent.
func (r *Ring) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	r.wake()
	r.wakeRoom()
}

// closedChan is returned by Notify once the ring is closed.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Notify returns a channel that is closed at the next Append that adds data, or at
// Close. Once the ring is closed it returns an already closed channel, since
// nothing more will happen. Every caller of Notify between two appends gets the
// same channel (a broadcast). To avoid missing output, take the channel before
// reading, and read again when it is closed.
func (r *Ring) Notify() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.notifyLocked()
}

func (r *Ring) notifyLocked() chan struct{} {
	if r.closed {
		return closedChan
	}
	if r.notify == nil {
		r.notify = make(chan struct{})
	}
	return r.notify
}

// Wait blocks until End() > cursor, or the ring is closed, or ctx is done. It
// returns nil in the first two cases (checked first, so a satisfied Wait returns
// nil even with ctx done) and ctx.Err() in the last.
func (r *Ring) Wait(ctx context.Context, cursor int64) error {
	for {
		r.mu.Lock()
		if r.end > cursor || r.closed {
			r.mu.Unlock()
			return nil
		}
		ch := r.notifyLocked()
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Read copies the retained data from cursor on into dst and returns it as
// records. Data is appended to dst and records to recs (pass res.Buf[:0] and
// res.Records[:0] of an earlier result to reuse them); maxBytes bounds the bytes
// of data copied, maxBytes <= 0 meaning no limit. A limit may cut a record: the
// next Read from res.Next continues it.
//
// A cursor older than Start is not an error: the result has Gap set and starts at
// GapFrom == Start. Read returns ErrNegativeCursor when cursor < 0 and
// ErrCursorAhead when cursor > End(); cursor == End() returns no records.
//
// All copying happens under the ring's lock: readers should pass a limit (say
// 32 KiB) and reuse their buffers, so that a reader never holds the writer up for
// long.
func (r *Ring) Read(cursor int64, maxBytes int, dst []byte, recs []Record) (ReadResult, error) {
	if cursor < 0 {
		return ReadResult{Buf: dst, Records: recs}, ErrNegativeCursor
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if cursor > r.end {
		return ReadResult{Buf: dst, Records: recs}, ErrCursorAhead
	}
	res := ReadResult{Next: cursor}
	from := cursor
	if from < r.start {
		from = r.start
		res.Gap, res.GapFrom = true, from
	}
	n := r.end - from
	if maxBytes > 0 {
		n = min(n, int64(maxBytes))
	}
	base := len(dst)
	dst = slices.Grow(dst, int(n))[:base+int(n)]
	stop := from + n

	// Find the record holding from: the last one with cursor <= from.
	i := 0
	if n > 0 {
		lo, hi := 0, r.nrec // invariant: recAt(lo).cursor <= from
		for hi-lo > 1 {
			mid := int(uint(lo+hi) >> 1)
			if r.recAt(mid).cursor <= from {
				lo = mid
			} else {
				hi = mid
			}
		}
		i = lo
	}
	pos := r.wrap(r.off + int(from-r.start))
	at := base
	for c := from; c < stop; i++ {
		m := r.recAt(i)
		e := min(r.recEnd(i), stop)
		k := int(e - c)
		seg := dst[at : at+k : at+k]
		r.copyOut(seg, pos)
		recs = append(recs, Record{Stream: m.stream, Cursor: c, Data: seg})
		pos = r.wrap(pos + k)
		at += k
		c = e
	}
	res.Records, res.Buf = recs, dst
	res.Next = stop
	res.Done = r.closed && stop == r.end
	return res, nil
}

// Start returns the cursor of the oldest retained byte.
func (r *Ring) Start() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.start
}

// End returns the cursor just past the newest byte: the number of bytes ever
// appended.
func (r *Ring) End() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.end
}

// Truncated reports whether anything was ever evicted.
func (r *Ring) Truncated() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.truncated
}

// Stats returns a snapshot of the ring's counters.
func (r *Ring) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Stats{
		Start:       r.start,
		End:         r.end,
		StdoutTotal: r.stdoutTotal,
		StderrTotal: r.stderrTotal,
		Records:     r.nrec,
		Truncated:   r.truncated,
		Closed:      r.closed,
		HeldFor:     r.heldFor,
		Lapses:      r.lapses,
		HoldsEnded:  r.holdsEnded,
		Waiting:     r.waiters,
	}
}
