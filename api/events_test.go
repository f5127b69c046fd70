package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// evFeed is one open GET /v1/events stream.
type evFeed struct {
	t      testing.TB
	resp   *http.Response
	sc     *bufio.Scanner
	cancel context.CancelFunc
}

func evOpen(t testing.TB, ts *testServer, query string) *evFeed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*atTimeout)
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/events?"+query, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET /v1/events?%s: %d", query, resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	return &evFeed{t: t, resp: resp, sc: sc, cancel: cancel}
}

// next reads one line; ok false at the end of the body.
func (f *evFeed) next() (wire.FeedEvent, bool) {
	f.t.Helper()
	if !f.sc.Scan() {
		return wire.FeedEvent{}, false
	}
	var e wire.FeedEvent
	dec := json.NewDecoder(strings.NewReader(f.sc.Text()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		f.t.Fatalf("line %q: %v", f.sc.Text(), err)
	}
	if e.NextCursor == "" {
		f.t.Fatalf("line without next_cursor: %q", f.sc.Text())
	}
	return e, true
}

func (f *evFeed) close() {
	f.cancel()
	f.resp.Body.Close()
}

// evCode answers the status and error code of a GET /v1/events that fails.
func evCode(t *testing.T, ts *testServer, query string) (int, string) {
	code, b := atDo(t, "GET", ts.URL+"/v1/events?"+query, "", nil)
	var eb wire.ErrorBody
	json.Unmarshal(b, &eb)
	return code, eb.Error.Code
}

// TestEventFeedExitedInOrder: a feed opened before the creates sees every
// command's created, started and exited in order, and a feed resumed from
// the cursor of a line read before a disconnect sees the rest exactly once.
func TestEventFeedExitedInOrder(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	f := evOpen(t, ts, "")
	var ids []string
	for i := range 3 {
		st := atCreate(t, ts, fmt.Sprintf(`{"argv":["sh","-c","exit %d"]}`, i))
		atGet(t, ts, st.CommandID, 10)
		ids = append(ids, st.CommandID)
	}
	var got []wire.FeedEvent
	for len(got) < 4 { // created, started, exited of the first, then disconnect
		e, ok := f.next()
		if !ok {
			t.Fatal("feed ended early")
		}
		if e.Type == wire.FeedHeartbeat {
			continue
		}
		got = append(got, e)
	}
	f.close()
	f = evOpen(t, ts, "cursor="+url.QueryEscape(got[len(got)-1].NextCursor))
	defer f.close()
	for len(got) < 9 {
		e, ok := f.next()
		if !ok {
			t.Fatal("resumed feed ended early")
		}
		if e.Type == wire.FeedHeartbeat || e.Type == wire.FeedEnd {
			t.Fatalf("unexpected %+v", e)
		}
		got = append(got, e)
	}
	for i, e := range got {
		id, typ := ids[i/3], []string{"created", "started", "exited"}[i%3]
		if e.CommandID != id || e.Type != typ || e.Seq != got[0].Seq+int64(i) {
			t.Fatalf("event %d: %+v; want %s of %s", i, e, typ, id)
		}
		if e.Type == "exited" && (e.ExitCode == nil || *e.ExitCode != i/3 || e.State != wire.StateExited || e.DurationSeconds == nil) {
			t.Fatalf("exited event %+v", e)
		}
	}
}

// TestEventFeedResumeExactlyOnce: the events of 200 commands read through
// 20 random disconnects (each after a random number of lines, mid-stream)
// arrive exactly once and in order.
func TestEventFeedResumeExactlyOnce(t *testing.T) {
	const commands, disconnects = 200, 20
	ts := newTestServer(t, atQuietAPI)
	start := ts.M.EventHead().String()
	done := make(chan error, 1)
	go func() {
		for range commands {
			code, b := atDo(t, "POST", ts.URL+"/v1/commands", `{"argv":["true"]}`, nil)
			if code != http.StatusCreated {
				done <- fmt.Errorf("create: %d %s", code, b)
				return
			}
			var st wire.Status
			json.Unmarshal(b, &st)
			atGet(t, ts, st.CommandID, 10)
		}
		done <- nil
	}()
	rng := rand.New(rand.NewSource(1))
	cursor, wantSeq := start, int64(0)
	exited := map[string]bool{}
	for d := 0; len(exited) < commands; d++ {
		f := evOpen(t, ts, "type=created,started,exited&max_wait=5&cursor="+url.QueryEscape(cursor))
		limit := 1 << 30
		if d < disconnects {
			limit = 1 + rng.Intn(30)
		}
		for n := 0; n < limit; {
			e, ok := f.next()
			if !ok {
				break
			}
			cursor = e.NextCursor
			switch e.Type {
			case wire.FeedHeartbeat, wire.FeedEnd:
				continue
			case wire.FeedGap:
				t.Fatalf("gap: %+v", e)
			}
			n++
			if wantSeq != 0 && e.Seq <= wantSeq {
				t.Fatalf("seq %d again (after %d)", e.Seq, wantSeq)
			}
			wantSeq = e.Seq
			if e.Type == wire.FeedExited {
				if exited[e.CommandID] {
					t.Fatalf("%s exited twice", e.CommandID)
				}
				exited[e.CommandID] = true
			}
			if len(exited) == commands {
				break
			}
		}
		f.close()
		if d > 10*commands {
			t.Fatal("no progress")
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestEventFeedGapAndRefusals: a cursor older than the log gets a gap that
// says how many events were lost; a cursor of another daemon instance is
// refused with 409 stale_cursor; bad parameters are 400.
func TestEventFeedGapAndRefusals(t *testing.T) {
	ts := newTestServer(t, func(c *runtime.Config, o *Options) { atQuietAPI(c, o); c.EventLog = 4 })
	start := ts.M.EventHead().String()
	for range 3 {
		st := atCreate(t, ts, `{"argv":["true"]}`)
		atGet(t, ts, st.CommandID, 10)
	} // 9 events, 4 retained
	f := evOpen(t, ts, "follow=false&cursor="+url.QueryEscape(start))
	defer f.close()
	e, _ := f.next()
	if e.Type != wire.FeedGap || e.Cursor != start || e.DroppedEvents == nil || *e.DroppedEvents != 5 {
		t.Fatalf("first line %+v; want a gap of 5 from %s", e, start)
	}
	var types []string
	for {
		e, ok := f.next()
		if !ok {
			t.Fatal("no end line")
		}
		if e.Type == wire.FeedEnd {
			if e.Reason != wire.EndCaughtUp {
				t.Fatalf("end %+v", e)
			}
			break
		}
		types = append(types, e.Type)
	}
	if strings.Join(types, ",") != "exited,created,started,exited" {
		t.Fatalf("after the gap: %v", types)
	}

	other := newTestServer(t, atQuietAPI)
	if code, ec := evCode(t, ts, "cursor="+url.QueryEscape(other.M.EventHead().String())); code != http.StatusConflict || ec != "stale_cursor" {
		t.Errorf("a cursor of another instance: %d %s; want 409 stale_cursor", code, ec)
	}
	for _, q := range []string{"cursor=7", "type=exit", "type=", "command_id=x", "follow=maybe", "bogus=1",
		"cursor=" + url.QueryEscape(wire.FeedCursor{Instance: ts.M.EventInstance(), Seq: 1000}.String())} {
		if code, ec := evCode(t, ts, q); code != http.StatusBadRequest || ec != "invalid_request" {
			t.Errorf("?%s: %d %s; want 400 invalid_request", q, code, ec)
		}
	}
}

// TestEventFeedWebSocket: the feed over a WebSocket, filtered by command
// id, carries the command's events; a client frame closes it with 1003.
func TestEventFeedWebSocket(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	a := atCreate(t, ts, `{"argv":["sleep","30"]}`)
	u := "ws" + strings.TrimPrefix(ts.URL, "http") + "/v1/events?command_id=" + a.CommandID
	ws, _, err := websocket.DefaultDialer.Dial(u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	atCreate(t, ts, `{"argv":["true"]}`) // filtered out
	atDo(t, "POST", ts.URL+"/v1/commands/"+a.CommandID+"/kill", "", nil)
	ws.SetReadDeadline(time.Now().Add(atTimeout))
	var types []string
	for len(types) < 3 {
		_, b, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		var e wire.FeedEvent
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatal(err)
		}
		if e.CommandID != a.CommandID {
			t.Fatalf("filtered feed sent %s", b)
		}
		types = append(types, e.Type)
		if e.Type == wire.FeedExited && (e.Signal == nil || e.State != wire.StateCancelled) {
			t.Fatalf("exited of a killed command: %s", b)
		}
	}
	if strings.Join(types, ",") != "created,started,exited" {
		t.Fatalf("types %v", types)
	}
	ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"kill"}`))
	for {
		if _, _, err = ws.ReadMessage(); err != nil {
			break
		}
	}
	if !websocket.IsCloseError(err, websocket.CloseUnsupportedData) {
		t.Fatalf("after a client frame: %v; want close 1003", err)
	}
}

// TestEventFeedShutdownEndLine: shutdown ends an open feed (NDJSON) with
// its end line, reason shutting_down, carrying a cursor.
func TestEventFeedShutdownEndLine(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	f := evOpen(t, ts, "cursor=now&max_wait=60")
	defer f.close()
	ended := make(chan wire.FeedEvent, 1)
	go func() {
		for {
			e, ok := f.next()
			if !ok {
				close(ended)
				return
			}
			if e.Type == wire.FeedEnd {
				ended <- e
				return
			}
		}
	}()
	ts.EndStreams()
	select {
	case e, ok := <-ended:
		if !ok || e.Reason != wire.EndShuttingDown || e.NextCursor == "" {
			t.Fatalf("the feed ended with %+v (ok %v); want end shutting_down", e, ok)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the feed was not ended 10 s after EndStreams")
	}
}
