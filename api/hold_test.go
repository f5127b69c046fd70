package api

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// holdDial dials with a 32 KiB receive buffer, set before the connection is
// made (as a slow client's would be), and, when rate > 0, reads at about
// rate bytes per second: the client, not the kernel, paces the stream.
func holdDial(rate float64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return holdDialBuf(rate, 32<<10)
}

// holdDialBuf is holdDial with a receive buffer of rcvbuf bytes.
func holdDialBuf(rate float64, rcvbuf int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf) })
		}}
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil || rate <= 0 {
			return conn, err
		}
		return &throttledConn{Conn: conn, rate: rate}, nil
	}
}

// holdServer is a test server with a 64 KiB ring whose runtime log lines
// (`command finished`, with output_held) the test can read.
func holdServer(t *testing.T) (*testServer, *observer.ObservedLogs) {
	core, logged := observer.New(zap.InfoLevel)
	ts := newTestServer(t, func(c *runtime.Config, o *Options) {
		c.OutputLimit = 64 << 10
		c.Logger = zap.New(core)
		atQuietAPI(c, o)
	})
	return ts, logged
}

// holdResult is what a client of an event stream got: the output bytes
// (checked contiguous), the gap events' dropped bytes, and the state of the
// exit event ("" if the stream ended otherwise).
type holdResult struct {
	out     []byte
	dropped int64
	state   string
}

// holdRead reads an NDJSON event stream to its last line.
func holdRead(t *testing.T, resp *http.Response) (r holdResult) {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("stream answered %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 256<<10), 1<<20)
	var next int64
	for sc.Scan() {
		var ev atEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %.200s: %v", sc.Bytes(), err)
		}
		switch ev.Type {
		case "output":
			if *ev.Cursor != next {
				t.Fatalf("output at cursor %d; want %d", *ev.Cursor, next)
			}
			b := []byte(*ev.Data)
			if ev.Encoding == "base64" {
				b, _ = base64.StdEncoding.DecodeString(*ev.Data)
			}
			r.out = append(r.out, b...)
		case "gap":
			r.dropped += *ev.DroppedBytes
		case "exit":
			r.state = string(ev.status(t).State)
			return r
		case "end":
			return r
		}
		next = *ev.NextCursor
	}
	t.Fatalf("the stream ended without a last line (%v) after %d bytes", sc.Err(), len(r.out))
	return r
}

// TestHoldingStreamsLoseNothing: a command writes 3 MiB as fast as `yes`
// can into a 64 KiB ring while its one client reads at 3 MB/s through a
// small receive buffer. With ?hold= the client gets every byte, no gap, on
// each transport that takes it: GET …/output, POST ?stream=true (whose
// hold is made before the process starts: the command is not gated) and
// the WebSocket attach. Without it (the control) the same client loses
// most of the output, so the test tells a hold from none.
func TestHoldingStreamsLoseNothing(t *testing.T) {
	ts, logged := holdServer(t)
	const n, rate = 3 << 20, 3e6
	argv, want := atGenerator(n)
	gated := []string{"sh", "-c", "read x; " + argv[2]}
	client := &http.Client{Transport: &http.Transport{DialContext: holdDial(rate), DisableKeepAlives: true}}
	get := func(url string) *http.Response {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	output := func(t *testing.T, query string) holdResult {
		st := atCreate(t, ts, string(marshal(map[string]any{"argv": gated, "stdin": true})))
		// The headers come once the stream (and its hold) is open.
		resp := get(ts.URL + "/v1/commands/" + st.CommandID + "/output?max_wait=60" + query)
		atDo(t, "POST", ts.URL+"/v1/commands/"+st.CommandID+"/stdin", `{"data":"go\n"}`, nil)
		return holdRead(t, resp)
	}
	check := func(t *testing.T, r holdResult) {
		t.Helper()
		if r.state != "exited" || r.dropped != 0 || string(r.out) != want {
			t.Fatalf("state %q, %d bytes dropped, %d of %d bytes received (equal %v)", r.state, r.dropped, len(r.out), n, string(r.out) == want)
		}
	}

	t.Run("output", func(t *testing.T) { check(t, output(t, "&hold=1")) })
	t.Run("create", func(t *testing.T) {
		body := strings.NewReader(string(marshal(map[string]any{"argv": argv})))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/commands?stream=true&max_wait=60&hold=1", body)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		check(t, holdRead(t, resp))
	})
	t.Run("attach", func(t *testing.T) {
		st := atCreate(t, ts, string(marshal(map[string]any{"argv": gated, "stdin": true})))
		c := atDialWith(t, &websocket.Dialer{ReadBufferSize: 4 << 10, NetDialContext: holdDial(rate)}, ts, st.CommandID, "hold=1")
		c.send(`{"type":"stdin","data":"go\n"}`)
		end := c.readExit() // a gap frame fails the test (atConn.read)
		check(t, holdResult{out: c.out, state: string(end.State)})
	})
	t.Run("control", func(t *testing.T) {
		r := output(t, "")
		if r.state != "exited" || r.dropped == 0 {
			t.Fatalf("without a hold: state %q, %d bytes dropped: the slow client kept up, so the test cannot tell a hold from none", r.state, r.dropped)
		}
		t.Logf("without a hold: %d of %d bytes received, %d dropped", len(r.out), n, r.dropped)
	})
	for _, e := range logged.FilterMessage("command finished").All() {
		t.Logf("command finished: output_held %v", e.ContextMap()["output_held"])
	}
}

// TestHoldOfAReaderThatStopsLapses: a client that asks for a hold and never
// reads holds the command back once, for its hold, and not again: `yes`
// writing 8 MiB into a 64 KiB ring finishes, and its log line's
// output_held is about the hold (without the lapse it would be held 0.2 s
// per 64 KiB: 25 s).
func TestHoldOfAReaderThatStopsLapses(t *testing.T) {
	ts, logged := holdServer(t)
	const hold = 200 * time.Millisecond
	st := atCreate(t, ts, `{"argv":["sh","-c","read x; yes | head -c 8388608"],"stdin":true,"timeout":120}`)
	client := &http.Client{Transport: &http.Transport{DialContext: holdDial(0), DisableKeepAlives: true}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/commands/%s/output?hold=%g", ts.URL, st.CommandID, hold.Seconds()), nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() // never read
	atDo(t, "POST", ts.URL+"/v1/commands/"+st.CommandID+"/stdin", `{"data":"go\n"}`, nil)
	if got := atGet(t, ts, st.CommandID, 60); got.State != "exited" {
		t.Fatalf("the command is %s after 60 s; want exited", got.State)
	}
	// The line follows the end (Done) by a moment.
	atWaitFor(t, "the command finished line", func() bool { return logged.FilterMessage("command finished").Len() > 0 })
	lines := logged.FilterMessage("command finished").All()
	held, _ := lines[0].ContextMap()["output_held"].(time.Duration)
	if held < hold || held > 10*hold {
		t.Fatalf("output_held %v; want one hold of %v (a lapse), not one per eviction", held, hold)
	}
	t.Logf("a reader that never reads held the command %v in all (hold %v)", held, hold)
}

// TestHoldQuery: hold is a number of seconds, refused when negative or not
// a number on every route that takes it, clamped above 1 s, and refused on
// a create without stream=true.
func TestHoldQuery(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	st := atCreate(t, ts, `{"argv":["true"]}`)
	atGet(t, ts, st.CommandID, 10)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/commands/" + st.CommandID + "/output?hold=", ""},
		{"GET", "/v1/commands/" + st.CommandID + "/output?hold=-1", ""},
		{"GET", "/v1/commands/" + st.CommandID + "/output?hold=soon", ""},
		{"GET", "/v1/commands/" + st.CommandID + "/attach?hold=-0.5", ""},
		{"POST", "/v1/commands?stream=true&hold=NaN", `{"argv":["true"]}`},
		{"POST", "/v1/commands?hold=0.5", `{"argv":["true"]}`},
		{"POST", "/v1/commands?stream=false&hold=0", `{"argv":["true"]}`},
	} {
		code, b := atDo(t, c.method, ts.URL+c.path, c.body, nil)
		if code != http.StatusBadRequest || !strings.Contains(string(b), `\"hold\"`) {
			t.Errorf("%s %s: %d %s; want 400 naming hold", c.method, c.path, code, b)
		}
	}
	code, b := atDo(t, "GET", ts.URL+"/v1/commands/"+st.CommandID+"/output?hold=30", "", nil)
	if code != http.StatusOK || !strings.Contains(string(b), `"type":"exit"`) {
		t.Fatalf("hold=30 (clamped): %d %s", code, b)
	}
	code, b = atDo(t, "POST", ts.URL+"/v1/commands?stream=true&hold=0.25", `{"argv":["echo","hi"]}`, nil)
	if code != http.StatusCreated || !strings.Contains(string(b), `"data":"hi\n"`) {
		t.Fatalf("create with hold: %d %s", code, b)
	}
}

// TestHoldOfASlowSteadyReader: a client reading at 40 KB/s through an
// 8 KiB receive buffer, far slower than `yes`, keeps a 2 s hold for
// 128 KiB through a 64 KiB ring on /output and /attach: the stream sends a
// holding stream's output 16 KiB at a time (0.4 s at that rate), each
// restarting the bound, so the command is paced and nothing is lost.
// (That the bound restarts at each Advance, rather than running from the
// wait's start, is TestHoldSlowSteadyReaderKeepsItsHold in ringbuf.)
func TestHoldOfASlowSteadyReader(t *testing.T) {
	ts := newTestServer(t, func(c *runtime.Config, o *Options) {
		c.OutputLimit = 64 << 10
		atQuietAPI(c, o)
	})
	const n, rate, rcvbuf = 128 << 10, 40e3, 8 << 10
	argv, want := atGenerator(n)
	gated := []string{"sh", "-c", "read x; " + argv[2]}
	t.Run("output", func(t *testing.T) {
		st := atCreate(t, ts, string(marshal(map[string]any{"argv": gated, "stdin": true})))
		client := &http.Client{Transport: &http.Transport{DialContext: holdDialBuf(rate, rcvbuf), DisableKeepAlives: true}}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/commands/"+st.CommandID+"/output?max_wait=60&hold=2", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		atDo(t, "POST", ts.URL+"/v1/commands/"+st.CommandID+"/stdin", `{"data":"go\n"}`, nil)
		if r := holdRead(t, resp); r.state != "exited" || r.dropped != 0 || string(r.out) != want {
			t.Fatalf("state %q, %d bytes dropped, %d of %d bytes (equal %v)", r.state, r.dropped, len(r.out), n, string(r.out) == want)
		}
	})
	t.Run("attach", func(t *testing.T) {
		st := atCreate(t, ts, string(marshal(map[string]any{"argv": gated, "stdin": true})))
		c := atDialWith(t, &websocket.Dialer{ReadBufferSize: 4 << 10, NetDialContext: holdDialBuf(rate, rcvbuf)}, ts, st.CommandID, "hold=2")
		c.send(`{"type":"stdin","data":"go\n"}`)
		if end := c.readExit(); end.State != "exited" || string(c.out) != want { // a gap frame fails the test
			t.Fatalf("state %s, %d of %d bytes", end.State, len(c.out), n)
		}
	})
}

// TestHoldsPerCommandRefused: a command takes 8 holding streams at once; a
// ninth is 409 conflict on /output and, before the upgrade, on /attach,
// and the stream opens without hold.
func TestHoldsPerCommandRefused(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	st := atCreate(t, ts, `{"argv":["sleep","30"]}`)
	defer atDo(t, "POST", ts.URL+"/v1/commands/"+st.CommandID+"/kill", "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range runtime.MaxHolds {
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/commands/%s/output?hold=1&max_wait=30", ts.URL, st.CommandID), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("holding stream %d: %v %v", i, resp, err)
		}
		defer resp.Body.Close()
	}
	code, b := atDo(t, "GET", ts.URL+"/v1/commands/"+st.CommandID+"/output?hold=1&follow=false", "", nil)
	if code != http.StatusConflict || !strings.Contains(string(b), "holding streams") {
		t.Fatalf("a ninth holding stream: %d %s; want 409", code, b)
	}
	code, b = atDo(t, "GET", ts.URL+"/v1/commands/"+st.CommandID+"/attach?hold=1", "", http.Header{
		"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}})
	if code != http.StatusConflict || !strings.Contains(string(b), "holding streams") {
		t.Fatalf("a ninth holding attach: %d %s; want 409 before the upgrade", code, b)
	}
	if code, _ := atDo(t, "GET", ts.URL+"/v1/commands/"+st.CommandID+"/output?follow=false", "", nil); code != http.StatusOK {
		t.Fatalf("without hold: %d", code)
	}
}
