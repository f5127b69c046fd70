package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// Helpers of the attach, auth and metrics tests are prefixed "at" so that
// they do not collide with the helpers of other test files.

// atTimeout bounds every single wait of these tests.
const atTimeout = 20 * time.Second

// atQuietAPI keeps the api logger away from t: the request log line of an
// upgraded connection is written after its attachment has finished, which
// can be after the test has returned (testing panics on a late t.Log).
func atQuietAPI(_ *runtime.Config, o *Options) { o.Logger = zap.NewNop() }

// atDo sends one HTTP request and returns the status and body.
func atDo(t testing.TB, method, url, body string, hdr http.Header) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), atTimeout)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return resp.StatusCode, b
}

// atStatus is the status object (the one wire definition).
type atStatus = wire.Status

// atCreate starts a command from a JSON create body.
func atCreate(t testing.TB, ts *testServer, body string) atStatus {
	t.Helper()
	code, b := atDo(t, "POST", ts.URL+"/v1/commands", body, nil)
	if code != http.StatusCreated {
		t.Fatalf("create %s: got %d %s; want 201", body, code, b)
	}
	var st atStatus
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// atGet returns the status of id, waiting up to wait seconds for its end.
func atGet(t testing.TB, ts *testServer, id string, wait int) atStatus {
	t.Helper()
	code, b := atDo(t, "GET", ts.URL+"/v1/commands/"+id+"?wait="+strconv.Itoa(wait), "", nil)
	if code != http.StatusOK {
		t.Fatalf("get %s: got %d %s; want 200", id, code, b)
	}
	var st atStatus
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// atWSURL is the attach URL of id with an optional raw query.
func atWSURL(ts *testServer, id, query string) string {
	u := "ws" + strings.TrimPrefix(ts.URL, "http") + "/v1/commands/" + id + "/attach"
	if query != "" {
		u += "?" + query
	}
	return u
}

// atConn is a test client of one attachment.
type atConn struct {
	t    testing.TB
	ws   *websocket.Conn
	next int64  // next_cursor of the last event read
	out  []byte // output bytes received, in cursor order
}

// atDial attaches to id and fails the test unless the upgrade succeeds.
func atDial(t testing.TB, ts *testServer, id, query string) *atConn {
	t.Helper()
	return atDialWith(t, websocket.DefaultDialer, ts, id, query)
}

func atDialWith(t testing.TB, d *websocket.Dialer, ts *testServer, id, query string) *atConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), atTimeout)
	defer cancel()
	ws, resp, err := d.DialContext(ctx, atWSURL(ts, id, query), nil)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("attach %s?%s: %v (status %d)", id, query, err, status)
	}
	if got := resp.Header.Get("Sandbox-Runtime-Version"); got != "test" {
		t.Errorf("upgrade response Sandbox-Runtime-Version: got %q; want %q", got, "test")
	}
	t.Cleanup(func() { ws.Close() })
	c := &atConn{t: t, ws: ws}
	if q, ok := strings.CutPrefix(query, "cursor="); ok {
		c.next, _ = strconv.ParseInt(q, 10, 64)
	}
	return c
}

// atEvent is one server frame, as the client sees it. It is not wire.Event:
// Data and NextCursor are pointers so that the tests see a missing field,
// and Status stays raw until status() decodes it as wire.Status.
type atEvent struct {
	Type         string            `json:"type"`
	Stream       string            `json:"stream"`
	Cursor       *int64            `json:"cursor"`
	Data         *string           `json:"data"`
	Encoding     string            `json:"encoding"`
	DroppedBytes *int64            `json:"dropped_bytes"`
	Reason       string            `json:"reason"`
	Status       json.RawMessage   `json:"status"`
	Error        *wire.ErrorDetail `json:"error"`
	NextCursor   *int64            `json:"next_cursor"`
}

func (e atEvent) status(t testing.TB) atStatus {
	t.Helper()
	var st atStatus
	if err := json.Unmarshal(e.Status, &st); err != nil {
		t.Fatalf("%s event status: %v", e.Type, err)
	}
	return st
}

// read returns the next frame as an event. Output events are checked for
// contiguity (their cursor is the previous next_cursor) and collected.
func (c *atConn) read() atEvent {
	c.t.Helper()
	c.ws.SetReadDeadline(time.Now().Add(atTimeout))
	kind, data, err := c.ws.ReadMessage()
	if err != nil {
		c.t.Fatalf("reading a frame: %v", err)
	}
	if kind != websocket.TextMessage {
		c.t.Fatalf("frame type %d; want a text frame", kind)
	}
	var ev atEvent
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		c.t.Fatalf("frame %.200s: %v", data, err)
	}
	if ev.NextCursor == nil {
		c.t.Fatalf("frame %.200s has no next_cursor", data)
	}
	switch ev.Type {
	case "output":
		if ev.Cursor == nil || ev.Data == nil {
			c.t.Fatalf("output frame %.200s lacks cursor or data", data)
		}
		if *ev.Cursor != c.next {
			c.t.Fatalf("output cursor: got %d; want %d (the previous next_cursor)", *ev.Cursor, c.next)
		}
		b := []byte(*ev.Data)
		if ev.Encoding == "base64" {
			if b, err = base64.StdEncoding.DecodeString(*ev.Data); err != nil {
				c.t.Fatalf("output frame: bad base64: %v", err)
			}
		}
		if want := *ev.Cursor + int64(len(b)); *ev.NextCursor != want {
			c.t.Fatalf("output next_cursor: got %d; want cursor+len = %d", *ev.NextCursor, want)
		}
		c.out = append(c.out, b...)
	case "gap":
		c.t.Fatalf("unexpected gap frame %s", data)
	case "error":
		if *ev.NextCursor != c.next {
			c.t.Errorf("error event next_cursor: got %d; want %d (that of the frame before)", *ev.NextCursor, c.next)
		}
	}
	c.next = *ev.NextCursor
	return ev
}

// send writes v as a JSON text frame.
func (c *atConn) send(v any) {
	c.t.Helper()
	var data []byte
	if s, ok := v.(string); ok {
		data = []byte(s)
	} else {
		data = marshal(v)
	}
	c.ws.SetWriteDeadline(time.Now().Add(atTimeout))
	if err := c.ws.WriteMessage(websocket.TextMessage, data); err != nil {
		c.t.Fatalf("sending %s: %v", data, err)
	}
}

// readOutput reads frames until at least n output bytes have arrived.
func (c *atConn) readOutput(n int) {
	c.t.Helper()
	for len(c.out) < n {
		if ev := c.read(); ev.Type != "output" {
			c.t.Fatalf("got a %s frame (%+v) after %d of %d output bytes; want output", ev.Type, ev, len(c.out), n)
		}
	}
}

// readExit reads frames until the exit event and returns its status.
func (c *atConn) readExit() atStatus {
	c.t.Helper()
	for {
		ev := c.read()
		switch ev.Type {
		case "output":
		case "exit":
			st := ev.status(c.t)
			if *ev.NextCursor != st.NextCursor {
				c.t.Errorf("exit event next_cursor %d; status next_cursor %d", *ev.NextCursor, st.NextCursor)
			}
			return st
		default:
			c.t.Fatalf("got a %s frame (%+v); want output or exit", ev.Type, ev)
		}
	}
}

// readError reads the next frame, which must be an error event with code.
func (c *atConn) readError(code string) {
	c.t.Helper()
	ev := c.read()
	if ev.Type != "error" || ev.Error == nil || ev.Error.Code != code || ev.Error.Message == "" {
		c.t.Fatalf("got %+v (error %+v); want an error event with code %q", ev, ev.Error, code)
	}
}

// expectClose reads the close frame, which must carry code.
func (c *atConn) expectClose(code int) {
	c.t.Helper()
	c.ws.SetReadDeadline(time.Now().Add(atTimeout))
	_, data, err := c.ws.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != code {
		c.t.Fatalf("got frame %.200q, error %v; want a close frame with code %d", data, err, code)
	}
}

// atWaitFor polls cond until it holds, failing after atTimeout. It is for
// conditions the test cannot be told about (another goroutine's teardown).
func atWaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(atTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// count is the number of open attachments (for tests).
func (cs *connSet) count() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.m)
}

func TestAttachCatStdin(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	st := atCreate(t, ts, `{"argv":["cat"],"stdin":true}`)
	c := atDial(t, ts, st.CommandID, "")

	c.send(map[string]any{"type": "stdin", "data": "hello\n"})
	c.readOutput(6)
	c.send(map[string]any{"type": "stdin", "data": base64.StdEncoding.EncodeToString([]byte("wörld\n")), "encoding": "base64"})
	c.readOutput(6 + 7)
	// Bytes that are not UTF-8 come back base64-encoded.
	c.send(map[string]any{"type": "stdin", "data": base64.StdEncoding.EncodeToString([]byte{0xff, 0xfe, '\n'}), "encoding": "base64"})
	c.readOutput(6 + 7 + 3)
	c.send(`{"type":"stdin","data":"bye","eof":true}`)
	end := c.readExit()
	if end.State != "exited" || end.ExitCode == nil || *end.ExitCode != 0 || !end.StdinClosed {
		t.Errorf("exit status: got state %s exit_code %v stdin_closed %v; want exited 0 true", end.State, end.ExitCode, end.StdinClosed)
	}
	want := "hello\nwörld\n\xff\xfe\nbye"
	if string(c.out) != want || end.NextCursor != int64(len(want)) {
		t.Errorf("output: got %q (next_cursor %d); want %q (%d)", c.out, end.NextCursor, want, len(want))
	}
	c.expectClose(websocket.CloseNormalClosure)
}

func TestAttachKillFrame(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	st := atCreate(t, ts, `{"argv":["sleep","30"]}`)
	c := atDial(t, ts, st.CommandID, "")
	c.send(`{"type":"kill"}`)
	end := c.readExit()
	if end.State != "cancelled" || end.Signal == nil || *end.Signal != "SIGTERM" {
		t.Errorf("exit status: got state %s signal %v; want cancelled SIGTERM", end.State, end.Signal)
	}
	c.expectClose(websocket.CloseNormalClosure)
}

func TestAttachSignalFrame(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	st := atCreate(t, ts, `{"argv":["sleep","30"]}`)
	c := atDial(t, ts, st.CommandID, "")
	c.send(`{"type":"signal","signal":"INT"}`)
	end := c.readExit()
	if end.State != "exited" || end.ExitCode == nil || *end.ExitCode != -2 || end.Signal == nil || *end.Signal != "SIGINT" {
		t.Errorf("exit status: got state %s exit_code %v signal %v; want exited -2 SIGINT", end.State, end.ExitCode, end.Signal)
	}
	c.expectClose(websocket.CloseNormalClosure)
}

// atSeq is the output of `seq from to`.
func atSeq(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.String()
}

func TestAttachReattachWithCursor(t *testing.T) {
	ts := newTestServer(t, func(c *runtime.Config, o *Options) {
		atQuietAPI(c, o)
		c.OutputLimit = 8 << 20 // everything stays retained: no gap
	})
	// The first half is printed at once; the second after a line on stdin,
	// so that the command is still running when the first client leaves.
	st := atCreate(t, ts, `{"argv":["sh","-c","seq 1 60000; read x; seq 60001 120000"],"stdin":true}`)
	want := atSeq(1, 120000)

	c1 := atDial(t, ts, st.CommandID, "")
	c1.readOutput(100 << 10) // a few frames, not all of the first half
	c1.ws.Close()            // mid-stream, without a close frame
	first := c1.out
	if int64(len(first)) != c1.next {
		t.Fatalf("first connection: %d bytes; last next_cursor %d", len(first), c1.next)
	}

	c2 := atDial(t, ts, st.CommandID, "cursor="+strconv.FormatInt(c1.next, 10))
	c2.send(`{"type":"stdin","data":"go\n","eof":true}`)
	end := c2.readExit()
	got := string(first) + string(c2.out)
	if got != want {
		t.Fatalf("first (%d bytes) + second (%d bytes) = %d bytes; want the %d bytes of seq 1 120000 exactly once", len(first), len(c2.out), len(got), len(want))
	}
	if end.State != "exited" || end.NextCursor != int64(len(want)) {
		t.Errorf("exit status: got %s next_cursor %d; want exited %d", end.State, end.NextCursor, len(want))
	}
	c2.expectClose(websocket.CloseNormalClosure)
}

func TestAttachRefusedBeforeUpgrade(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	st := atCreate(t, ts, `{"argv":["echo","hi"]}`)
	atGet(t, ts, st.CommandID, 20) // finished: next_cursor is 3
	for _, tc := range []struct {
		name, id, query string
		status          int
		code            string
	}{
		{"cursor beyond next_cursor", st.CommandID, "cursor=4", 400, "invalid_request"},
		{"negative cursor", st.CommandID, "cursor=-1", 400, "invalid_request"},
		{"non-numeric cursor", st.CommandID, "cursor=abc", 400, "invalid_request"},
		{"unknown parameter", st.CommandID, "follow=false", 400, "invalid_request"},
		{"unknown id", "9b2f6f0e-3f43-4c1e-9d49-0a8b9b0c6a11", "", 404, "not_found"},
		{"not a uuid", "nope", "", 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, resp, err := websocket.DefaultDialer.Dial(atWSURL(ts, tc.id, tc.query), nil)
			if err == nil {
				ws.Close()
				t.Fatal("the upgrade succeeded; want it refused")
			}
			if resp == nil {
				t.Fatalf("dial: %v; want an HTTP answer", err)
			}
			defer resp.Body.Close()
			var body errorBody
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("body: %v", err)
			}
			if resp.StatusCode != tc.status || body.Error.Code != tc.code {
				t.Errorf("got %d %+v; want %d %s", resp.StatusCode, body.Error, tc.status, tc.code)
			}
		})
	}
	// The cursor equal to next_cursor is valid: the exit event follows at once.
	c := atDial(t, ts, st.CommandID, "cursor=3")
	if end := c.readExit(); end.State != "exited" || len(c.out) != 0 {
		t.Errorf("attach at the end: got %s and %q; want exited and no output", end.State, c.out)
	}
	c.expectClose(websocket.CloseNormalClosure)
	// A plain GET (no upgrade) is refused with a JSON error too.
	code, b := atDo(t, "GET", ts.URL+"/v1/commands/"+st.CommandID+"/attach", "", nil)
	if code != http.StatusBadRequest || !strings.Contains(string(b), `"invalid_request"`) {
		t.Errorf("plain GET: got %d %s; want 400 invalid_request", code, b)
	}
}

func TestAttachBadClientFrames(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	st := atCreate(t, ts, `{"argv":["cat"],"stdin":true}`)
	c := atDial(t, ts, st.CommandID, "")
	c.send(`{"type":"stdin","data":"one\n"}`)
	c.readOutput(4) // the error events below repeat next_cursor 4

	for _, frame := range []string{
		`not json`,
		`{"type":"stdin","data":"x"} {"type":"kill"}`,
		`["stdin"]`,
		`{"data":"x"}`,
		`{"type":"launch"}`,
		`{"type":"stdin","data":"x","bogus":1}`,
		`{"type":"kill","signal":"INT"}`,
		`{"type":"stdin","data":"%%%","encoding":"base64"}`,
		`{"type":"stdin","data":"x","encoding":"rot13"}`,
		`{"type":"stdin","data":7}`,
		`{"type":"signal","signal":"SIGBOGUS"}`,
		`{"type":"signal","signal":999}`,
		`{"type":"signal"}`,
	} {
		c.send(frame)
		c.readError("invalid_request")
	}
	c.ws.SetWriteDeadline(time.Now().Add(atTimeout))
	if err := c.ws.WriteMessage(websocket.BinaryMessage, []byte(`{"type":"kill"}`)); err != nil {
		t.Fatal(err)
	}
	c.readError("invalid_request")

	// Still usable, and nothing of the above reached the command.
	c.send(`{"type":"stdin","data":"two\n","eof":true}`)
	if end := c.readExit(); end.State != "exited" || string(c.out) != "one\ntwo\n" {
		t.Errorf("got %s with output %q; want exited with %q", end.State, c.out, "one\ntwo\n")
	}
	c.expectClose(websocket.CloseNormalClosure)
}

func TestAttachRuntimeErrorFrames(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	// No stdin: a stdin frame is refused like POST /stdin would be.
	st := atCreate(t, ts, `{"argv":["sleep","30"]}`)
	c := atDial(t, ts, st.CommandID, "")
	c.send(`{"type":"stdin","data":"x"}`)
	c.readError("stdin_not_enabled")

	// stdin closed, then too much stdin.
	st2 := atCreate(t, ts, `{"argv":["sleep","30"],"stdin":true}`)
	c2 := atDial(t, ts, st2.CommandID, "")
	c2.send(map[string]any{"type": "stdin", "data": strings.Repeat("x", 1<<20+1)})
	c2.readError("stdin_full")
	c2.send(`{"type":"stdin","data":"","eof":true}`)
	c2.send(`{"type":"stdin","data":"late"}`)
	c2.readError("stdin_closed")

	c.send(`{"type":"kill"}`)
	if end := c.readExit(); end.State != "cancelled" {
		t.Errorf("got %s; want cancelled", end.State)
	}
	c.expectClose(websocket.CloseNormalClosure)

	atDo(t, "POST", ts.URL+"/v1/commands/"+st2.CommandID+"/kill", "", nil)
	if end := c2.readExit(); end.State != "cancelled" {
		t.Errorf("got %s; want cancelled", end.State)
	}
	c2.expectClose(websocket.CloseNormalClosure)
}

func TestAttachFrameTooLarge(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	st := atCreate(t, ts, `{"argv":["sleep","30"],"stdin":true}`)
	c := atDial(t, ts, st.CommandID, "")
	// The server stops reading at the frame header and hangs up; the rest of
	// the frame may not even be sent, so write errors are expected.
	c.ws.SetWriteDeadline(time.Now().Add(atTimeout))
	c.ws.WriteMessage(websocket.TextMessage, marshal(map[string]any{"type": "stdin", "data": strings.Repeat("x", attachReadLimit)}))
	c.ws.SetReadDeadline(time.Now().Add(atTimeout))
	_, _, err := c.ws.ReadMessage()
	var ce *websocket.CloseError
	var ne net.Error
	switch {
	case err == nil:
		t.Fatal("got a frame; want the connection closed")
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("the connection stayed open: %v", err)
	case errors.As(err, &ce) && ce.Code != websocket.CloseMessageTooBig && ce.Code != websocket.CloseAbnormalClosure:
		t.Errorf("close code %d; want %d", ce.Code, websocket.CloseMessageTooBig)
	}
	atWaitFor(t, "the attachment to end", func() bool { return ts.hijacked.count() == 0 })
	if got := atGet(t, ts, st.CommandID, 0); got.State != "running" {
		t.Errorf("after the oversized frame: state %s; want running", got.State)
	}
}

// atGenerator prints exactly n bytes of a repeated 41-byte line.
func atGenerator(n int) (argv []string, want string) {
	line := "0123456789abcdefghijklmnopqrstuvwxyzABCD\n"
	full := strings.Repeat(line, n/len(line)+1)[:n]
	return []string{"sh", "-c", fmt.Sprintf("yes %s | head -c %d", strings.TrimSuffix(line, "\n"), n)}, full
}

// atSmallBufferDialer dials with a kernel receive buffer of n bytes.
func atSmallBufferDialer(n int) *websocket.Dialer {
	return &websocket.Dialer{
		ReadBufferSize: 4 << 10,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				conn.(*net.TCPConn).SetReadBuffer(n)
			}
			return conn, err
		},
	}
}

func TestAttachSlowClientDisconnected(t *testing.T) {
	logs, logged := observer.New(zap.InfoLevel)
	ts := newTestServer(t, func(c *runtime.Config, o *Options) {
		c.OutputLimit = 64 << 20              // the fast client must get everything: nothing is evicted
		o.HeartbeatInterval = 5 * time.Second // writeWait 5 s, pongWait 10 s
		o.Logger = zap.New(logs)
	})
	// Far more than the slow client's socket buffers and queue can hold:
	// 512 KiB at the client, 512 KiB at the server, two frames in hand.
	const n = 6 << 20
	argv, want := atGenerator(n)
	// The output starts once both clients are attached.
	gated := []string{"sh", "-c", "read x; " + argv[2]}
	st := atCreate(t, ts, string(marshal(map[string]any{"argv": gated, "stdin": true})))

	// The slow client never reads, and has a small socket buffer so that the
	// server cannot park the whole output in the kernel.
	slow := atDialWith(t, atSmallBufferDialer(256<<10), ts, st.CommandID, "")
	// The fast client's buffer is bounded too, so that the server's pings
	// do not queue behind megabytes of output on a loaded machine.
	fast := atDialWith(t, atSmallBufferDialer(256<<10), ts, st.CommandID, "")
	atWaitFor(t, "two attachments", func() bool { return ts.hijacked.count() == 2 })
	fast.send(`{"type":"stdin","data":"go\n"}`)

	defer func() {
		if t.Failed() {
			for _, e := range logged.All() {
				t.Logf("log: %s %v", e.Message, e.ContextMap())
			}
		}
	}()
	end := fast.readExit()
	if end.State != "exited" || string(fast.out) != want {
		t.Fatalf("fast client: got %s and %d bytes (equal %v); want exited and %d bytes", end.State, len(fast.out), string(fast.out) == want, n)
	}
	fast.expectClose(websocket.CloseNormalClosure)

	// The slow one is dropped by the server (without reading a byte).
	atWaitFor(t, "the slow client to be disconnected", func() bool { return ts.hijacked.count() == 0 })
	if logged.FilterMessage("attach client too slow; disconnecting").Len() != 1 {
		t.Errorf("want one 'too slow' log line; got %v", logged.All())
	}
	// What reached its socket before that is readable, then the connection
	// ends without an exit event or a normal close.
	for {
		slow.ws.SetReadDeadline(time.Now().Add(atTimeout))
		_, data, err := slow.ws.ReadMessage()
		if err != nil {
			if websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				t.Fatalf("the slow client got a normal close: %v", err)
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the slow client's connection is still open: %v", err)
			}
			break
		}
		if bytes.HasPrefix(data, []byte(`{"type":"exit"`)) {
			t.Fatal("the slow client got the exit event; want it disconnected")
		}
	}
}

func TestAttachCloseDoesNotAffectCommand(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	st := atCreate(t, ts, `{"argv":["cat"],"stdin":true}`)

	// An abrupt close (no close frame) while the stream is idle.
	c1 := atDial(t, ts, st.CommandID, "")
	c1.send(`{"type":"stdin","data":"a\n"}`)
	c1.readOutput(2)
	c1.ws.Close()
	atWaitFor(t, "the first attachment to end", func() bool { return ts.hijacked.count() == 0 })

	// A clean close from the client: the server echoes it.
	c2 := atDial(t, ts, st.CommandID, "cursor=2")
	c2.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(atTimeout))
	c2.expectClose(websocket.CloseNormalClosure)
	atWaitFor(t, "the second attachment to end", func() bool { return ts.hijacked.count() == 0 })

	if got := atGet(t, ts, st.CommandID, 0); got.State != "running" || got.StdinClosed {
		t.Fatalf("after the disconnects: state %s stdin_closed %v; want running false", got.State, got.StdinClosed)
	}
	// The command still takes input and produces output.
	c3 := atDial(t, ts, st.CommandID, "cursor=2")
	c3.send(`{"type":"stdin","data":"b\n","eof":true}`)
	if end := c3.readExit(); end.State != "exited" || string(c3.out) != "b\n" {
		t.Errorf("got %s and %q; want exited and %q", end.State, c3.out, "b\n")
	}
	c3.expectClose(websocket.CloseNormalClosure)
}

func TestAttachShutdown(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	st := atCreate(t, ts, `{"argv":["sleep","30"]}`)
	c := atDial(t, ts, st.CommandID, "")
	atWaitFor(t, "the attachment", func() bool { return ts.hijacked.count() == 1 })

	ended := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		ts.EndStreams()
		ended <- time.Since(start)
	}()
	ev := c.read()
	if ev.Type != "end" || ev.Reason != "shutting_down" || *ev.NextCursor != 0 {
		t.Errorf("got %+v; want an end event with reason shutting_down", ev)
	}
	c.expectClose(websocket.CloseGoingAway)
	select {
	case d := <-ended:
		// The client answers the close at once, so this is normally well
		// under attachShutdownGrace; the bound leaves room for a loaded host.
		if d > 3*attachShutdownGrace {
			t.Errorf("EndStreams took %v; want the attachment closed within %v", d, 3*attachShutdownGrace)
		}
	case <-time.After(atTimeout):
		t.Fatal("EndStreams did not return")
	}
	if n := ts.hijacked.count(); n != 0 {
		t.Errorf("%d attachments left after EndStreams", n)
	}
	// New attachments are refused from now on.
	_, resp, err := websocket.DefaultDialer.Dial(atWSURL(ts, st.CommandID, ""), nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("attach after EndStreams: %v, %v; want 503", err, resp)
	}
	if got := atGet(t, ts, st.CommandID, 0); got.State != "running" {
		t.Errorf("EndStreams changed the command: state %s", got.State)
	}
}

func TestAttachShutdownUnresponsiveClient(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	st := atCreate(t, ts, `{"argv":["sleep","30"]}`)
	atDial(t, ts, st.CommandID, "") // never reads, never answers the close
	atWaitFor(t, "the attachment", func() bool { return ts.hijacked.count() == 1 })
	start := time.Now()
	ts.EndStreams()
	if d := time.Since(start); d > 3*attachShutdownGrace {
		t.Errorf("EndStreams took %v; want at most %v", d, 3*attachShutdownGrace)
	}
	if n := ts.hijacked.count(); n != 0 {
		t.Errorf("%d attachments left after EndStreams", n)
	}
}

// atOpenFDs counts this process's open file descriptors.
func atOpenFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

func TestAttachNoLeaks(t *testing.T) {
	// Let the runtime open its poller first, so that it is not counted.
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		ln.Close()
	}
	ignore := goleak.IgnoreCurrent()
	fds := atOpenFDs(t)
	t.Run("cycles", func(t *testing.T) {
		ts := newTestServer(t, func(c *runtime.Config, o *Options) {
			atQuietAPI(c, o)
			c.OutputLimit = 4 << 20
		})
		live := atCreate(t, ts, `{"argv":["sleep","30"]}`)
		big := atCreate(t, ts, `{"argv":["seq","1","200000"]}`)
		atGet(t, ts, big.CommandID, 20)
		for i := range 30 {
			switch i % 3 {
			case 0: // abrupt close while idle
				c := atDial(t, ts, live.CommandID, "")
				c.ws.Close()
			case 1: // clean close while idle
				c := atDial(t, ts, live.CommandID, "")
				c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(atTimeout))
				c.expectClose(websocket.CloseNormalClosure)
				c.ws.Close()
			case 2: // abrupt close mid-output
				c := atDial(t, ts, big.CommandID, "")
				c.readOutput(1)
				c.ws.Close()
			}
		}
		atWaitFor(t, "every attachment to end", func() bool { return ts.hijacked.count() == 0 })
		if got := atGet(t, ts, live.CommandID, 0); got.State != "running" {
			t.Errorf("after 30 attach cycles: state %s; want running", got.State)
		}
		http.DefaultClient.CloseIdleConnections()
	})
	goleak.VerifyNone(t, ignore)
	atWaitFor(t, "file descriptors to be closed", func() bool { return atOpenFDs(t) <= fds })
}

func TestFrameNextCursor(t *testing.T) {
	st := runtime.Status{NextCursor: 99}
	for _, tc := range []struct {
		obj  []byte
		want int64
	}{
		{appendOutputEvent(nil, 0, 5, []byte(`"next_cursor":1}`)), 5 + 16},
		{marshal(event{Type: "exit", Status: &st, NextCursor: 7}), 7},
		{marshal(event{Type: "end", Reason: "shutting_down", NextCursor: 0}), 0},
	} {
		if got, ok := frameNextCursor(tc.obj); !ok || got != tc.want {
			t.Errorf("frameNextCursor(%s) = %d, %v; want %d", tc.obj, got, ok, tc.want)
		}
	}
}
