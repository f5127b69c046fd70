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
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// wakeups counts the runs of 100 ms slots in which the threads of pid
// switched context during w (the measure of cmd/sandbox-bench's idle
// scenario).
func wakeups(t *testing.T, pid int, w time.Duration) (wakes int, switches int64) {
	t.Helper()
	count := func() int64 {
		dirs, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/status")
		var n int64
		for _, f := range dirs {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(data), "\n") {
				if name, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(name, "ctxt_switches") {
					k, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					n += k
				}
			}
		}
		return n
	}
	first := count()
	last, was := first, false
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(w); time.Now().Before(end); {
		<-tick.C
		n := count()
		if n > last && !was {
			wakes++
			if os.Getenv("EVENTS_DEBUG") != "" {
				t.Logf("wake-up at %s", time.Now().Format("05.000"))
			}
		}
		was = n > last
		last = n
	}
	return wakes, last - first
}

// TestEventFeedIdleWakeups (issue 23): with a feed open (NDJSON, follow,
// max_wait 60) and nothing happening, the daemon wakes only for the
// feed's heartbeat and its own 10 s timers.
func TestEventFeedIdleWakeups(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	t.Logf("daemon up at %s", time.Now().Format("05.000"))
	// Open the feed half-way between two of the daemon's own 10 s ticks
	// (they started with it): a heartbeat timer of the feed's own would
	// then be a second wake-up per 10 s. Not a synchronisation: the phase
	// of the measurement.
	<-time.After(7 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", d.url+"/v1/events?max_wait=60&cursor=now", nil)
	resp, err := d.client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("open: %v %v", err, resp)
	}
	defer resp.Body.Close()
	t.Logf("feed open at %s", time.Now().Format("05.000"))
	lines := make(chan string, 16)
	go func() {
		br := bufio.NewReader(resp.Body)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- l
			if os.Getenv("EVENTS_DEBUG") != "" {
				t.Logf("line at %s: %s", time.Now().Format("05.000"), strings.TrimSpace(l))
			}
		}
	}()
	// As the bench's idle scenario: from 3 s after the last request (the
	// Go runtime's own work after serving it is not idleness).
	<-time.After(3 * time.Second)
	w := 30 * time.Second
	if testing.Short() {
		w = 20 * time.Second
	}
	wakes, sw := wakeups(t, d.pid, w)
	per10 := float64(wakes) * float64(10*time.Second) / float64(w)
	figure(t, "event feed open, nothing happening: %d wake-ups in %v (%.1f per 10 s; %d context switches)", wakes, w, per10, sw)
	n := 0
	for len(lines) > 0 {
		if l := <-lines; !strings.Contains(l, `"heartbeat"`) {
			t.Errorf("an idle feed sent %q", l)
		}
		n++
	}
	if n < int(w/(10*time.Second))-1 {
		t.Errorf("%d heartbeats in %v", n, w)
	}
	if per10 > 1.25 {
		t.Errorf("%.1f wake-ups per 10 s with a feed open; want the heartbeat to share the daemon's 10 s wake-up", per10)
	}
}
