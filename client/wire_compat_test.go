package client

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// TestWireTypesMatchDaemon decodes real answers of the daemon into the wire
// types with DisallowUnknownFields (a field the daemon sends and wire lacks
// fails), encodes them again and compares the two as JSON values (a field
// wire invents, or one it loses or changes, fails). The one exception: the
// terminal fields of a status, which a daemon without the "pty" feature
// does not send; with the feature they must match too.
func TestWireTypesMatchDaemon(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "SANDBOX_OUTPUT_LIMIT_BYTES=65536", "SANDBOX_HEARTBEAT_SECONDS=1",
		"SANDBOX_MAX_RUNNING=3", "SANDBOX_MAX_RETAINED=3")
	seen := map[string]bool{} // what kinds of answers were checked

	var notSent map[string]bool
	info := roundTrip[wire.Info](t, notSent, "info", do(t, "GET", d.url+"/v1/info", "", 200))
	if !info.HasFeature(wire.FeaturePTY) {
		notSent = map[string]bool{"pty": true, "pty_bytes": true, "waiting_for_input": true}
	}

	get := func(path string, wantStatus int) []byte {
		t.Helper()
		return do(t, "GET", d.url+path, "", wantStatus)
	}
	post := func(path, body string, wantStatus int) []byte {
		t.Helper()
		return do(t, "POST", d.url+path, body, wantStatus)
	}
	events := func(raw []byte) {
		t.Helper()
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			ev := roundTrip[wire.Event](t, notSent, "event", sc.Bytes())
			kind := ev.Type
			if ev.Encoding != "" {
				kind += "/" + ev.Encoding
			}
			seen["event "+kind] = true
		}
	}

	roundTrip[wire.Health](t, notSent, "health", get("/v1/health", 200))

	// A command with text, base64 and more output than the 64 KiB ring.
	argv, _ := json.Marshal(helperArgv("pattern", "3", "150000", "50000"))
	raw := post("/v1/commands", `{"argv":`+string(argv)+`,"envs":{"`+helperEnv+`":"pattern"}}`, 201)
	st := roundTrip[wire.Status](t, notSent, "status running", raw)
	roundTrip[wire.Status](t, notSent, "status finished", get("/v1/commands/"+st.CommandID+"?wait=20", 200))
	events(get("/v1/commands/"+st.CommandID+"/output?cursor=0", 200)) // gap, output, exit

	// started, heartbeat and end from a stream of a sleeping command.
	raw = post("/v1/commands?stream=true&max_wait=2.5", `{"argv":["sleep","30"]}`, 201)
	events(raw)
	var first wire.Event
	json.Unmarshal(raw[:bytes.IndexByte(raw, '\n')], &first)
	sleeper := first.Status.CommandID
	roundTrip[wire.Status](t, notSent, "status after signal", post("/v1/commands/"+sleeper+"/signal", `{"signal":"SIGCONT"}`, 200))

	// stdin, and an error frame over WebSocket.
	argv, _ = json.Marshal(helperArgv("cat"))
	raw = post("/v1/commands", `{"argv":`+string(argv)+`,"envs":{"`+helperEnv+`":"cat"},"stdin":true}`, 201)
	cat := roundTrip[wire.Status](t, notSent, "status stdin", raw)
	roundTrip[wire.StdinResponse](t, notSent, "stdin", post("/v1/commands/"+cat.CommandID+"/stdin", `{"data":"aGkK","encoding":"base64"}`, 202))
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(d.url, "http")+"/v1/commands/"+cat.CommandID+"/attach", nil)
	if err != nil {
		t.Fatal(err)
	}
	conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"nonsense"}`))
	for {
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, frame, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		if ev := roundTrip[wire.Event](t, notSent, "frame", frame); ev.Type == wire.EventError {
			seen["event error"] = true
			break
		}
	}
	conn.Close()

	roundTrip[wire.CommandList](t, notSent, "list", get("/v1/commands", 200))
	roundTrip[wire.Status](t, notSent, "status killed", post("/v1/commands/"+sleeper+"/kill", "", 200))
	roundTrip[wire.ErrorBody](t, notSent, "error", get("/v1/commands/00000000-0000-4000-8000-000000000000", 404))
	roundTrip[wire.ErrorBody](t, notSent, "error", post("/v1/commands", `{"argv":[]}`, 400))
	// A fourth handle evicts the oldest finished one: 410 with a reason.
	post("/v1/commands/"+cat.CommandID+"/kill", "", 200)
	post("/v1/commands", `{"argv":["true"]}`, 201)
	gone := roundTrip[wire.ErrorBody](t, notSent, "error gone", get("/v1/commands/"+st.CommandID, 410))
	if gone.Error.Reason != wire.GoneEvicted {
		t.Errorf("gone reason %q, want %q", gone.Error.Reason, wire.GoneEvicted)
	}

	if info.HasFeature(wire.FeaturePTY) { // a terminal command's status and output
		raw = post("/v1/commands?stream=true", `{"argv":["sh","-c","echo on-a-tty"],"pty":{"cols":90,"rows":20,"term":"vt100"}}`, 201)
		events(raw)
		var ev wire.Event
		json.Unmarshal(raw[:bytes.IndexByte(raw, '\n')], &ev)
		if ev.Status == nil || ev.Status.PTY == nil || ev.Status.PTY.Cols != 90 || ev.Status.PTY.Term != "vt100" {
			t.Errorf("pty status: %+v", ev.Status)
		}
		seen["event output pty"] = strings.Contains(string(raw), `"stream":"pty"`)
		if !seen["event output pty"] {
			t.Errorf("no pty output in %s", raw)
		}
	}

	do(t, "PUT", d.url+"/v1/files/sub/f.txt", "hello", 204)
	roundTrip[wire.DirListing](t, notSent, "listing", get("/v1/files/sub", 200))

	for _, k := range []string{"event started", "event output", "event output/base64", "event gap", "event heartbeat", "event end", "event exit", "event error"} {
		if !seen[k] {
			t.Errorf("no %s was checked", k)
		}
	}
}

func do(t *testing.T, method, url, body string, wantStatus int) []byte {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" && method != "PUT" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != wantStatus {
		t.Fatalf("%s %s: %d %s; want %d", method, url, resp.StatusCode, raw, wantStatus)
	}
	return raw
}

// roundTrip decodes raw into a T strictly, re-encodes it and compares.
// notSent are status fields the daemon may leave out (zero when it does).
func roundTrip[T any](t *testing.T, notSent map[string]bool, what string, raw []byte) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: decoding %s into %T: %v", what, raw, v, err)
	}
	if dec.More() {
		t.Fatalf("%s: more than one value in %s", what, raw)
	}
	again, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	json.Unmarshal(raw, &a)
	json.Unmarshal(again, &b)
	if diff := jsonDiff("", a, b, notSent); diff != "" {
		t.Errorf("%s: %T does not round-trip: %s\n daemon: %s\n   wire: %s", what, v, diff, raw, again)
	}
	return v
}

// jsonDiff describes the first difference between the daemon's value a and
// the re-encoded b, or "" when they match.
func jsonDiff(path string, a, b any, notSent map[string]bool) string {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		for k, av := range am {
			bv, ok := bm[k]
			if !ok {
				return fmt.Sprintf("%s.%s lost (daemon: %v)", path, k, av)
			}
			if d := jsonDiff(path+"."+k, av, bv, notSent); d != "" {
				return d
			}
		}
		_, isStatus := bm["command_id"]
		for k, bv := range bm {
			if _, ok := am[k]; !ok && !(isStatus && notSent[k] && isZeroJSON(bv)) {
				return fmt.Sprintf("%s.%s invented (the daemon does not send it)", path, k)
			}
		}
		return ""
	}
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok && bok {
		if len(as) != len(bs) {
			return fmt.Sprintf("%s: %d elements, want %d", path, len(bs), len(as))
		}
		for i := range as {
			if d := jsonDiff(fmt.Sprintf("%s[%d]", path, i), as[i], bs[i], notSent); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(a, b) {
		return fmt.Sprintf("%s: %v, want %v", path, b, a)
	}
	return ""
}

func isZeroJSON(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case bool:
		return !x
	case float64:
		return x == 0
	case string:
		return x == ""
	}
	return false
}
