//go:build reliability && linux

package reliability

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// TestEventFeedExactlyOnceAcrossDisconnects (issue 23): a feed opened
// before the first create follows 1,000 commands (200 with -short) run 4 at
// a time, and is cut 50 times (10) at random byte offsets, mid-line too:
// the partial line is dropped and the feed re-opened from the next_cursor
// of the last whole line. Every event arrives exactly once, seq after seq,
// each command's created, started and exited in that order, never a gap.
func TestEventFeedExactlyOnceAcrossDisconnects(t *testing.T) {
	commands, cuts := 1000, 50
	if testing.Short() {
		commands, cuts = 200, 10
	}
	rng := newRand(t)
	d := startDaemon(t, daemonConfig{env: map[string]string{"SANDBOX_MAX_RETAINED": "64"}})
	code, body := d.mustCall("GET", "/v1/events?cursor=now&follow=false", nil)
	var end wire.FeedEvent
	if code != 200 || json.Unmarshal(body, &end) != nil || end.Type != wire.FeedEnd {
		t.Fatalf("the head of the feed: %d %s", code, body)
	}
	cursor := end.NextCursor

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	per := commands / 4
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				st, err := d.create(map[string]any{"argv": []string{"true"}})
				if err == nil {
					_, err = d.waitFinished(st.CommandID, 30*time.Second)
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d: %v", w, err)
					return
				}
			}
		}()
	}

	type seen struct{ created, started, exited int64 }
	cmds := map[string]*seen{}
	var last int64
	exited, opened := 0, 0
	deadline := time.Now().Add(3 * time.Minute)
	for exited < commands {
		if time.Now().After(deadline) {
			t.Fatalf("after 3 min: %d of %d commands seen to exit", exited, commands)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		req, _ := http.NewRequestWithContext(ctx, "GET", d.url+"/v1/events?max_wait=60&cursor="+url.QueryEscape(cursor), nil)
		resp, err := d.client.Do(req)
		if err != nil || resp.StatusCode != 200 {
			cancel()
			t.Fatalf("re-open %d at %s: %v %v", opened, cursor, err, resp)
		}
		opened++
		var r io.Reader = resp.Body
		if opened <= cuts {
			r = io.LimitReader(resp.Body, 1+rng.Int64N(16<<10)) // the cut, wherever it falls
		}
		br := bufio.NewReader(r)
		for exited < commands {
			line, err := br.ReadBytes('\n')
			if err != nil {
				break // a partial line is dropped: it is read again
			}
			var ev wire.FeedEvent
			if err := json.Unmarshal(line, &ev); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			cursor = ev.NextCursor
			switch ev.Type {
			case wire.FeedHeartbeat, wire.FeedEnd:
				continue
			case wire.FeedGap:
				t.Fatalf("gap after seq %d: %s", last, line)
			}
			if last != 0 && ev.Seq != last+1 {
				t.Fatalf("seq %d after %d", ev.Seq, last)
			}
			last = ev.Seq
			s := cmds[ev.CommandID]
			if s == nil {
				s = &seen{}
				cmds[ev.CommandID] = s
			}
			switch ev.Type {
			case wire.FeedCreated:
				if s.created != 0 {
					t.Fatalf("%s created twice", ev.CommandID)
				}
				s.created = ev.Seq
			case wire.FeedStarted:
				if s.started != 0 || s.created == 0 {
					t.Fatalf("%s started out of order: %+v", ev.CommandID, s)
				}
				s.started = ev.Seq
			case wire.FeedExited:
				if s.exited != 0 || s.started == 0 {
					t.Fatalf("%s exited out of order: %+v", ev.CommandID, s)
				}
				s.exited = ev.Seq
				exited++
			}
		}
		resp.Body.Close()
		cancel()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if opened <= cuts {
		t.Fatalf("only %d re-opens: the cuts did not all happen", opened)
	}
	if len(cmds) != commands {
		t.Fatalf("%d commands in the feed, want %d", len(cmds), commands)
	}
	took := time.Since(start)
	figure(t, "event feed: %d commands, %d events, %d cuts, exactly once in %v (%.0f events/s incl. the commands)", commands, last, cuts, took.Round(time.Millisecond), float64(last)/took.Seconds())
	d.assertCleanLogs()
}
