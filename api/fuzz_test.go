package api

// Native Go fuzz targets for request decoding (hostile input). In a plain
// `go test` run the seeds below run as ordinary tests; to fuzz one target:
//
//	go test ./api -run '^$' -fuzz '^FuzzDecodeCreate$' -fuzztime 30s
//
// Each target checks properties rather than exact answers: decoding never
// panics, every refusal is a client error (400/413, never 5xx), and what is
// accepted is well-formed (round-trips, in range).

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/ringbuf"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// fzClientError fails unless err maps to a client error with a message.
func fzClientError(t *testing.T, err error, allowed ...int) {
	t.Helper()
	status, code := statusOf(err)
	if status >= 500 || code == "internal" {
		t.Fatalf("error %q maps to %d %s; want a client error", err, status, code)
	}
	if len(allowed) > 0 && !contains2(allowed, status) {
		t.Fatalf("error %q maps to %d %s; want one of %v", err, status, code, allowed)
	}
	if err.Error() == "" {
		t.Fatalf("error with an empty message (%d %s)", status, code)
	}
}

func contains2(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// fzTopLevelKeys returns the keys of a top-level JSON object, in order,
// duplicates kept; ok is false when body is not an object.
func fzTopLevelKeys(body []byte) (keys []string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		k, _ := tok.(string)
		keys = append(keys, k)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, false
		}
	}
	return keys, true
}

// fzCheckKeys flags accepted bodies whose keys are not exactly the wire
// names, or repeat one: encoding/json matches keys case-insensitively and
// lets the last duplicate win, so {"argv":["true"],"ARGV":["rm","x"]} runs
// rm while a proxy that reads the exact key "argv" sees true.
func fzCheckKeys(t *testing.T, body []byte, names ...string) {
	t.Helper()
	keys, ok := fzTopLevelKeys(body)
	if !ok {
		return
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if !contains3(names, k) {
			t.Fatalf("decodeJSON accepted key %q, which is not a field name (case-insensitive match); body %q", k, fzClip(body))
		}
		if seen[k] {
			t.Fatalf("decodeJSON accepted the duplicate key %q (the last one wins); body %q", k, fzClip(body))
		}
		seen[k] = true
	}
}

func contains3(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func fzClip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

func fzRequest(body []byte) *http.Request {
	r := httptest.NewRequest("POST", "/v1/commands", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return r
}

// fzDecodeRoundTrip decodes body into a fresh T (a wire type) and, when
// accepted, checks that the value re-encodes and decodes to itself (as far
// as its encoding tells: a wire type omits what is empty).
func fzDecodeRoundTrip[T any](t *testing.T, body []byte, allowEmpty bool) (T, members, bool) {
	t.Helper()
	var v T
	m, err := decodeJSON(fzRequest(body), &v, allowEmpty)
	if err != nil {
		fzClientError(t, err, http.StatusBadRequest, http.StatusRequestEntityTooLarge)
		if len(body) > maxJSONBody && !errors.Is(err, errRequestTooLarge) {
			// Over the limit must be 413 unless it is refused for its first bytes.
			var probe T
			if _, perr := decodeJSON(fzRequest(body[:maxJSONBody]), &probe, allowEmpty); perr == nil {
				t.Fatalf("a body over the limit was refused with %v; want 413", err)
			}
		}
		return v, m, false
	}
	if len(body) > maxJSONBody {
		t.Fatalf("a body of %d bytes (> %d) was accepted", len(body), maxJSONBody)
	}
	if len(bytes.TrimSpace(body)) > 0 && !json.Valid(body) {
		t.Fatalf("invalid JSON accepted: %q", fzClip(body))
	}
	var again T
	if _, err := decodeJSON(fzRequest(marshal(v)), &again, allowEmpty); err != nil {
		t.Fatalf("re-encoded value %s refused: %v", marshal(v), err)
	}
	if !bytes.Equal(marshal(v), marshal(again)) {
		t.Fatalf("round trip changed the value: %#v -> %#v", v, again)
	}
	return v, m, true
}

var createSeeds = []string{
	`{"argv":["true"]}`,
	`{"argv":["echo","héllo","\u0000"],"envs":{"A":"1","":"x"},"cwd":"/tmp","timeout":1.5,"stdin":true}`,
	`{"command":"echo 'unterminated","timeout":-1}`,
	`{"command":"true","argv":["true"]}`,
	`{"argv":[],"timeout":0}`,
	`{"argv":"true"}`,
	`{"argv":[1,2]}`,
	`{"argv":["true"],"timeout":1e400}`,
	`{"argv":["true"],"timeout":-0}`,
	`{"argv":["true"],"timeout":9007199254740993}`,
	`{"argv":["true"],"timeout":"5"}`,
	`{"argv":["true"],"stdin":"yes"}`,
	`{"argv":["true"],"command_id":"6F9619FF-8B86-D011-B42D-00C04FC964FF"}`,
	`{"argv":["true"],"command_id":"{6f9619ff-8b86-d011-b42d-00c04fc964ff}"}`,
	`{"argv":["true"],"unknown":1}`,
	`{"argv":["true"],"ARGV":["rm","-rf","x"]}`,
	`{"argv":["true"],"argv":["false"]}`,
	`{"argv":["true"]} {"argv":["true"]}`,
	`{"argv":["true"]`,
	`[{"argv":["true"]}]`,
	`null`,
	``,
	`   `,
	"{\"argv\":[\"\xff\xfe\"]}",
	`{"argv":["\ud800"]}`,
	`{"envs":{"A=B":"x","\u0000":"y"},"argv":["true"]}`,
	`{"argv":[` + strings.Repeat(`"x",`, 100) + `"x"]}`,
	strings.Repeat("[", 20000) + strings.Repeat("]", 20000),
}

// FuzzDecodeCreate fuzzes the body of POST /v1/commands (decodeJSON into
// wire.CreateRequest, then createRequest).
func FuzzDecodeCreate(f *testing.F) {
	for _, s := range createSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b, m, ok := fzDecodeRoundTrip[wire.CreateRequest](t, body, false)
		if !ok {
			return
		}
		fzCheckKeys(t, body, "argv", "command", "envs", "cwd", "timeout", "stdin", "command_id", "pty")
		if _, err := createRequest(&b, m); err != nil {
			fzClientError(t, err, http.StatusBadRequest)
		}
	})
}

// FuzzDecodeStdin fuzzes POST /v1/commands/{id}/stdin: decodeJSON into
// wire.StdinRequest, then stdinOf.
func FuzzDecodeStdin(f *testing.F) {
	for _, s := range []string{
		`{"data":"hello\n"}`,
		`{"data":"aGVsbG8=","encoding":"base64","eof":true}`,
		`{"data":"aGVsbG8","encoding":"base64"}`,
		`{"data":"!!!","encoding":"base64"}`,
		`{"data":"x","encoding":"hex"}`,
		`{"data":"x","encoding":"BASE64"}`,
		`{"data":"\u0000\ud800","encoding":"utf-8"}`,
		`{"data":null,"eof":"true"}`,
		`{"eof":true}`,
		`{"data":1}`,
		`{"data":"x","Data":"y"}`,
		`{}`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b, _, ok := fzDecodeRoundTrip[wire.StdinRequest](t, body, false)
		if !ok {
			return
		}
		fzCheckKeys(t, body, "data", "encoding", "eof")
		data, eof, err := stdinOf(b)
		if err != nil {
			fzClientError(t, err, http.StatusBadRequest)
			return
		}
		if eof != b.EOF {
			t.Fatalf("eof %v mapped to %v", b.EOF, eof)
		}
		switch b.Encoding {
		case "base64":
			if got := base64.StdEncoding.EncodeToString(data); got != strings.NewReplacer("\r", "", "\n", "").Replace(b.Data) {
				t.Fatalf("base64 %q decoded to %d bytes that re-encode as %q", b.Data, len(data), got)
			}
		case "", "utf-8", "text":
			if string(data) != b.Data {
				t.Fatalf("text stdin changed: %q -> %q", b.Data, data)
			}
		default:
			t.Fatalf("encoding %q accepted", b.Encoding)
		}
	})
}

// FuzzDecodeSignal fuzzes POST /v1/commands/{id}/signal: decodeJSON into
// wire.SignalRequest, then signalOf.
func FuzzDecodeSignal(f *testing.F) {
	for _, s := range []string{
		`{"signal":"SIGINT"}`, `{"signal":"int"}`, `{"signal":" sigterm "}`, `{"signal":2}`, `{"signal":"9"}`,
		`{"signal":0}`, `{"signal":-1}`, `{"signal":65}`, `{"signal":2.0}`, `{"signal":1e10}`,
		`{"signal":99999999999999999999}`, `{"signal":"SIG"}`, `{"signal":""}`, `{"signal":null}`,
		`{"signal":[]}`, `{"signal":{}}`, `{"signal":true}`, `{}`, `{"signal":"SIGRTMIN"}`, `{"signal":"\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var b wire.SignalRequest
		m, err := decodeJSON(fzRequest(body), &b, false)
		if err != nil {
			fzClientError(t, err, http.StatusBadRequest, http.StatusRequestEntityTooLarge)
			return
		}
		fzCheckKeys(t, body, "signal")
		sig, err := signalOf(b, m)
		if err != nil {
			fzClientError(t, err, http.StatusBadRequest)
			return
		}
		if sig < 1 || sig > 64 {
			t.Fatalf("signal %d accepted from %s", sig, b.Signal)
		}
	})
}

// FuzzQuery fuzzes the query decoding of the v1 routes: parseQuery with the
// parameters of /output, then cursor, boolean and seconds.
func FuzzQuery(f *testing.F) {
	for _, s := range []string{
		"", "cursor=0", "cursor=10&follow=false&max_wait=1.5", "cursor=-1", "cursor=9223372036854775808",
		"cursor=1e3", "cursor=+5", "cursor=0x10", "follow=maybe", "follow=T", "max_wait=NaN", "max_wait=Inf",
		"max_wait=-0", "max_wait=1e308", "max_wait=0x1p-2", "cursor=1&cursor=2", "Cursor=1", "x=1", "%zz",
		"cursor=1;follow=true", "cursor", "cursor=&follow=", "max_wait=%00", "cursor=%E2%80%A8",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := httptest.NewRequest("GET", "/v1/commands/x/output", nil)
		r.URL.RawQuery = raw
		q := parseQuery(r, "cursor", "follow", "max_wait")
		cursor := q.cursor("cursor")
		follow := q.boolean("follow", true)
		window := q.seconds("max_wait", defaultWindowSeconds, maxWindowSeconds)
		if q.err != nil {
			fzClientError(t, q.err, http.StatusBadRequest)
			return
		}
		_ = follow
		if cursor < 0 {
			t.Fatalf("cursor %d accepted from %q", cursor, raw)
		}
		if !(window >= 0 && window <= maxWindowSeconds) {
			t.Fatalf("max_wait %v accepted from %q", window, raw)
		}
		if d := secondsDur(window); d < 0 {
			t.Fatalf("max_wait %v gives a negative duration %v", window, d)
		}
		// An accepted query names only known parameters, once each.
		for k, v := range q.v {
			if !contains3([]string{"cursor", "follow", "max_wait"}, k) || len(v) != 1 {
				t.Fatalf("accepted %q: parameter %q x%d", raw, k, len(v))
			}
		}
	})
}

// FuzzOutputEvent checks the encoder behind every output event: for any
// bytes, the event is valid JSON that decodes back to exactly those bytes
// (text when valid UTF-8, base64 otherwise), with consistent cursors, and
// is byte for byte wire.Event's encoding; and runeBoundary and
// runtime.UTF8Prefix never split a character of valid text.
func FuzzOutputEvent(f *testing.F) {
	for _, s := range []string{"", "hello\n", "\x00\x01\x1f\x7f", "\"\\", "\u2028\u2029", "héllo wörld ✓ 🙂",
		"\xff\xfe", "\xe2\x82", "a\xe2\x82\xacb", "\xf0\x9f\x99", "\xed\xa0\x80", "<>&", "\b\f\v"} {
		f.Add([]byte(s), int64(0), uint16(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, cursor int64, cut uint16) {
		if cursor < 0 {
			cursor = -cursor
		}
		if cursor < 0 { // MinInt64
			cursor = 0
		}
		cursor %= 1 << 50
		for _, stream := range []ringbuf.Stream{ringbuf.Stdout, ringbuf.Stderr} {
			line := appendOutputEvent(nil, stream, cursor, data)
			if !json.Valid(line) {
				t.Fatalf("invalid JSON for %q: %s", data, line)
			}
			if bytes.ContainsAny(line, "\n\r") {
				t.Fatalf("an NDJSON line contains a raw newline: %q", line)
			}
			var e struct {
				Type       string `json:"type"`
				Stream     string `json:"stream"`
				Cursor     int64  `json:"cursor"`
				Data       string `json:"data"`
				Encoding   string `json:"encoding"`
				NextCursor int64  `json:"next_cursor"`
			}
			if err := json.Unmarshal(line, &e); err != nil {
				t.Fatal(err)
			}
			got := []byte(e.Data)
			if e.Encoding == "base64" {
				var err error
				if got, err = base64.StdEncoding.DecodeString(e.Data); err != nil {
					t.Fatal(err)
				}
			} else if !utf8.Valid(data) {
				t.Fatalf("invalid UTF-8 %q sent as text", data)
			}
			if !bytes.Equal(got, data) || e.Type != "output" || e.Stream != stream.String() ||
				e.Cursor != cursor || e.NextCursor != cursor+int64(len(data)) {
				t.Fatalf("event %s does not carry %q at %d", line, data, cursor)
			}
			if n, ok := frameNextCursor(line); !ok || n != e.NextCursor {
				t.Fatalf("frameNextCursor(%s) = %d, %v; want %d", line, n, ok, e.NextCursor)
			}
			// The fast path writes exactly what the one wire definition
			// encodes to (the server's encoding: no HTML escaping). An
			// output event is never empty (a pipe read of 0 bytes is none).
			if len(data) > 0 {
				want := wire.Event{Type: wire.EventOutput, Stream: stream.String(), Cursor: &cursor, Data: e.Data, Encoding: e.Encoding, NextCursor: e.NextCursor}
				if w := httpx.Marshal(want); !bytes.Equal(line, w) {
					t.Fatalf("appendOutputEvent(%q) = %s; wire.Event encodes as %s", data, line, w)
				}
			}
		}
		if len(data) > 1 { // runeBoundary's precondition: 0 < n < len(data)
			n := int(cut)%(len(data)-1) + 1
			b := runeBoundary(data, n)
			if b < 0 || b > n || n-b > utf8.UTFMax {
				t.Fatalf("runeBoundary(%q, %d) = %d", data, n, b)
			}
			if utf8.Valid(data) && !utf8.Valid(data[:b]) && b != n {
				t.Fatalf("runeBoundary split a character: %q[:%d]", data, b)
			}
		}
		c := runtime.UTF8Prefix(data)
		if c < 0 || c > len(data) || len(data)-c >= utf8.UTFMax {
			t.Fatalf("UTF8Prefix(%q) = %d", data, c)
		}
		if utf8.Valid(data) && c != len(data) {
			t.Fatalf("UTF8Prefix cut valid text %q at %d", data, c)
		}
	})
}

// FuzzEventNextCursor checks that frameNextCursor (the WebSocket writer's
// way to track the cursor) reads the top-level next_cursor of every event
// the server marshals, whatever strings its status carries.
func FuzzEventNextCursor(f *testing.F) {
	f.Add("next_cursor", `"next_cursor":5}`, int64(7), uint8(0))
	f.Add("\"next_cursor\":1}", "x", int64(0), uint8(1))
	f.Add("", "", int64(1<<40), uint8(2))
	f.Fuzz(func(t *testing.T, arg, reason string, next int64, kind uint8) {
		if next < 0 {
			next = 0
		}
		st := runtime.Status{CommandID: arg, Argv: []string{arg, reason}, Cwd: reason}
		var ev event
		switch kind % 4 {
		case 0:
			ev = event{Type: "exit", Status: &st, NextCursor: next}
		case 1:
			ev = event{Type: "end", Reason: reason, NextCursor: next}
		case 2:
			ev = event{Type: "started", Status: &st, NextCursor: next}
		default:
			c, d := next, int64(len(arg))
			ev = event{Type: "gap", Cursor: &c, DroppedBytes: &d, NextCursor: next}
		}
		line := marshal(ev)
		if n, ok := frameNextCursor(line); !ok || n != next {
			t.Fatalf("frameNextCursor(%s) = %d, %v; want %d", line, n, ok, next)
		}
	})
}

// fzAttach is one running command (`cat` with stdin) that the WebSocket
// frame fuzzer applies frames to, created once per fuzzing process.
var (
	fzAttachOnce sync.Once
	fzAttachSrv  *testServer
	fzAttachCmd  *runtime.Command
	fzAttachErr  error
)

func fzAttachment(f *testing.F) *attachment {
	fzAttachOnce.Do(func() {
		fzAttachSrv = newTestServer(f, nil)
		st, _, err := fzAttachSrv.M.Create(runtime.CreateRequest{Argv: []string{"cat"}, Stdin: true, Timeout: ptr(3600.0)})
		if err != nil {
			fzAttachErr = err
			return
		}
		fzAttachCmd, fzAttachErr = fzAttachSrv.M.Get(st.CommandID)
	})
	if fzAttachErr != nil {
		f.Fatal(fzAttachErr)
	}
	return &attachment{s: fzAttachSrv.Server, c: fzAttachCmd}
}

func ptr[T any](v T) *T { return &v }

// FuzzAttachFrame fuzzes the client frames of GET /v1/commands/{id}/attach
// through attachment.apply, against a real `cat` command: decoding never
// panics, every refusal maps to a client error (4xx), and only the three
// frame types with their exact fields are accepted.
func FuzzAttachFrame(f *testing.F) {
	for _, s := range []string{
		`{"type":"stdin","data":"hello\n"}`,
		`{"type":"stdin","data":"aGk=","encoding":"base64","eof":false}`,
		`{"type":"stdin","data":"x","encoding":"rot13"}`,
		`{"type":"stdin","data":"x","extra":1}`,
		`{"type":"signal","signal":"SIGCONT"}`,
		`{"type":"signal","signal":28}`,
		`{"type":"signal","signal":"SIGNOPE"}`,
		`{"type":"signal"}`,
		`{"type":"kill","now":true}`,
		`{"type":"KILL"}`,
		`{"type":""}`,
		`{"type":1}`,
		`{}`,
		`[]`,
		`"stdin"`,
		`{"type":"stdin","data":"x"} {"type":"kill"}`,
		`{"type":"stdin","type":"kill"}`,
		`{"TYPE":"stdin","data":"x"}`,
		``,
	} {
		f.Add([]byte(s))
	}
	a := fzAttachment(f)
	f.Fuzz(func(t *testing.T, frame []byte) {
		var ft frameType
		// Keep the command alive for the other inputs: kill frames and
		// signals that end or stop it are decoded but not applied.
		if json.Unmarshal(frame, &ft) == nil && ft.Type == "kill" {
			if _, err := decodeFrame(frame, &frameType{}); err != nil {
				fzClientError(t, err, http.StatusBadRequest)
			}
			return
		}
		if ft.Type == "stdin" {
			var sf stdinFrame
			if _, err := decodeFrame(frame, &sf); err == nil && sf.EOF {
				if _, _, err := stdinOf(sf.StdinRequest); err != nil {
					fzClientError(t, err, http.StatusBadRequest)
				}
				return
			}
		}
		if ft.Type == "signal" {
			var sf signalFrame
			if m, err := decodeFrame(frame, &sf); err == nil {
				if sig, err := signalOf(sf.SignalRequest, m); err == nil && sig != 18 && sig != 28 { // SIGCONT, SIGWINCH
					return
				}
			}
		}
		err := a.apply(frame)
		if err == nil {
			if ft.Type != "stdin" && ft.Type != "signal" {
				t.Fatalf("frame %q accepted with type %q", frame, ft.Type)
			}
			return
		}
		fzClientError(t, err, http.StatusBadRequest, http.StatusConflict, http.StatusTooManyRequests)
	})
}

// FuzzOutputEventFit checks the follower's one-pass encoder: with any
// budget, appendJSONTextFit's text is exactly appendJSONText's of the prefix
// it took (which FuzzOutputEvent holds byte-equal to encoding/json), the
// prefix is never empty, never inside a character, fits the budget and is
// the longest that does; nextOutputEvent's line is what wire.Event encodes
// to for the bytes it took.
func FuzzOutputEventFit(f *testing.F) {
	for _, s := range []string{"hello\n", "\x00\x01\x1f\x7f", "\"\\", "\u2028\u2029", "héllo wörld ✓ 🙂",
		"\xff\xfe", "a\xe2\x82\xacb", "\b\f\v", "abcdefghijklmnopqrstuvwxyz\"\\\n\x01", "plain ascii that is long enough for the 8-byte loop"} {
		f.Add([]byte(s), uint16(6))
		f.Add([]byte(s), uint16(13))
	}
	f.Fuzz(func(t *testing.T, data []byte, b uint16) {
		budget := 6 + int(b)%200
		text, n, ok := appendJSONTextFit([]byte("pre"), data, budget)
		if !ok {
			if _, whole := appendJSONText(nil, data); whole {
				t.Fatalf("appendJSONTextFit(%q, %d) refused valid UTF-8", data, budget)
			}
			if string(text) != "pre" {
				t.Fatalf("appendJSONTextFit(%q, %d) changed dst on refusal: %q", data, budget, text)
			}
			return
		}
		if len(data) > 0 && n <= 0 || n > len(data) {
			t.Fatalf("appendJSONTextFit(%q, %d) took %d bytes", data, budget, n)
		}
		want, wok := appendJSONText([]byte("pre"), data[:n])
		if !wok || !bytes.Equal(text, want) {
			t.Fatalf("appendJSONTextFit(%q, %d) = %q (%d bytes); appendJSONText of them: %q", data, budget, text, n, want)
		}
		if len(text)-3 > budget && len(data)*6 > budget {
			t.Fatalf("appendJSONTextFit(%q, %d): %d bytes of text", data, budget, len(text)-3)
		}
		if n < len(data) {
			if !utf8.RuneStart(data[n]) {
				t.Fatalf("appendJSONTextFit(%q, %d) cut inside a character at %d", data, budget, n)
			}
			_, size := utf8.DecodeRune(data[n:])
			if more, mok := appendJSONText(nil, data[:n+size]); mok && len(more) <= budget {
				t.Fatalf("appendJSONTextFit(%q, %d) stopped at %d; %d bytes (%d of text) fit", data, budget, n, n+size, len(more))
			}
		}
		if len(data) == 0 {
			return
		}
		line, m := nextOutputEvent(nil, ringbuf.Stdout, 7, data)
		if m <= 0 || m > len(data) {
			t.Fatalf("nextOutputEvent(%q) took %d bytes", data, m)
		}
		var e wire.Event
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("nextOutputEvent(%q) = %s: %v", data, line, err)
		}
		cursor := int64(7)
		w := wire.Event{Type: wire.EventOutput, Stream: "stdout", Cursor: &cursor, Data: e.Data, Encoding: e.Encoding, NextCursor: 7 + int64(m)}
		if m != len(data) && len(data) <= maxEventData && len(data)*6 <= maxEventText {
			t.Fatalf("nextOutputEvent(%q) cut %d bytes that fit", data, m)
		}
		if !bytes.Equal(line, httpx.Marshal(w)) || !bytes.Equal(line, appendOutputEvent(nil, ringbuf.Stdout, 7, data[:m])) {
			t.Fatalf("nextOutputEvent(%q) = %s; wire.Event encodes as %s", data, line, httpx.Marshal(w))
		}
	})
}
