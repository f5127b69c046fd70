package legacy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/pycompat"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// The answer of /execute is encoded as it is written: the captured output
// goes from the runtime's chunks through the text decoding and the JSON
// escaping into one small buffer and out to the socket. No whole-answer
// string or byte slice exists, so an answer costs its captured output once
// (at most 2 × SANDBOX_EXECUTE_OUTPUT_LIMIT_BYTES) plus answerBufSize,
// however much the escaping expands it (a \x01 byte is six bytes of JSON).

const (
	// answerBufSize is the write size of an answer.
	answerBufSize = 32 << 10
	// answerWriteTimeout is how long one write of an answer may block on a
	// client that does not read; then the connection is cut and the
	// execution slot freed.
	answerWriteTimeout = 30 * time.Second
	// answerGrace and answerMinRate: after answerGrace, the client must
	// have read the answer at answerMinRate on average, or it is cut: a
	// client reading a little every 29 s must not hold a slot for hours
	// (the largest answer, ~100 MB of escaped control bytes, takes at most
	// about 7 minutes at this rate).
	answerGrace   = 10 * time.Second
	answerMinRate = 256 << 10 // bytes per second
)

// legacyExecFailure is the answer when the outcome is not an output (the
// command could not run, or timed out), and ok is then true.
func legacyExecFailure(argv []string, seconds float64, res *runtime.ExecResult, err error) (legacyExecResponse, bool) {
	if f, ok := runtime.StartFailureOf(err); ok {
		return execFailed(pycompat.OSError(f.Errno, f.Path)), true
	}
	switch {
	case errors.Is(err, runtime.ErrShuttingDown):
		return execFailed("the sandbox runtime is shutting down"), true
	case err != nil:
		return execFailed(err.Error()), true
	case res.TimedOut:
		// subprocess.TimeoutExpired: the output read so far is dropped.
		return execFailed(fmt.Sprintf("Command '%s' timed out after %s seconds", pycompat.List(argv), pycompat.Float(seconds))), true
	}
	return legacyExecResponse{}, false
}

// writeLegacyExecAnswer writes the JSON answer for the outcome of
// Manager.Execute: {"stdout","stderr","exit_code"}, the output decoded like
// Python's text-mode pipes (legacyTextEncoder) and the truncation and
// shutdown notes appended to stderr.
func writeLegacyExecAnswer(w io.Writer, argv []string, seconds float64, res *runtime.ExecResult, err error) error {
	if fail, ok := legacyExecFailure(argv, seconds, res, err); ok {
		_, err := w.Write(httpx.Marshal(fail))
		return err
	}
	bw := bufio.NewWriterSize(w, answerBufSize)
	bw.WriteString(`{"stdout":"`)
	out := legacyTextEncoder{w: bw}
	for _, c := range res.Stdout.Chunks() {
		out.write(c)
	}
	out.close()
	bw.WriteString(`","stderr":"`)
	errOut := legacyTextEncoder{w: bw}
	for _, c := range res.Stderr.Chunks() {
		errOut.write(c)
	}
	errOut.close()
	var notes []string
	if res.StdoutDropped > 0 {
		notes = append(notes, fmt.Sprintf("[stdout truncated: %d bytes dropped]", res.StdoutDropped))
	}
	if res.StderrDropped > 0 {
		notes = append(notes, fmt.Sprintf("[stderr truncated: %d bytes dropped]", res.StderrDropped))
	}
	if res.Terminated {
		notes = append(notes, "[terminated: the sandbox runtime is shutting down]")
	}
	for _, n := range notes {
		if errOut.runes > 0 && errOut.last != '\n' {
			errOut.write([]byte("\n"))
		}
		errOut.write([]byte(n + "\n"))
	}
	bw.WriteString(`","exit_code":` + strconv.Itoa(res.ExitCode) + `}`)
	return bw.Flush()
}

// deadlineWriter gives every write of an answer a deadline: at most
// answerWriteTimeout away, and no later than the moment the client would
// fall below answerMinRate (never before answerGrace). A client that stops
// reading, or reads too slowly, is cut rather than holding the answer's
// memory and its execution slot.
type deadlineWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	start   time.Time
	written int64
}

func newDeadlineWriter(w http.ResponseWriter, rc *http.ResponseController) *deadlineWriter {
	return &deadlineWriter{w: w, rc: rc, start: time.Now()}
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	d.arm(len(p))
	n, err := d.w.Write(p)
	d.written += int64(n)
	return n, err
}

// arm sets the deadline for the next n bytes of the answer.
func (d *deadlineWriter) arm(n int) {
	due := d.start.Add(max(answerGrace, time.Duration(float64(d.written+int64(n))/answerMinRate*float64(time.Second))))
	if limit := time.Now().Add(answerWriteTimeout); limit.Before(due) {
		due = limit
	}
	d.rc.SetWriteDeadline(due) // unsupported (a recorder): no deadline
}

// armTail gives what net/http still writes once the handler has returned
// (its buffered tail of the answer, up to 4 KiB, and the closing chunk) the
// same rule as the answer's own writes. The connection's deadline is
// cleared when it goes idle for the next request (api.Server.ConnState),
// so no write is ever left without one: a client that never reads cannot
// hold the connection and its goroutine once the socket buffers are full.
func (d *deadlineWriter) armTail() { d.arm(0) }

// legacyTextEncoder decodes output like Python's text-mode pipes and
// writes it as the inside of a JSON string, one chunk at a time: invalid
// UTF-8 becomes U+FFFD per maximal subpart (protocol.md §5; like
// pycompat.DecodeUTF8), "\r\n" and "\r" become "\n", and the escaping is
// encoding/json's without HTML escaping. A sequence cut by a chunk boundary
// is carried into the next chunk, so the result does not depend on where
// the chunks end.
type legacyTextEncoder struct {
	w       *bufio.Writer
	carry   []byte // an incomplete UTF-8 sequence at the end of the last chunk (< 4 bytes)
	afterCR bool   // the last character was "\r": a "\n" right after it is dropped
	runes   int64  // characters written
	last    rune   // the last character written (after the "\r" translation)
}

// write decodes and writes b; an incomplete sequence at its end waits for
// the next write (or close).
func (e *legacyTextEncoder) write(b []byte) {
	if len(e.carry) > 0 {
		n := len(e.carry)
		tmp := append(e.carry[:n:n], b[:min(len(b), utf8.UTFMax)]...)
		used := e.decode(tmp, n, false)
		if used < n { // still incomplete: b was too short to finish it
			e.carry = tmp
			return
		}
		e.carry = nil
		b = b[used-n:]
	}
	used := e.decode(b, len(b), false)
	if used < len(b) {
		e.carry = append([]byte(nil), b[used:]...)
	}
}

// close writes what is left of an incomplete sequence (as U+FFFD).
func (e *legacyTextEncoder) close() {
	if len(e.carry) > 0 {
		e.decode(e.carry, len(e.carry), true)
		e.carry = nil
	}
}

// decode writes the characters of b that start before upto and returns
// the index after the last one written. Unless final, it stops at a
// sequence that is incomplete only because b ends.
func (e *legacyTextEncoder) decode(b []byte, upto int, final bool) int {
	i := 0
	for i < upto {
		c := b[i]
		if c < utf8.RuneSelf {
			e.char(rune(c), b[i:i+1])
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || size > 1 {
			e.char(r, b[i:i+size])
			i += size
			continue
		}
		if !final && !utf8.FullRune(b[i:]) {
			return i
		}
		e.char(utf8.RuneError, nil)
		i += pycompat.InvalidUTF8Len(b[i:])
	}
	return i
}

const answerHex = "0123456789abcdef"

// char writes one decoded character; raw is its UTF-8 form (nil for U+FFFD).
func (e *legacyTextEncoder) char(r rune, raw []byte) {
	if r == '\n' && e.afterCR {
		e.afterCR = false
		return
	}
	e.afterCR = r == '\r'
	if r == '\r' {
		r, raw = '\n', nil
	}
	e.runes++
	e.last = r
	w := e.w
	switch {
	case r >= 0x20 && r != '"' && r != '\\' && r < utf8.RuneSelf:
		w.WriteByte(byte(r))
	case r < utf8.RuneSelf:
		switch r {
		case '"', '\\':
			w.WriteByte('\\')
			w.WriteByte(byte(r))
		case '\b':
			w.WriteString(`\b`)
		case '\f':
			w.WriteString(`\f`)
		case '\n':
			w.WriteString(`\n`)
		case '\t':
			w.WriteString(`\t`)
		default:
			w.WriteString(`\u00`)
			w.WriteByte(answerHex[r>>4])
			w.WriteByte(answerHex[r&0xF])
		}
	case r == '\u2028':
		w.WriteString(`\u2028`)
	case r == '\u2029':
		w.WriteString(`\u2029`)
	case raw == nil:
		w.WriteRune(r)
	default:
		w.Write(raw)
	}
}
