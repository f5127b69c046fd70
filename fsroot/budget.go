package fsroot

import (
	"context"
)

// Budget bounds the names all listings sharing it hold at once (in
// SortedEach), whatever their number: ListBudgetBytes in BudgetChunk
// chunks. A listing leases one chunk to start (Acquire, which may wait)
// and takes more only while they are free (never waiting once started,
// so listings never wait on each other while holding names): under
// contention its passes get smaller, and it reads the directory more
// often, but the memory of every listing together stays within the
// budget.
//
// Chunks beyond a listing's first come from at most half the budget, so
// the listings in progress cannot take it all from the ones that start
// next (a few large listings whose clients read slowly would otherwise
// hold every chunk).
type Budget struct {
	chunks chan struct{} // one token per chunk leased
	extras chan struct{} // one token per chunk leased beyond a lease's first
}

// ListBudgetBytes is the budget of the daemon's listings: 32 MiB of names
// (about 145,000 names of 207 bytes) across all of them.
const ListBudgetBytes = 32 << 20

// BudgetChunk is the unit a Budget leases, and what a listing holds at
// least: 256 KiB, about 1,100 names of 207 bytes.
const BudgetChunk = 256 << 10

// NewBudget is a budget of total bytes (at least one chunk).
func NewBudget(total int) *Budget {
	n := max(1, total/BudgetChunk)
	return &Budget{chunks: make(chan struct{}, n), extras: make(chan struct{}, n/2)}
}

// Lease is one listing's share of a Budget: one chunk from Acquire until
// Release, and the chunks a pass adds (grow) until the pass ends (shrink).
// A Lease is used by one goroutine.
type Lease struct {
	b     *Budget
	extra int // chunks beyond the first
}

// Acquire leases one chunk, waiting until one is free or ctx is done (then
// it returns ctx's error and holds nothing).
func (b *Budget) Acquire(ctx context.Context) (*Lease, error) {
	select {
	case b.chunks <- struct{}{}:
		return &Lease{b: b}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Release gives back everything the lease holds.
func (l *Lease) Release() {
	l.shrink()
	<-l.b.chunks
}

// bytes is what the lease holds.
func (l *Lease) bytes() int { return (1 + l.extra) * BudgetChunk }

// grow takes one more chunk if one is free at once.
func (l *Lease) grow() bool {
	select {
	case l.b.extras <- struct{}{}:
	default:
		return false
	}
	select {
	case l.b.chunks <- struct{}{}:
		l.extra++
		return true
	default:
		<-l.b.extras
		return false
	}
}

// shrink gives back the chunks beyond the first.
func (l *Lease) shrink() {
	for ; l.extra > 0; l.extra-- {
		<-l.b.chunks
		<-l.b.extras
	}
}
