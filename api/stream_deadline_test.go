package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// throttledReader reads r at about rate bytes per second: the pace of a
// slow client (the sleeps pace the reading; nothing waits on them).
type throttledReader struct {
	r     io.Reader
	rate  float64
	start time.Time
	n     int64
}

func (t *throttledReader) Read(p []byte) (int, error) {
	if t.start.IsZero() {
		t.start = time.Now()
	}
	p = p[:min(len(p), 4<<10)]
	n, err := t.r.Read(p)
	t.n += int64(n)
	if d := time.Until(t.start.Add(time.Duration(float64(t.n) / t.rate * float64(time.Second)))); d > 0 {
		time.Sleep(d)
	}
	return n, err
}

// slowStream opens GET /output with max_wait and reads it at rate bytes
// per second to its end; it returns how long after the request the last
// line arrived, and the last line.
func slowStream(t *testing.T, ts *testServer, id string, maxWait float64, rate float64) (time.Duration, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/commands/"+id+"/output?cursor=0&max_wait="+strconv.FormatFloat(maxWait, 'f', -1, 64), nil)
	// A connection of its own: a kept-alive connection that a faster
	// reader used before has a receive window grown by autotuning, and what
	// is in flight in it reaches the reader after max_wait whatever the
	// daemon does (docs/protocol.md §4); the bound tested is the daemon's.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(&throttledReader{r: resp.Body, rate: rate}, 64<<10)
	var last []byte
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			last = line
		}
		if err != nil {
			break
		}
	}
	return time.Since(start), last
}

// TestStreamMaxWaitSlowReader: against `yes`, a stream ends within 1 s of
// max_wait whatever the reader's speed, with its `end` line.
func TestStreamMaxWaitSlowReader(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	st := atCreate(t, ts, `{"argv":["yes"],"timeout":120}`)
	defer atDo(t, "POST", ts.URL+"/v1/commands/"+st.CommandID+"/kill", "", nil)
	for _, rate := range []float64{2e6, 300e3} {
		took, last := slowStream(t, ts, st.CommandID, 1, rate)
		var ev atEvent
		json.Unmarshal(bytes.TrimSpace(last), &ev)
		t.Logf("reader at %.0f KB/s: stream took %v; last line %.100s", rate/1e3, took, last)
		if ev.Type != "end" || ev.Reason != "max_wait" {
			t.Errorf("reader at %.0f KB/s: last line %.200s; want end max_wait", rate/1e3, last)
		}
		if took > 2*time.Second+500*time.Millisecond {
			t.Errorf("reader at %.0f KB/s: the max_wait=1 stream lasted %v; want at most 1 s past max_wait (with margin)", rate/1e3, took)
		}
	}
}

// TestStreamUnreadEnds: streams whose clients never read still end: every
// write has a deadline, so 50 of them against `yes` with max_wait=1 leave
// stream_clients within max_wait + streamEndGrace (plus a margin for a
// loaded machine), not when the command ends.
func TestStreamUnreadEnds(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	st := atCreate(t, ts, `{"argv":["yes"],"timeout":120}`)
	defer atDo(t, "POST", ts.URL+"/v1/commands/"+st.CommandID+"/kill", "", nil)
	const n = 50
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: n + 1}}
	defer client.CloseIdleConnections()
	start := time.Now()
	for range n {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/commands/"+st.CommandID+"/output?max_wait=1", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close() // never read
	}
	opened := time.Since(start)
	deadline := start.Add(opened + time.Second + streamEndGrace + 3*time.Second)
	for {
		s, _ := metScrape(t, ts)
		if s["sandbox_runtime_stream_clients"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after opening %d unread max_wait=1 streams (in %v), stream_clients = %v; want 0", time.Since(start), n, opened, s["sandbox_runtime_stream_clients"])
		}
		time.Sleep(20 * time.Millisecond) // polling a gauge the test cannot be told about
	}
	t.Logf("%d unread streams ended %v after the first opened (opening took %v)", n, time.Since(start), opened)
}

// TestStreamShutdownUnread: once shutdown ends the streams (EndStreams), a
// stream whose client does not read is cut within streamShutdownGrace,
// while one that reads, slowly, gets its `end` line (shutting_down).
func TestStreamShutdownUnread(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	st := atCreate(t, ts, `{"argv":["yes"],"timeout":120}`)
	defer atDo(t, "POST", ts.URL+"/v1/commands/"+st.CommandID+"/kill", "", nil)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 10}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 5 {
		req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/commands/"+st.CommandID+"/output?max_wait=60", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close() // never read
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/commands/"+st.CommandID+"/output?max_wait=60", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	last := make(chan []byte, 1)
	go func() {
		br := bufio.NewReaderSize(&throttledReader{r: resp.Body, rate: 300e3}, 64<<10)
		var l []byte
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 && line[len(line)-1] == '\n' {
				l = line
			}
			if err != nil {
				last <- l
				return
			}
		}
	}()
	metWaitGauge(t, ts, "stream_clients", 6)
	start := time.Now()
	ts.EndStreams()
	for {
		s, _ := metScrape(t, ts)
		if s["sandbox_runtime_stream_clients"] == 0 {
			break
		}
		if time.Since(start) > streamShutdownGrace+2*time.Second {
			t.Fatalf("%v after EndStreams, stream_clients = %v; want 0", time.Since(start), s["sandbox_runtime_stream_clients"])
		}
		time.Sleep(20 * time.Millisecond) // polling a gauge the test cannot be told about
	}
	took := time.Since(start)
	var ev atEvent
	l := <-last
	json.Unmarshal(bytes.TrimSpace(l), &ev)
	if ev.Type != "end" || ev.Reason != "shutting_down" {
		t.Errorf("the slow reader's last line: %.200s; want end shutting_down", l)
	}
	t.Logf("streams gone %v after EndStreams", took)
}
