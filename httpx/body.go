package httpx

import (
	"bytes"
	"context"
	"errors"
	"net/http"
)

// MaxJSONBody is the limit on a JSON request body (protocol.md §3: 1 MiB),
// the v1 API's and POST /execute's alike.
const MaxJSONBody = 1 << 20

// ReadBody reads at most limit bytes of r's body. The buffer grows only as
// bytes arrive, whatever the request's Content-Length announces: a client
// that announces 1 MiB and sends 12 bytes costs 12 bytes, not 1 MiB (200
// such connections once took 200 MiB before a single body byte had come).
// Past the limit the error is an *http.MaxBytesError.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	// bytes.Buffer.ReadFrom grows by doubling from what it holds, never
	// from what is announced.
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	data := buf.Bytes()
	if cap(data)-len(data) > len(data)/8+bytes.MinRead {
		// Doubling left up to as much again unused: a body that waits for
		// its decode turn holds its own size only.
		data = bytes.Clone(data)
	}
	return data, err
}

// Decoding a large body costs a multiple of its size while it is parsed: a
// 1 MiB create with 87,000 envs keys took 27 MiB, a 1 MiB /execute of
// "echo a a a …" (500,000 words once split) 29 MiB, and 60 of either at
// once took 1.2–1.5 GB. So at most maxBigDecodes requests decode (and, for
// /execute, split) a body larger than BigBody at once; the others wait for
// a turn, for as long as their client stays. Smaller bodies never wait.
// The turns are shared by every server of the process (EnterDecode).
const (
	BigBody       = 64 << 10
	maxBigDecodes = 4
)

// decodeGate is the semaphore of the large-body decodes.
type decodeGate chan struct{}

func newDecodeGate() decodeGate { return make(decodeGate, maxBigDecodes) }

// ErrClientGone is the error of a request whose client left while it
// waited for a turn.
var ErrClientGone = errors.New("the client left while the request waited for a decode turn")

// enter waits for a turn when size is over BigBody and returns the
// function that gives the turn back (a no-op for a small body). It fails
// only when ctx ends first.
func (g decodeGate) enter(ctx context.Context, size int) (leave func(), err error) {
	if size <= BigBody || g == nil {
		return func() {}, nil
	}
	select {
	case g <- struct{}{}:
		return func() { <-g }, nil
	case <-ctx.Done():
		return nil, ErrClientGone
	}
}

// bigDecodes is the turn of the large-body decodes of every server.
var bigDecodes = newDecodeGate()

// EnterDecode waits for a decode turn when size is over BigBody (a body
// about to be parsed, or a command about to be split) and returns the
// function that gives it back (a no-op for a small body). It fails with
// ErrClientGone only when ctx ends first.
func EnterDecode(ctx context.Context, size int) (leave func(), err error) {
	return bigDecodes.enter(ctx, size)
}
