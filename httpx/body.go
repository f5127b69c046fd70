package httpx

import (
	"bytes"
	"context"
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

// DecodeTurns hands out the turns of large body decodes: a body over its
// threshold waits for a turn before it is parsed (for /execute, split),
// because decoding it costs a multiple of its size. The rule and its
// numbers are the owner's (runtime.Manager.EnterDecode, the ClassDecode
// row of runtime's admission table); httpx only carries them to the
// decoders.
type DecodeTurns interface {
	EnterDecode(ctx context.Context, size int) (leave func(), err error)
}

type decodeTurnsKey struct{}

// WithDecodeTurns returns ctx carrying t, the turns EnterDecode takes: the
// server puts its Manager's in every request's context, so that the turns
// are those of the Manager the request is for, shared by every server of
// that Manager and by no other.
func WithDecodeTurns(ctx context.Context, t DecodeTurns) context.Context {
	return context.WithValue(ctx, decodeTurnsKey{}, t)
}

// EnterDecode takes a decode turn for a body of size bytes from the
// DecodeTurns ctx carries (WithDecodeTurns) and returns the function that
// gives it back. A context without turns (a request built by hand, not
// served) waits for none: leave is then a no-op. Errors are the turns' (the
// client left while it waited).
func EnterDecode(ctx context.Context, size int) (leave func(), err error) {
	t, _ := ctx.Value(decodeTurnsKey{}).(DecodeTurns)
	if t == nil {
		return func() {}, nil
	}
	return t.EnterDecode(ctx, size)
}
