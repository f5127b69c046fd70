//go:build linux

package runtime

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// TestWaitPortSharesThePoll: wait_ports that wait together cost the
// socket-table reads of the one poller, not one read each per poll (each
// waiter re-read the tables after every poll: with 3,000 host processes a
// read is 6–12 ms, so every waiter added ~10 % of a core). Each waiter may
// read once when it begins and once when its wait runs out.
func TestWaitPortSharesThePoll(t *testing.T) {
	m := newManager(t, nil)
	c := mustCreate(t, m, CreateRequest{Argv: []string{"sleep", "30"}})
	defer func() { c.Kill(context.Background()); waitDone(t, c) }()
	port := freePort(t) // nobody binds it
	const waiters = 5
	polls0, reads0 := m.ports.polls.Load(), m.ports.tableReads.Load()
	var wg sync.WaitGroup
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st := c.WaitPort(context.Background(), port, time.Second); st.WaitPortResult != wire.WaitPortTimeout {
				t.Errorf("wait_port of a port nobody binds: %q", st.WaitPortResult)
			}
		}()
	}
	wg.Wait()
	polls, reads := m.ports.polls.Load()-polls0, m.ports.tableReads.Load()-reads0
	t.Logf("%d waiters for 1 s: %d polls, %d socket-table reads", waiters, polls, reads)
	if polls < 2 {
		t.Fatalf("%d polls in 1 s of wait_port (every 100 ms)", polls)
	}
	if reads > polls+2*waiters {
		t.Fatalf("%d socket-table reads for %d polls and %d waiters; want at most %d", reads, polls, waiters, polls+2*waiters)
	}
}
