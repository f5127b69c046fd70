//go:build reliability && linux

package reliability

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// soakClient creates `true` commands, retrying on 429 by waiting for its own
// last command (a running command finishing frees a slot) instead of
// sleeping.
type soakClient struct {
	d       *daemon
	last    string
	created []string
	lat     []time.Duration
}

type soakCounts struct {
	created, refused429, status5xx, other atomic.Int64
}

func (c *soakClient) createOne(counts *soakCounts, errs *errSet) {
	for attempt := 0; ; attempt++ {
		t0 := time.Now()
		code, data, _, err := c.d.call("POST", "/v1/commands", map[string]any{"argv": []string{"true"}})
		if err != nil {
			errs.add("create: %v", err)
			return
		}
		switch {
		case code == http.StatusCreated:
			var st cmdStatus
			if err := json.Unmarshal(data, &st); err != nil {
				errs.add("create: %v", err)
				return
			}
			counts.created.Add(1)
			c.last = st.CommandID
			c.created = append(c.created, st.CommandID)
			c.lat = append(c.lat, time.Since(t0))
			return
		case code == http.StatusTooManyRequests:
			counts.refused429.Add(1)
			if attempt > 10000 {
				errs.add("create: still 429 after 10000 attempts")
				return
			}
			if c.last != "" {
				c.d.status(c.last, 2) // wait for our own last command
			}
		case code >= 500:
			counts.status5xx.Add(1)
			errs.add("create: %d %s", code, data)
			return
		default:
			counts.other.Add(1)
			errs.add("create: %d %s", code, data)
			return
		}
	}
}

// TestSoak runs many short commands sequentially and from 8 clients at once
// with a 1 s TTL, 16 retained and 8 running: no 5xx, exact accounting in
// /v1/commands and /metrics, flat fds and goroutines.
func TestSoak(t *testing.T) {
	seqN := scale(10000, 1000)
	concN := scale(10000, 1000)
	pauses := 2 // expiry pauses inside each phase
	d := startDaemon(t, daemonConfig{env: map[string]string{
		"SANDBOX_RESULT_TTL_SECONDS": "1",
		"SANDBOX_MAX_RETAINED":       "16",
		"SANDBOX_MAX_RUNNING":        "8",
	}})
	var counts soakCounts
	var errs errSet

	// Warm up, then take the baseline.
	warm := &soakClient{d: d}
	for range 20 {
		warm.createOne(&counts, &errs)
	}
	d.waitFinished(warm.last, 10*time.Second)
	waitExpiredAll(t, d)
	base := d.baseline()
	rss0 := rssKB(d.pid)

	// checkGone asserts that dropped ids answer 410 (evicted or expired).
	reasons := map[string]int{}
	checkGone := func(ids []string) {
		for _, id := range ids {
			code, data, _, err := d.call("GET", "/v1/commands/"+id, nil)
			if err != nil {
				errs.add("GET %s: %v", id, err)
				continue
			}
			var ae apiError
			json.Unmarshal(data, &ae)
			if code != http.StatusGone {
				errs.add("GET dropped %s: %d %s; want 410", id, code, data)
				continue
			}
			reasons[ae.Error.Reason]++
		}
	}

	// Sequential.
	seq := &soakClient{d: d}
	start := time.Now()
	for i := range seqN {
		seq.createOne(&counts, &errs)
		if (i+1)%(seqN/(pauses+1)) == 0 && i+1 < seqN {
			d.waitFinished(seq.last, 10*time.Second)
			waitExpiredAll(t, d) // let every handle expire: exercises expiry
		}
	}
	seqTook := time.Since(start)
	d.waitFinished(seq.last, 10*time.Second)
	waitExpiredAll(t, d)
	checkGone(sample(seq.created, 200))

	// Concurrent: 8 clients.
	var next atomic.Int64
	clients := make([]*soakClient, 8)
	var wg sync.WaitGroup
	start = time.Now()
	var pauseMu sync.RWMutex // a pause for expiry holds the write lock
	var pauseAt [2]int64
	for i := range pauseAt {
		pauseAt[i] = int64(concN * (i + 1) / (pauses + 1))
	}
	for i := range clients {
		c := &soakClient{d: d}
		clients[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := next.Add(1)
				if n > int64(concN) {
					return
				}
				if n == pauseAt[0] || n == pauseAt[1] {
					pauseMu.Lock()
					waitExpiredAll(t, d)
					pauseMu.Unlock()
				}
				pauseMu.RLock()
				c.createOne(&counts, &errs)
				pauseMu.RUnlock()
			}
		}()
	}
	wg.Wait()
	concTook := time.Since(start)
	for _, c := range clients {
		if c.last != "" {
			d.waitFinished(c.last, 10*time.Second)
		}
	}

	// Accounting, once nothing runs.
	ok, _ := poll(10*time.Second, 20*time.Millisecond, func() (bool, string) {
		m, err := d.metrics()
		return err == nil && m["sandbox_runtime_commands_running"] == 0, ""
	})
	if !ok {
		t.Errorf("commands_running did not return to 0")
	}
	list, err := d.list("")
	if err != nil {
		t.Fatal(err)
	}
	m := d.mustMetrics()
	started := m["sandbox_runtime_commands_started_total"]
	finished := finishedTotal(m)
	exited := m[`sandbox_runtime_commands_finished_total{state="exited"}`]
	evicted := m["sandbox_runtime_handles_evicted_total"]
	expired := m["sandbox_runtime_handles_expired_total"]
	retainedG := m["sandbox_runtime_commands_retained"]
	created := float64(counts.created.Load())
	figure(t, "soak: created %v (sequential %d in %v = %.0f/s; concurrent x8 %d in %v = %.0f/s); 429 retries %d; 5xx %d",
		created, seqN, seqTook.Round(time.Millisecond), float64(seqN)/seqTook.Seconds(),
		concN, concTook.Round(time.Millisecond), float64(concN)/concTook.Seconds(), counts.refused429.Load(), counts.status5xx.Load())
	figure(t, "soak: started_total %v finished_total %v (exited %v) evicted %v + expired %v + retained %v = %v; /v1/commands lists %d",
		started, finished, exited, evicted, expired, retainedG, evicted+expired+retainedG, len(list))
	var all []time.Duration
	for _, c := range append(clients, seq, warm) {
		all = append(all, c.lat...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	if len(all) > 0 {
		figure(t, "soak: create latency p50 %v p99 %v max %v", all[len(all)/2], all[len(all)*99/100], all[len(all)-1])
	}
	if counts.status5xx.Load() != 0 {
		t.Errorf("%d answers were 5xx", counts.status5xx.Load())
	}
	if started != created {
		t.Errorf("started_total %v; want %v successful creates", started, created)
	}
	if finished != started || exited != started {
		t.Errorf("finished_total %v (exited %v); want %v", finished, exited, started)
	}
	if evicted+expired+retainedG != started {
		t.Errorf("evicted %v + expired %v + retained %v = %v; want started %v", evicted, expired, retainedG, evicted+expired+retainedG, started)
	}
	if float64(len(list)) != retainedG {
		t.Errorf("/v1/commands lists %d; commands_retained says %v", len(list), retainedG)
	}
	if evicted == 0 || expired == 0 {
		t.Errorf("the soak did not exercise both eviction (%v) and expiry (%v)", evicted, expired)
	}
	// Only recent drops are remembered (the tombstone set is bounded, 4096
	// by default): sample each client's last 250 ids (8 x 250 = 2000).
	for _, c := range clients {
		checkGone(sample(c.created[max(0, len(c.created)-250):], 10))
	}
	figure(t, "soak: dropped ids sampled (sequential 200, concurrent 80): %v; any 404 or 200 would be an error", reasons)

	waitExpiredAll(t, d)
	after, flat := d.settle(base, 3, 10*time.Second)
	rss1 := rssKB(d.pid)
	figure(t, "soak: goroutines %d -> %d, fds %d -> %d, RSS %d -> %d KiB", base.goroutines, after.goroutines, base.fds, after.fds, rss0, rss1)
	if !flat {
		t.Errorf("resources not flat: %+v -> %+v", base, after)
	}
	errs.report(t, "soak errors")
	d.assertCleanLogs()
}

// waitExpiredAll polls until no handle is retained (every one expired).
func waitExpiredAll(t *testing.T, d *daemon) {
	ok, msg := poll(10*time.Second, 50*time.Millisecond, func() (bool, string) {
		l, err := d.list("")
		if err != nil {
			return false, err.Error()
		}
		return len(l) == 0, fmt.Sprintf("%d retained", len(l))
	})
	if !ok {
		t.Errorf("handles did not expire: %s", msg)
	}
}

// sample returns up to n ids spread over ids, preferring recent ones (the
// tombstone set is bounded, so only recent drops are remembered).
func sample(ids []string, n int) []string {
	if len(ids) > 2000 {
		ids = ids[len(ids)-2000:]
	}
	if len(ids) <= n {
		return ids
	}
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, ids[i*len(ids)/n])
	}
	return out
}
