package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandbox-runtime/sandbox-runtime/watch"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

func postWatch(t *testing.T, ts *testServer, body string) (*http.Response, wire.WatchInfo) {
	t.Helper()
	resp, err := http.Post(ts.URL+"/v1/watches", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info wire.WatchInfo
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusCreated {
		if err := json.Unmarshal(data, &info); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
	}
	return resp, info
}

// readWatch reads one stream window from cursor, handing each line to fn,
// and returns the end line.
func readWatch(t *testing.T, url string, fn func(e wire.WatchEvent)) wire.WatchEvent {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var e wire.WatchEvent
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			if bytes.HasPrefix(sc.Bytes(), []byte(`{"type":"watch",`)) {
				fn(wire.WatchEvent{Type: "watch"})
				continue
			}
			t.Fatalf("line %s: %v", sc.Bytes(), err)
		}
		if e.Type == wire.EventEnd {
			return e
		}
		fn(e)
	}
	t.Fatalf("the stream ended without an end line: %v", sc.Err())
	return wire.WatchEvent{}
}

// TestWatchHTTPBurstReopening: 10,000 files in 100 new nested dirs under a
// recursive watch, read over HTTP by a reader that re-opens the stream by
// cursor every second (max_wait=1): every file is reported exactly once,
// or a gap/overflow is said.
func TestWatchHTTPBurstReopening(t *testing.T) {
	ts := newTestServer(t, nil)
	resp, info := postWatch(t, ts, `{"path":"","recursive":true}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	want := map[string]bool{}
	go func() {
		for i := range 10 {
			for j := range 10 {
				d := filepath.Join(ts.BaseDir, fmt.Sprintf("t%d", i), fmt.Sprintf("s%d", j))
				os.MkdirAll(d, 0o755)
				for k := range 100 {
					os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", k)), nil, 0o644)
				}
			}
		}
	}()
	for i := range 10 {
		for j := range 10 {
			for k := range 100 {
				want[fmt.Sprintf("t%d/s%d/f%d", i, j, k)] = true
			}
		}
	}
	got := map[string]int{}
	var cursor int64
	lastSeq := int64(-1)
	lost, opens := false, 0
	deadline := time.Now().Add(90 * time.Second)
	for len(got) < len(want) && !lost && time.Now().Before(deadline) {
		opens++
		n := 0
		end := readWatch(t, fmt.Sprintf("%s/v1/watches/%s/events?cursor=%d&max_wait=1", ts.URL, info.ID, cursor), func(e wire.WatchEvent) {
			switch e.Type {
			case wire.EventGap, wire.WatchOverflow:
				lost = true
			case wire.EventHeartbeat:
				return
			}
			if e.Seq != nil {
				if *e.Seq <= lastSeq {
					t.Fatalf("event %d after %d: not exactly once", *e.Seq, lastSeq)
				}
				lastSeq = *e.Seq
			}
			if e.Type == wire.WatchCreate && want[e.Path] {
				got[e.Path]++
			}
			cursor = e.NextCursor
			n++
		})
		if end.NextCursor != cursor {
			t.Fatalf("end next_cursor %d, last event's %d", end.NextCursor, cursor)
		}
		_ = n
	}
	if lost {
		t.Logf("a gap or overflow was said after %d of %d files: acceptable", len(got), len(want))
		return
	}
	if len(got) != len(want) {
		t.Fatalf("%d of %d files reported, no gap or overflow said: a silent miss", len(got), len(want))
	}
	for p, n := range got {
		if n != 1 {
			t.Fatalf("%s reported %d times", p, n)
		}
	}
	t.Logf("%d files in %d stream windows", len(got), opens)
}

// TestWatchHTTPLifecycle: list, get, refusals (outside, not found, too
// many), a stream ended by DELETE with watch_ended, and the one-shot
// /v1/files/{path}?watch=true.
func TestWatchHTTPLifecycle(t *testing.T) {
	ts := newTestServer(t, nil)
	outside := t.TempDir()
	os.Symlink(outside, filepath.Join(ts.BaseDir, "out"))
	if resp, _ := postWatch(t, ts, `{"path":"out"}`); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a watch through a symlink to outside: %d, want 403", resp.StatusCode)
	}
	if resp, _ := postWatch(t, ts, `{"path":"nope"}`); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a watch of a missing dir: %d, want 404", resp.StatusCode)
	}
	if resp, _ := postWatch(t, ts, `{"path":"","bogus":1}`); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("an unknown field: %d, want 400", resp.StatusCode)
	}
	resp, info := postWatch(t, ts, `{"path":""}`)
	if resp.StatusCode != http.StatusCreated || info.ID == "" {
		t.Fatalf("create: %d %+v", resp.StatusCode, info)
	}
	r2, err := http.Get(ts.URL + "/v1/watches")
	if err != nil {
		t.Fatal(err)
	}
	var list wire.WatchList
	json.NewDecoder(r2.Body).Decode(&list)
	r2.Body.Close()
	if len(list.Watches) != 1 || list.Watches[0].ID != info.ID {
		t.Fatalf("list: %+v", list)
	}
	ended := make(chan wire.WatchEvent, 1)
	seen := make(chan wire.WatchEvent, 16)
	go func() {
		ended <- readWatch(t, ts.URL+"/v1/watches/"+info.ID+"/events?max_wait=30", func(e wire.WatchEvent) { seen <- e })
	}()
	os.WriteFile(filepath.Join(ts.BaseDir, "a"), nil, 0o644)
	select {
	case e := <-seen:
		if e.Type != wire.WatchCreate || e.Path != "a" {
			t.Fatalf("first event %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	req, _ := http.NewRequest("DELETE", ts.URL+"/v1/watches/"+info.ID, nil)
	dr, err := http.DefaultClient.Do(req)
	if err != nil || dr.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %v %v", dr, err)
	}
	dr.Body.Close()
	select {
	case e := <-ended:
		if e.Reason != wire.EndWatchEnded {
			t.Fatalf("end %+v, want reason %s", e, wire.EndWatchEnded)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("DELETE did not end the stream")
	}
	if r, _ := http.Get(ts.URL + "/v1/watches/" + info.ID); r.StatusCode != http.StatusNotFound {
		t.Fatalf("a deleted watch: %d, want 404", r.StatusCode)
	}
	// The limit.
	var ids []string
	for range 64 {
		resp, info := postWatch(t, ts, `{"path":""}`)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("watch %d: %d", len(ids), resp.StatusCode)
		}
		ids = append(ids, info.ID)
	}
	if resp, _ := postWatch(t, ts, `{"path":""}`); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("watch 65: %d, want 429", resp.StatusCode)
	}
	for _, id := range ids {
		req, _ := http.NewRequest("DELETE", ts.URL+"/v1/watches/"+id, nil)
		r, _ := http.DefaultClient.Do(req)
		r.Body.Close()
	}
	// One-shot: GET /v1/files/{path}?watch=true.
	os.Mkdir(filepath.Join(ts.BaseDir, "d"), 0o755)
	got := make(chan wire.WatchEvent, 4)
	done := make(chan wire.WatchEvent, 1)
	go func() {
		done <- readWatch(t, ts.URL+"/v1/files/d?watch=true&recursive=true&max_wait=2", func(e wire.WatchEvent) { got <- e })
	}()
	// The stream's first line says the watch is in place: a create after
	// it is reported.
	select {
	case e := <-got:
		if e.Type != "watch" {
			t.Fatalf("the one-shot stream's first line: %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no first line")
	}
	os.WriteFile(filepath.Join(ts.BaseDir, "d", "x"), nil, 0o644)
	select {
	case e := <-got:
		if e.Type != wire.WatchCreate || e.Path != "d/x" {
			t.Fatalf("one-shot event %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the one-shot watch reported nothing")
	}
	if e := <-done; e.Reason != wire.EndMaxWait {
		t.Fatalf("one-shot end %+v", e)
	}
	// Its watch goes with its stream (the handler deletes it once the end
	// line is written: bounded wait for that).
	for end := time.Now().Add(10 * time.Second); ; {
		r3, _ := http.Get(ts.URL + "/v1/watches")
		var l2 wire.WatchList
		json.NewDecoder(r3.Body).Decode(&l2)
		r3.Body.Close()
		if len(l2.Watches) == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the one-shot watch outlived its stream: %+v", l2)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a bound
	}
}

// TestWatchHTTPShutdown: EndStreams ends a watch stream with its end line.
func TestWatchHTTPShutdown(t *testing.T) {
	ts := newTestServer(t, nil)
	_, info := postWatch(t, ts, `{"path":""}`)
	resp, err := http.Get(ts.URL + "/v1/watches/" + info.ID + "/events?max_wait=60")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ts.EndStreams()
	sc := bufio.NewScanner(resp.Body)
	var last wire.WatchEvent
	for sc.Scan() {
		json.Unmarshal(sc.Bytes(), &last)
	}
	if last.Type != wire.EventEnd || last.Reason != wire.EndShuttingDown {
		t.Fatalf("last line %+v, want end shutting_down", last)
	}
}

// TestWatchWebSocket: the same events as text frames, resumed from a
// cursor, ended by DELETE with `end` watch_ended and a close frame.
func TestWatchWebSocket(t *testing.T) {
	ts := newTestServer(t, nil)
	_, info := postWatch(t, ts, `{"path":""}`)
	os.WriteFile(filepath.Join(ts.BaseDir, "a"), nil, 0o644) // seq 0
	// Wait (bounded) until the watch has it: then cursor 1 skips it.
	for end := time.Now().Add(10 * time.Second); ; {
		r, _ := http.Get(ts.URL + "/v1/watches/" + info.ID)
		var wi wire.WatchInfo
		json.NewDecoder(r.Body).Decode(&wi)
		r.Body.Close()
		if wi.NextCursor >= 1 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the watch never saw a")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a bound
	}
	u := "ws" + strings.TrimPrefix(ts.URL, "http") + "/v1/watches/" + info.ID + "/events?cursor=1"
	conn, _, err := websocket.DefaultDialer.Dial(u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	os.WriteFile(filepath.Join(ts.BaseDir, "b"), nil, 0o644)
	var e wire.WatchEvent
	if err := conn.ReadJSON(&e); err != nil {
		t.Fatal(err)
	}
	if e.Type != wire.WatchCreate || e.Path != "b" || e.Seq == nil || *e.Seq != 1 {
		t.Fatalf("first frame %+v, want create b at seq 1 (a is before the cursor)", e)
	}
	req, _ := http.NewRequest("DELETE", ts.URL+"/v1/watches/"+info.ID, nil)
	dr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	dr.Body.Close()
	for {
		var e wire.WatchEvent
		if err := conn.ReadJSON(&e); err != nil {
			t.Fatalf("before the end frame: %v", err)
		}
		if e.Type == wire.EventEnd {
			if e.Reason != wire.EndWatchEnded {
				t.Fatalf("end %+v", e)
			}
			break
		}
	}
	if _, _, err := conn.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("after end: %v, want a normal close", err)
	}
}

// TestWatchHTTPStuckReaderBounded: a client that opens a watch stream and
// never reads while 40,000 events happen costs the daemon a bounded amount
// of memory (the log's bounds, one batch, the kernel's socket buffers).
func TestWatchHTTPStuckReaderBounded(t *testing.T) {
	ts := newTestServer(t, nil)
	_, info := postWatch(t, ts, `{"path":""}`)
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	fmt.Fprintf(conn, "GET /v1/watches/%s/events?max_wait=60 HTTP/1.1\r\nHost: x\r\n\r\n", info.ID)
	goruntime.GC()
	var m0 goruntime.MemStats
	goruntime.ReadMemStats(&m0)
	name := strings.Repeat("n", 200) // 40,000 events of these: 8 MB of paths unbounded
	for i := range 20000 {
		p := filepath.Join(ts.BaseDir, name+strconv.Itoa(i))
		os.WriteFile(p, nil, 0o644)
		os.Remove(p)
	}
	// Wait (bounded) until the watch has seen them.
	for end := time.Now().Add(30 * time.Second); ; {
		r, _ := http.Get(ts.URL + "/v1/watches/" + info.ID)
		var wi wire.WatchInfo
		json.NewDecoder(r.Body).Decode(&wi)
		r.Body.Close()
		if wi.NextCursor >= 40000 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the watch saw %d of 40000 events", wi.NextCursor)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a bound
	}
	goruntime.GC()
	var m1 goruntime.MemStats
	goruntime.ReadMemStats(&m1)
	grew := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	t.Logf("heap grew %d KiB with a stuck reader over 40,000 events", grew>>10)
	if grew > 4<<20 {
		t.Fatalf("heap grew %d bytes with a stuck reader: not bounded by the log", grew)
	}
}

// TestWatchHTTPCreateDeleteCycles: 200 watch create/delete cycles over
// HTTP leave no descriptor and no inotify watch behind in the server's
// process (this test's: the server is in process).
func TestWatchHTTPCreateDeleteCycles(t *testing.T) {
	ts := newTestServer(t, nil)
	for i := range 3 {
		os.MkdirAll(filepath.Join(ts.BaseDir, fmt.Sprint("d", i), "e"), 0o755)
	}
	// The first watch makes the manager (its base dir root stays open).
	_, first := postWatch(t, ts, `{"path":""}`)
	del := func(id string) {
		req, _ := http.NewRequest("DELETE", ts.URL+"/v1/watches/"+id, nil)
		r, err := http.DefaultClient.Do(req)
		if err != nil || r.StatusCode != http.StatusNoContent {
			t.Fatalf("delete: %v %v", r, err)
		}
		r.Body.Close()
	}
	del(first.ID)
	http.DefaultClient.CloseIdleConnections()
	fd0, iw0 := countWatchFDs(t)
	for range 200 {
		resp, info := postWatch(t, ts, `{"path":"","recursive":true}`)
		if resp.StatusCode != http.StatusCreated || info.Dirs != 7 {
			t.Fatalf("create: %d, %d dirs (want 7)", resp.StatusCode, info.Dirs)
		}
		del(info.ID)
	}
	http.DefaultClient.CloseIdleConnections()
	// The server's side of a connection the client just closed is closed
	// when the server reads the EOF, a moment later: wait (bounded) for the
	// count to come back; a leaked descriptor or watch keeps it up.
	fd1, iw1 := countWatchFDs(t)
	for end := time.Now().Add(5 * time.Second); (fd1 > fd0 || iw1 != iw0) && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond) // polling a condition with a bound
		fd1, iw1 = countWatchFDs(t)
	}
	if fd1 > fd0 || iw1 != iw0 {
		t.Fatalf("after 200 cycles: fds %d→%d, inotify watches %d→%d", fd0, fd1, iw0, iw1)
	}
}

// countWatchFDs counts this process's descriptors and the inotify
// watches of all of them.
func countWatchFDs(t *testing.T) (fds, watches int) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fd, _ := strconv.Atoi(e.Name())
		if ws, err := watch.FDInfo(fd); err == nil {
			watches += len(ws)
		}
	}
	return len(ents), watches
}
