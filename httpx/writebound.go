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

// ProgressChunk is how much of a file body must reach the client within
// one WriteWait (ProgressWriter): a client slower than ProgressChunk per
// WriteWait (25.6 KiB/s in principle; about 30 KB/s in practice, as the
// daemon sees a read only when the client's kernel re-opens its window, in
// steps: docs/protocol.md §1), or one that never reads, is disconnected.
const ProgressChunk = 256 << 10

// ProgressWriter is a ResponseWriter whose every ProgressChunk of body
// gets a connection write deadline of B.Wait: a file body (ServeContent)
// sent to a client that stops reading ends within B.Wait of the last
// progress, and frees its descriptors, instead of holding them for ever.
// ReadFrom keeps sendfile: a *io.LimitedReader of an *os.File (what
// ServeContent passes) is sent in chunks of the same kind.
type ProgressWriter struct {
	http.ResponseWriter
	B *WriteBound
}

// NewProgressWriter bounds the body writes of w with WriteWait.
func NewProgressWriter(w http.ResponseWriter) *ProgressWriter {
	return &ProgressWriter{ResponseWriter: w, B: &WriteBound{RC: http.NewResponseController(w), Wait: WriteWait}}
}

func (p *ProgressWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		c := b[:min(len(b), ProgressChunk)]
		p.B.Arm()
		m, err := p.ResponseWriter.Write(c)
		n += m
		if err != nil {
			return n, err
		}
		b = b[len(c):]
	}
	return n, nil
}

func (p *ProgressWriter) ReadFrom(src io.Reader) (int64, error) {
	rf, ok := p.ResponseWriter.(io.ReaderFrom)
	if !ok {
		return io.Copy(struct{ io.Writer }{p}, src)
	}
	return readFromInChunks(rf, src, func() bool { p.B.Arm(); return true })
}

// readFromInChunks moves src to rf in pieces of ProgressChunk, calling arm
// before each; once arm reports false the rest goes in one piece. The
// pieces are *io.LimitedReader of the source's own reader (what net/http
// passes for a sized body, unwrapped), so sendfile and splice still apply.
func readFromInChunks(rf io.ReaderFrom, src io.Reader, arm func() bool) (int64, error) {
	lr, ok := src.(*io.LimitedReader)
	if !ok {
		lr = &io.LimitedReader{R: src, N: 1<<63 - 1}
	}
	var total int64
	for lr.N > 0 {
		if !arm() {
			n, err := rf.ReadFrom(lr)
			return total + n, err
		}
		n, err := rf.ReadFrom(&io.LimitedReader{R: lr.R, N: min(lr.N, ProgressChunk)})
		total += n
		lr.N -= n
		if err != nil || n == 0 {
			return total, err // an error, or the end of the source
		}
	}
	return total, nil
}

// Unwrap is for http.ResponseController.
func (p *ProgressWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }
