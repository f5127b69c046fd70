package fsroot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestSortedEach lists a directory of 1,000 names in byte order, whole and
// each name once, with pass budgets that need one pass, a few, or one per
// name; this package's temporary files are left out, look-alikes are not.
func TestSortedEach(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for i := range 1000 {
		n := fmt.Sprintf("%03d-%c", (i*7919)%1000, 'a'+i%26)
		want = append(want, n)
	}
	want = append(want, ".sandbox-put-0123456789abcdeg.tmp", ".sandbox-put-x.tmp", "\xff\xfe")
	for _, n := range append(slices.Clone(want), ".sandbox-put-0123456789abcdef.tmp") {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(want)
	for _, budget := range []int{1 << 20, 2000, 1} {
		f, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		if err := sortedEach(f, budget, nil, func(n string) error { got = append(got, n); return nil }); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if !slices.Equal(got, want) {
			t.Errorf("budget %d: %d names, first %q; want %d sorted, first %q", budget, len(got), got[:min(3, len(got))], len(want), want[:3])
		}
	}
}

// TestSortedEachLease: a budget of 4 chunks grants 4 leases and a fifth
// waits until its context ends; once one is released, a listing of more
// names than a chunk (about 900 KiB) grows into the free chunk only, is
// whole and sorted, and gives back what it grew.
func TestSortedEachLease(t *testing.T) {
	dir := t.TempDir()
	pad := string(slices.Repeat([]byte("x"), 200))
	var want []string
	for i := range 4000 {
		n := fmt.Sprintf("%05d%s", (i*7919)%4000, pad)
		want = append(want, n)
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(want)
	b := NewBudget(4 * BudgetChunk)
	var leases []*Lease
	for range 4 {
		l, err := b.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if _, err := b.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a fifth lease of a 4-chunk budget: %v, want it to wait until the deadline", err)
	}
	cancel()
	leases[3].Release()
	leases = leases[:3]
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []string
	maxHeld := 0
	err = SortedEach(f, leases[0], func(n string) error {
		got = append(got, n)
		maxHeld = max(maxHeld, len(b.chunks))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%d names, want %d sorted", len(got), len(want))
	}
	if maxHeld > 4 || len(b.chunks) != len(leases) || len(b.extras) != 0 {
		t.Errorf("chunks leased: at most %d during, %d after (extras %d); want ≤ 4, then %d and 0", maxHeld, len(b.chunks), len(b.extras), len(leases))
	}
	for _, l := range leases {
		l.Release()
	}
	if len(b.chunks) != 0 {
		t.Errorf("%d chunks still leased after every release", len(b.chunks))
	}
}
