package httpx

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBodyReadGrowsAsBytesArrive: a body that announces 1 MiB and sends 12
// bytes costs 12 bytes, not the announced size. Before: the /execute reader
// grew its buffer to Content-Length up front (cap 1 MiB + 512 here).
func TestBodyReadGrowsAsBytesArrive(t *testing.T) {
	r := httptest.NewRequest("POST", "/execute", strings.NewReader(`{"command":1}`[:12]))
	r.ContentLength = 1 << 20
	data, err := ReadBody(httptest.NewRecorder(), r, MaxJSONBody)
	if err != nil || len(data) != 12 {
		t.Fatalf("read %d bytes, %v; want 12", len(data), err)
	}
	if c := cap(data); c > 16<<10 {
		t.Errorf("12 bytes read into a buffer of %d bytes: allocated from Content-Length", c)
	}
	// Past the limit: a MaxBytesError, as before.
	r = httptest.NewRequest("POST", "/execute", strings.NewReader(strings.Repeat("x", MaxJSONBody+1)))
	if _, err := ReadBody(httptest.NewRecorder(), r, MaxJSONBody); err == nil {
		t.Errorf("a body over %d bytes was read whole", MaxJSONBody)
	}
}

// turnsFunc is a DecodeTurns of a test.
type turnsFunc func(ctx context.Context, size int) (func(), error)

func (f turnsFunc) EnterDecode(ctx context.Context, size int) (func(), error) { return f(ctx, size) }

// TestEnterDecodeTakesTheContextsTurns: EnterDecode asks the turns the
// request's context carries (the server's Manager's), with the body's size,
// and hands back their leave and their error; a context without turns
// waits for none. Before, every server of the process shared one
// package-level gate.
func TestEnterDecodeTakesTheContextsTurns(t *testing.T) {
	var asked []int
	left := 0
	gone := errors.New("gone")
	turns := turnsFunc(func(ctx context.Context, size int) (func(), error) {
		asked = append(asked, size)
		if size > 10 {
			return nil, gone
		}
		return func() { left++ }, nil
	})
	ctx := WithDecodeTurns(context.Background(), turns)
	leave, err := EnterDecode(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	leave()
	if _, err := EnterDecode(ctx, 11); err != gone {
		t.Fatalf("the turns' error: %v; want theirs", err)
	}
	if len(asked) != 2 || asked[0] != 7 || asked[1] != 11 || left != 1 {
		t.Fatalf("asked %v, left %d; want [7 11], 1", asked, left)
	}
	leave, err = EnterDecode(context.Background(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	leave()
	if len(asked) != 2 {
		t.Fatalf("a context without turns reached another's: asked %v", asked)
	}
}
