package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// TestFollowWatchThroughCuttingProxy: FollowWatch through a proxy that
// cuts the stream every few KiB reports each of 3,000 files exactly once,
// with consecutive sequence numbers (no gap), and returns when the watch is
// deleted.
func TestFollowWatchThroughCuttingProxy(t *testing.T) {
	d := startDaemon(t)
	p := newCutProxy(t, strings.TrimPrefix(d.url, "http://"), 16<<10, 7)
	direct := newClient(t, d.url, Options{})
	viaProxy := newClient(t, p.url(), Options{RetryFor: 20 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := direct.CreateWatch(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	var mu sync.Mutex
	seen := map[string]int{}
	next := int64(0)
	all := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := viaProxy.FollowWatch(ctx, info.ID, 0, func(ev *wire.WatchEvent) error {
			mu.Lock()
			defer mu.Unlock()
			if ev.Type == wire.EventGap || ev.Type == wire.WatchOverflow {
				return fmt.Errorf("lost events: %+v", ev)
			}
			if ev.Seq == nil || *ev.Seq != next {
				return fmt.Errorf("event %+v after cursor %d: not exactly once", ev, next)
			}
			next = ev.NextCursor
			if ev.Type == wire.WatchCreate {
				seen[ev.Path]++
				if len(seen) == n {
					close(all)
				}
			}
			return nil
		})
		done <- err
	}()
	for i := range n {
		os.WriteFile(filepath.Join(d.base, fmt.Sprintf("file-%04d", i)), nil, 0o644)
	}
	select {
	case <-all:
	case err := <-done:
		t.Fatalf("FollowWatch returned early: %v", err)
	case <-ctx.Done():
		t.Fatalf("only %d of %d files seen", len(seen), n)
	}
	if err := direct.DeleteWatch(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("FollowWatch after DELETE: %v", err)
	}
	for p, c := range seen {
		if c != 1 {
			t.Fatalf("%s seen %d times", p, c)
		}
	}
	t.Logf("%d files, %d events, %d connections, %d cut by the proxy", len(seen), next, p.accepted.Load(), p.cuts.Load())
}
