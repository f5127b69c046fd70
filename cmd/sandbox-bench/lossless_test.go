package main

import (
	"bytes"
	"errors"
	"testing"
)

// The paced producer writes exactly what the full-speed one writes.
func TestProducePaced(t *testing.T) {
	var fast, paced bytes.Buffer
	const n = 300<<10 + 5
	if err := produce(&fast, n); err != nil {
		t.Fatal(err)
	}
	if err := producePaced(&paced, n, 1e12); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fast.Bytes(), paced.Bytes()) {
		t.Fatalf("paced: %d bytes, differ from produce's %d", paced.Len(), fast.Len())
	}
}

// A lossless probe stops at the first gap; output that merely mentions one
// does not stop it.
func TestGapStop(t *testing.T) {
	var st followStats
	src := gapStop{stream(
		`{"type":"output","stream":"stdout","cursor":0,"data":"{\"type\":\"gap\"}","next_cursor":14}`,
		`{"type":"gap","cursor":14,"dropped_bytes":10,"next_cursor":24}`,
		`{"type":"exit","next_cursor":24,"status":{}}`,
	)}
	if err := consume(src, &st, false); !errors.Is(err, errGapSeen) {
		t.Fatalf("consume: %v; want errGapSeen", err)
	}
	if st.Bytes != 14 || st.Gaps != 0 {
		t.Fatalf("before the gap: %+v", st)
	}
}
