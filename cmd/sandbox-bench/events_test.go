package main

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

func TestUnescapedLen(t *testing.T) {
	for _, s := range []string{
		"", "hi\n", `quote " backslash \ tab	`, "\x00\x01\x1f", "é€😀", "\u2028\u2029", strings.Repeat("a", 100) + "\n",
	} {
		enc, _ := json.Marshal(s)
		n, err := unescapedLen(enc[1 : len(enc)-1])
		if err != nil || n != int64(len(s)) {
			t.Errorf("unescapedLen(%s) = %d, %v; want %d", enc, n, err, len(s))
		}
	}
	// Go escapes U+2028 but not 😀; a surrogate pair must count 4 bytes too.
	if n, err := unescapedLen([]byte(`\ud83d\ude00`)); err != nil || n != 4 {
		t.Errorf("surrogate pair: %d, %v; want 4", n, err)
	}
	for _, bad := range []string{`\`, `\x`, `\u12`} {
		if _, err := unescapedLen([]byte(bad)); err == nil {
			t.Errorf("unescapedLen(%q): no error", bad)
		}
	}
}

func TestParseEvent(t *testing.T) {
	var e event
	line := []byte(`{"type":"output","stream":"stdout","cursor":10,"data":"a\"b\\c\n","next_cursor":16}`)
	if err := parseEvent(line, &e); err != nil {
		t.Fatal(err)
	}
	n, err := e.DataLen()
	if e.Type != "output" || e.Stream != "stdout" || e.Cursor != 10 || e.NextCursor != 16 || err != nil || n != 6 {
		t.Fatalf("got %+v len %d %v", e, n, err)
	}
	if d, _ := e.Data(); string(d) != "a\"b\\c\n" {
		t.Fatalf("data %q", d)
	}
	// Order-independent, base64, nested status kept raw.
	line = []byte(` {"next_cursor":3,"encoding":"base64","data":"/wAB","cursor":0,"type":"output","stream":"stderr"}`)
	if err := parseEvent(line, &e); err != nil {
		t.Fatal(err)
	}
	if n, err := e.DataLen(); n != 3 || err != nil || e.Stream != "stderr" {
		t.Fatalf("base64: %+v %d %v", e, n, err)
	}
	line = []byte(`{"type":"exit","status":{"argv":["a","}\""],"next_cursor":99,"x":{"y":[1,2]}},"next_cursor":7}`)
	if err := parseEvent(line, &e); err != nil {
		t.Fatal(err)
	}
	if e.Type != "exit" || e.NextCursor != 7 || !json.Valid(e.Status) {
		t.Fatalf("exit: %+v status %s", e, e.Status)
	}
	for _, bad := range []string{``, `[]`, `{"type":}`, `{"type":"output"`, `{"data":"x}`} {
		if err := parseEvent([]byte(bad), &e); err == nil {
			t.Errorf("parseEvent(%q): no error", bad)
		}
	}
}

func stream(lines ...string) lineSource {
	return newNDJSONSource(io.NopCloser(strings.NewReader(strings.Join(lines, "\n") + "\n")))
}

func TestConsume(t *testing.T) {
	var st followStats
	err := consume(stream(
		`{"type":"started","status":{"command_id":"x"},"next_cursor":0}`,
		`{"type":"output","stream":"stdout","cursor":0,"data":"ab","next_cursor":2}`,
		`{"type":"gap","cursor":2,"dropped_bytes":5,"next_cursor":7}`,
		`{"type":"heartbeat","next_cursor":7}`,
		`{"type":"output","stream":"stdout","cursor":7,"data":"c\n","next_cursor":9}`,
		`{"type":"exit","status":{"state":"exited"},"next_cursor":9}`,
	), &st, true)
	if err != nil {
		t.Fatal(err)
	}
	if st.Bytes != 4 || st.Gaps != 1 || st.Dropped != 5 || st.Next != 9 || string(st.Stdout) != "abc\n" || !bytes.Contains(st.Exit, []byte("exited")) {
		t.Fatalf("got %+v", st)
	}

	st = followStats{}
	if err := consume(stream(`{"type":"end","reason":"max_wait","next_cursor":0}`), &st, false); err != errWindowEnd {
		t.Fatalf("end: %v; want errWindowEnd", err)
	}
	for name, lines := range map[string][]string{
		"hole":       {`{"type":"output","stream":"stdout","cursor":1,"data":"a","next_cursor":2}`},
		"short data": {`{"type":"output","stream":"stdout","cursor":0,"data":"a","next_cursor":2}`},
		"bad exit":   {`{"type":"exit","status":{},"next_cursor":5}`},
		"eof":        {`{"type":"output","stream":"stdout","cursor":0,"data":"a","next_cursor":1}`},
	} {
		st = followStats{}
		if err := consume(stream(lines...), &st, false); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestProduce(t *testing.T) {
	var b bytes.Buffer
	if err := produce(&b, 200<<10+7); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 200<<10+7 || b.Bytes()[63] != '\n' || b.Bytes()[0] != 'a' {
		t.Fatalf("produce: %d bytes, %q…", b.Len(), b.Bytes()[:70])
	}
}

func TestCheckLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:1": true, "[::1]:2": true, "localhost:3": true, "10.0.0.1:4": false, "example.com:80": false} {
		if err := checkLoopback(addr); (err == nil) != ok {
			t.Errorf("checkLoopback(%s) = %v", addr, err)
		}
	}
}

func TestQuickFlags(t *testing.T) {
	o, err := parseFlags([]string{"-quick", "-runs", "50"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.runs != 50 || o.latencyN != 100 || o.streamBytes != 32<<20 || o.fanoutRing != 4<<20 {
		t.Fatalf("quick: %+v", o)
	}
	if _, err := parseFlags([]string{"-scenarios", "nope"}, io.Discard); err == nil {
		t.Fatal("unknown scenario accepted")
	}
	if _, err := parseFlags([]string{"-addr", "10.1.2.3:8888"}, io.Discard); err == nil {
		t.Fatal("non-loopback -addr accepted")
	}
}

// TestParseEventMatchesWire ties the fast parser to the protocol's one
// definition of an event: every field of wire.Event is either parsed or
// named here as skipped, and events encoded from wire.Event parse to the
// same values encoding/json gives.
func TestParseEventMatchesWire(t *testing.T) {
	parsed := map[string]bool{"type": true, "stream": true, "cursor": true, "data": true, "encoding": true,
		"dropped_bytes": true, "reason": true, "status": true, "next_cursor": true}
	skipped := map[string]bool{"error": true} // WebSocket only; the bench reads NDJSON
	rt := reflect.TypeOf(wire.Event{})
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if !parsed[name] && !skipped[name] {
			t.Errorf("wire.Event has a field %q the bench's parser neither reads nor skips", name)
		}
	}
	i64 := func(n int64) *int64 { return &n }
	for _, w := range []wire.Event{
		{Type: wire.EventStarted, Status: &wire.Status{CommandID: "x", Argv: []string{"a", `}"`}}, NextCursor: 0},
		{Type: wire.EventOutput, Stream: wire.StreamStdout, Cursor: i64(3), Data: "a\"b\\c\n\u2028é", NextCursor: 14},
		{Type: wire.EventOutput, Stream: wire.StreamStderr, Cursor: i64(0), Data: "/wAB", Encoding: wire.EncodingBase64, NextCursor: 3},
		{Type: wire.EventGap, Cursor: i64(2), DroppedBytes: i64(5), NextCursor: 7},
		{Type: wire.EventHeartbeat, NextCursor: 7},
		{Type: wire.EventEnd, Reason: wire.EndMaxWait, NextCursor: 9},
	} {
		line, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		var e event
		if err := parseEvent(line, &e); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		data, _ := e.Data()
		want, _ := w.Bytes()
		if e.Type != w.Type || e.Stream != w.Stream || e.Reason != w.Reason || e.Encoding != w.Encoding ||
			e.NextCursor != w.NextCursor || e.HasCursor != (w.Cursor != nil) || (w.Cursor != nil && e.Cursor != *w.Cursor) ||
			(w.DroppedBytes != nil && e.Dropped != *w.DroppedBytes) || (w.Type == wire.EventOutput && !bytes.Equal(data, want)) ||
			(w.Status != nil) != (e.Status != nil) {
			t.Errorf("%s parsed as %+v", line, e)
		}
	}
}
