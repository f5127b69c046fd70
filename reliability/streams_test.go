//go:build reliability && linux

package reliability

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Streams against the built daemon: deadlines that hold whatever the
// reader's speed, streams nobody reads, and shutdown with both (issue 10
// items 4 and 7, issue 11 item 2).

// paced reads r at about rate bytes per second (the sleeps pace a slow
// client; nothing waits on them).
type paced struct {
	r     io.Reader
	rate  float64
	start time.Time
	n     int64
}

func (p *paced) Read(b []byte) (int, error) {
	if p.start.IsZero() {
		p.start = time.Now()
	}
	n, err := p.r.Read(b[:min(len(b), 4<<10)])
	p.n += int64(n)
	if d := time.Until(p.start.Add(time.Duration(float64(p.n) / p.rate * float64(time.Second)))); d > 0 {
		time.Sleep(d)
	}
	return n, err
}

// openStream opens GET …/output with query and returns the response once
// its headers arrived.
func openStream(t *testing.T, ctx context.Context, client *http.Client, d *daemon, id, query string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", d.url+"/v1/commands/"+id+"/output?"+query, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("open stream %s: %v", query, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("open stream %s: status %d", query, resp.StatusCode)
	}
	return resp
}

// lastLine reads a stream to its end and returns its last complete line.
func lastLine(r io.Reader) (event, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var last event
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			var e event
			if json.Unmarshal(line, &e) == nil {
				last = e
			}
		}
		if err == io.EOF {
			return last, nil
		}
		if err != nil {
			return last, err
		}
	}
}

// TestStreamSlowReaderMaxWait: against `yes`, a max_wait=1 stream read at
// 2 MB/s and at 300 KB/s ends with its `end` line within 1 s of max_wait
// (the assertion allows 1 s more for a loaded machine). Before: 3.0 s and
// 13.9 s (reported), never for slower readers.
func TestStreamSlowReaderMaxWait(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	st := d.mustCreate(map[string]any{"argv": []string{"yes"}, "timeout": 120})
	defer d.kill(st.CommandID)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, rate := range []float64{2e6, 300e3} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		start := time.Now()
		resp := openStream(t, ctx, client, d, st.CommandID, "cursor=0&max_wait=1")
		last, err := lastLine(&paced{r: resp.Body, rate: rate})
		took := time.Since(start)
		resp.Body.Close()
		cancel()
		figure(t, "stream max_wait=1 against yes, reader at %.0f KB/s: ended after %v with %s %s", rate/1e3, took.Round(time.Millisecond), last.Type, last.Reason)
		if err != nil || last.Type != "end" || last.Reason != "max_wait" {
			t.Errorf("reader at %.0f KB/s: last line %+v, %v; want end max_wait", rate/1e3, last, err)
		}
		if took > 3*time.Second {
			t.Errorf("reader at %.0f KB/s: a max_wait=1 stream lasted %v; want about 2 s at most", rate/1e3, took)
		}
	}
}

// TestStreamsUnreadLeave: 50 streams whose clients never read, with
// max_wait=1, leave stream_clients within seconds (before: still there 20 s
// later), and unread WebSocket attachments cost a bounded amount each.
func TestStreamsUnreadLeave(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	st := d.mustCreate(map[string]any{"argv": []string{"yes"}, "timeout": 120})
	defer d.kill(st.CommandID)
	const n = 50
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: n + 1}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	for range n {
		resp := openStream(t, ctx, client, d, st.CommandID, "max_wait=1")
		defer resp.Body.Close() // never read
	}
	opened := time.Since(start)
	ok, msg := poll(opened+10*time.Second, 50*time.Millisecond, func() (bool, string) {
		m, err := d.metrics()
		if err != nil {
			return false, err.Error()
		}
		v := m["sandbox_runtime_stream_clients"]
		return v == 0, "stream_clients = " + strconv.FormatFloat(v, 'f', -1, 64)
	})
	took := time.Since(start)
	figure(t, "%d unread max_wait=1 streams against yes (opened in %v): stream_clients 0 after %v", n, opened.Round(time.Millisecond), took.Round(time.Millisecond))
	if !ok {
		t.Fatalf("%d unread max_wait=1 streams: %s after %v", n, msg, took)
	}
	if took > opened+4*time.Second {
		t.Errorf("%d unread max_wait=1 streams took %v to leave (opening took %v); want about max_wait + 1 s", n, took, opened)
	}

	// WebSocket clients that never read: RSS per connection stays bounded
	// (reported: 300 of them cost +223 MB).
	nws := scale(300, 100)
	base := rssKB(d.pid)
	var conns []*websocket.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	dialer := websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 4 << 10}
	for range nws {
		c, _, err := dialer.Dial("ws://"+d.addr+"/v1/commands/"+st.CommandID+"/attach", nil)
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		conns = append(conns, c)
	}
	// Sample RSS while they are attached (they are dropped 10 s after their
	// writers block); the bound must hold at every sample.
	peak := base
	poll(3*time.Second, 100*time.Millisecond, func() (bool, string) {
		peak = max(peak, rssKB(d.pid))
		return false, ""
	})
	per := (peak - base) * 1024 / int64(nws)
	figure(t, "%d unread WebSocket attachments to yes: RSS %d -> %d KiB, %d KiB per connection", nws, base, peak, per>>10)
	if !raceDaemon && per > 512<<10 {
		t.Errorf("an unread attachment costs %d KiB of RSS; want at most 512 KiB", per>>10)
	}
}

// TestShutdownUnreadStreams: with a 2 s shutdown budget, 50 NDJSON streams
// and 10 WebSocket attachments that never read do not stretch the shutdown
// (reported: 25 s; 2.2 s here before the fix), and streams that are read,
// slowly too, still get their final line.
func TestShutdownUnreadStreams(t *testing.T) {
	d := startDaemon(t, daemonConfig{env: map[string]string{
		"SANDBOX_SHUTDOWN_TIMEOUT_SECONDS": "2",
		"SANDBOX_KILL_GRACE_SECONDS":       "0.5",
	}})
	var ids []string
	for range 4 {
		ids = append(ids, d.mustCreate(map[string]any{"argv": []string{"yes"}, "timeout": 120}).CommandID)
	}
	ids = append(ids, d.mustCreate(map[string]any{"argv": []string{"sh", "-c", "while :; do echo tick; sleep 0.05; done"}, "timeout": 120}).CommandID)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 100}}
	for i := range 50 {
		resp := openStream(t, ctx, client, d, ids[i%4], "max_wait=60")
		defer resp.Body.Close() // never read
	}
	for i := range 10 {
		c, _, err := websocket.DefaultDialer.Dial("ws://"+d.addr+"/v1/commands/"+ids[i%4]+"/attach", nil)
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		defer c.Close() // never read
	}
	// Streams that are read, of the quiet command and, at 300 KB/s, of
	// `yes`: each must end with a final line (exit terminated, or end
	// shutting_down) within the budget.
	const nRead = 6
	lasts := make([]event, nRead)
	errs := make([]error, nRead)
	var wg sync.WaitGroup
	for i := range nRead {
		id := ids[4]
		if i%2 == 1 {
			id = ids[i%4]
		}
		resp := openStream(t, ctx, client, d, id, "max_wait=60")
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer resp.Body.Close()
			var r io.Reader = resp.Body
			if i%2 == 1 {
				r = &paced{r: resp.Body, rate: 300e3}
			}
			lasts[i], errs[i] = lastLine(r)
		}()
	}
	code, took, err := d.stop(30 * time.Second)
	wg.Wait()
	figure(t, "shutdown with a 2 s budget, 50 unread streams and 10 unread attachments: exit %d after %v", code, took.Round(time.Millisecond))
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v; want 0", code, err)
	}
	if took > 2*time.Second {
		t.Errorf("shutdown took %v with a 2 s budget; want within it", took)
	}
	for i := range nRead {
		l := lasts[i]
		final := (l.Type == "exit" && l.Status != nil && l.Status.State == "terminated") || (l.Type == "end" && l.Reason == "shutting_down")
		if !final {
			t.Errorf("read stream %d: last line %+v (%v); want exit terminated or end shutting_down", i, l, errs[i])
		}
	}
}
