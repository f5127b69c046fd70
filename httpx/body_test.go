package httpx

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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

// TestDecodeGate: at most maxBigDecodes bodies over BigBody hold a turn;
// the next waits until one is given back or its context ends; small bodies
// never wait.
func TestDecodeGate(t *testing.T) {
	g := newDecodeGate()
	ctx := context.Background()
	var leaves []func()
	for range maxBigDecodes {
		leave, err := g.enter(ctx, BigBody+1)
		if err != nil {
			t.Fatal(err)
		}
		leaves = append(leaves, leave)
	}
	small, err := g.enter(ctx, BigBody)
	if err != nil {
		t.Fatalf("a body of %d bytes waited: %v", BigBody, err)
	}
	small()
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := g.enter(tctx, BigBody+1); err == nil {
		t.Fatalf("a %d-th large decode got a turn", maxBigDecodes+1)
	}
	got := make(chan error, 1)
	go func() {
		leave, err := g.enter(ctx, 1<<20)
		if err == nil {
			leave()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("entered while the gate was full: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	leaves[0]()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	for _, l := range leaves[1:] {
		l()
	}
}
