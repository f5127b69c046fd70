package httpx

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// WriteWait bounds one write of a streamed answer (an event stream, a
// listing): a client that does not take a write's bytes within it is
// disconnected, so a client that stops reading costs its buffers (and the
// handler) for a bounded time and never holds them for ever.
const WriteWait = 10 * time.Second

// WriteBound gives every write of one answer a connection write deadline:
// Wait from the write's start, or the answer's limit if that is sooner.
// net/http resets deadlines only with Server.WriteTimeout, so the server's
// ConnState clears the last one once the connection is idle again (what
// net/http writes after the handler, the last chunk, is still bounded by
// it). Arm and Lower may be called from any goroutine.
type WriteBound struct {
	RC   *http.ResponseController
	Wait time.Duration

	mu    sync.Mutex // guards limit and serialises setting the deadline
	limit time.Time  // no write may last past this; zero: none
}

// Arm sets the deadline for the next write.
func (b *WriteBound) Arm() {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := time.Now().Add(b.Wait)
	if !b.limit.IsZero() && b.limit.Before(d) {
		d = b.limit
	}
	b.RC.SetWriteDeadline(d)
}

// ArmAt sets the deadline for the next write at d, or the answer's limit if
// that is sooner (Arm with a deadline chosen by the caller).
func (b *WriteBound) ArmAt(d time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.limit.IsZero() && b.limit.Before(d) {
		d = b.limit
	}
	b.RC.SetWriteDeadline(d)
}

// Lower brings the answer's limit forward to t (never back) and applies it
// at once, to a write in progress too.
func (b *WriteBound) Lower(t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit.IsZero() || t.Before(b.limit) {
		b.limit = t
		b.RC.SetWriteDeadline(t)
	}
}

// BoundedWriter is W with every Write armed by B first: for an answer
// written through a bufio.Writer (a listing), each buffer's worth reaches
// the connection within B's deadline or fails.
type BoundedWriter struct {
	W io.Writer
	B *WriteBound
}

func (w BoundedWriter) Write(p []byte) (int, error) {
	w.B.Arm()
	return w.W.Write(p)
}
