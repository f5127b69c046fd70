package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"
)

// Connection-level limits on request bodies (issue 10 item 5). A body is
// what a slow or stuck client can hold open for as long as it likes, and
// each one costs a socket plus whatever its handler opened (a PUT's
// temporary file): 10,000 PUTs sending a byte a second took every fd, and
// then the health probe could not even be accepted. So:
//
//   - a body must make progress: after bodyGrace it must have averaged
//     bodyMinRate, and no read may wait more than bodyIdle; a body that
//     falls behind is cut (its handler sees errBodyTooSlow, the connection
//     is closed);
//   - at most maxBodies requests read a body at once, a sixteenth of the fd
//     limit less a reserve (a body may hold 3 fds besides its socket, and
//     the sockets have a cap of their own: conncap.go), so that bodies can
//     never take the fds the health probe, streams and commands need; a request with a body beyond
//     that is answered 503 at once (Retry-After: 1) and its connection
//     closed, before any handler opens anything.
//
// Requests without a body (GET /v1/health) are not counted.
const (
	bodyGrace   = 10 * time.Second
	bodyMinRate = 1024 // bytes per second, averaged from the first read
	bodyIdle    = 30 * time.Second
	// fdReserve is left out of the share of the fd limit bodies may use.
	fdReserve = 512
	// minBodies is the floor of maxBodies however low the fd limit.
	minBodies = 16
)

// errBodyTooSlow is the read error of a body that stopped making progress.
var errBodyTooSlow = errors.New("request body too slow")

// maxBodiesFor is the number of bodies read at once for an fd limit.
func maxBodiesFor(fdLimit uint64) int64 {
	if fdLimit <= fdReserve {
		return minBodies
	}
	return max(minBodies, int64(fdLimit-fdReserve)/16)
}

// fdSoftLimit is the current RLIMIT_NOFILE (main raises it to the hard
// limit at start).
func fdSoftLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	return lim.Cur
}

// bodyGate counts the requests reading a body. Its settings are fixed at
// creation (the constants above; tests shorten them).
type bodyGate struct {
	max         int64
	grace, idle time.Duration
	minRate     float64 // bytes per second
	inFlight    atomic.Int64
	refused     atomic.Int64
	cut         atomic.Int64
	// refuse writes the 503 of a refused body (Server.refuse; the v1 body
	// when nil, as in unit tests of the gate alone).
	refuse func(w http.ResponseWriter, r *http.Request, status int, code, msg string)
}

func newBodyGate() *bodyGate {
	return &bodyGate{max: maxBodiesFor(fdSoftLimit()), grace: bodyGrace, idle: bodyIdle, minRate: bodyMinRate}
}

// hasBody reports whether r comes with a body to read.
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// admit lets r's body be read, or answers 503 and reports false. It
// returns the request to serve: a shallow copy whose Body enforces the
// progress rule (the original keeps net/http's own body, which net/http
// inspects after the handler to decide whether the connection can be
// reused). release must be called once the handler has returned.
func (g *bodyGate) admit(w http.ResponseWriter, r *http.Request) (_ *http.Request, release func(), ok bool) {
	return g.admitRefusing(w, r, g.refuse)
}

// admitRefusing is admit writing its 503 with refuse (nil: the v1 body).
func (g *bodyGate) admitRefusing(w http.ResponseWriter, r *http.Request, refuse func(w http.ResponseWriter, r *http.Request, status int, code, msg string)) (_ *http.Request, release func(), ok bool) {
	if !hasBody(r) {
		return r, func() {}, true
	}
	if g.inFlight.Add(1) > g.max {
		g.inFlight.Add(-1)
		g.refused.Add(1)
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Connection", "close") // the unread body is not drained
		msg := fmt.Sprintf("%d requests are sending a body (limit %d); retry", g.max, g.max)
		if refuse != nil {
			refuse(w, r, http.StatusServiceUnavailable, "too_busy", msg)
		} else {
			writeError(w, http.StatusServiceUnavailable, "too_busy", msg, nil)
		}
		return r, nil, false
	}
	rc := http.NewResponseController(w)
	pb := &progressBody{r: r.Body, rc: rc, gate: g}
	r2 := r.WithContext(r.Context())
	r2.Body = pb
	return r2, func() {
		g.inFlight.Add(-1)
		switch {
		case pb.done:
			// Read to the end: the deadline was cleared then.
		case pb.err != nil:
			// A cut body keeps its expired deadline: net/http's drain of the
			// rest fails at once and the connection is closed after the answer.
		default:
			// The handler left some of the body unread (it answered without
			// reading, say a 405). net/http drains up to 256 KiB of it before
			// it sends the answer; that drain gets the progress rule too, or a
			// client that trickles would hold the connection forever.
			pb.setDeadline(time.Now())
		}
	}, true
}

// progressBody enforces the progress rule with a read deadline set before
// every read: the earliest moment at which the body, receiving nothing
// more, would fall below bodyMinRate (never before bodyGrace), and at most
// bodyIdle away.
type progressBody struct {
	r     io.ReadCloser
	rc    *http.ResponseController
	gate  *bodyGate
	start time.Time
	got   int64
	err   error // the cut, once it happened
	done  bool  // read to the end (or to another error)
}

// setDeadline sets the read deadline the progress rule gives at now, and
// reports whether the connection supports deadlines.
func (b *progressBody) setDeadline(now time.Time) bool {
	if b.start.IsZero() {
		b.start = now
	}
	g := b.gate
	due := b.start.Add(max(g.grace, time.Duration(float64(b.got)/g.minRate*float64(time.Second))))
	if idle := now.Add(g.idle); idle.Before(due) {
		due = idle
	}
	return b.rc.SetReadDeadline(due) == nil
}

func (b *progressBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if !b.setDeadline(time.Now()) {
		return b.r.Read(p) // not a real connection (a test recorder): no deadline
	}
	n, err := b.r.Read(p)
	b.got += int64(n)
	if isTimeout(err) {
		b.gate.cut.Add(1)
		b.err = fmt.Errorf("%w: %d bytes in %v; a body must average %.0f bytes/s after %v and never pause %v",
			errBodyTooSlow, b.got, time.Since(b.start).Round(time.Millisecond), b.gate.minRate, b.gate.grace, b.gate.idle)
		return n, b.err
	}
	if err != nil {
		// Done with the body: a deadline left on the connection would fire in
		// net/http's background read and cancel a long handler (a stream).
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (b *progressBody) Close() error { return b.r.Close() }

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return err != nil && errors.As(err, &ne) && ne.Timeout()
}
