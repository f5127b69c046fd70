package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
)

// The stream property (CONTRACT §4): a client that re-opens at the
// next_cursor of the last line it processed gets every byte exactly once.
// These tests produce random output (characters of 1–4 bytes, invalid
// UTF-8, NULs, random write sizes on both streams), read it over NDJSON and
// WebSocket, live and replayed, disconnecting and re-opening at random, and
// compare what arrived with what was written.

var propSeed = flag.Uint64("stream.seed", 0, "seed of the stream property tests (0: random, logged)")

// helperWriteSpec names the environment variable that makes the test binary
// a child that replays a write spec (see runWriteSpec).
const helperWriteSpec = "SANDBOX_API_TEST_WRITE_SPEC"

// A write spec is a sequence of records: stream (1 stdout, 2 stderr),
// pause in microseconds before the write (uint32), length (uint32), bytes.
func appendSpecWrite(spec []byte, stream byte, pause time.Duration, data []byte) []byte {
	spec = append(spec, stream)
	spec = binary.LittleEndian.AppendUint32(spec, uint32(pause/time.Microsecond))
	spec = binary.LittleEndian.AppendUint32(spec, uint32(len(data)))
	return append(spec, data...)
}

// runWriteSpec is the child: each write is one write(2) of its bytes.
func runWriteSpec(path string) int {
	spec, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "write spec:", err)
		return 2
	}
	for len(spec) > 0 {
		stream, pause, n := spec[0], binary.LittleEndian.Uint32(spec[1:]), binary.LittleEndian.Uint32(spec[5:])
		data := spec[9 : 9+n]
		spec = spec[9+n:]
		time.Sleep(time.Duration(pause) * time.Microsecond) // pacing of the output, not synchronisation
		f := os.Stdout
		if stream == 2 {
			f = os.Stderr
		}
		if _, err := f.Write(data); err != nil {
			return 3
		}
	}
	return 0
}

// randomOutput returns about size bytes of hostile output for one stream:
// runs of ASCII, of 2-, 3- and 4-byte characters (the 3-byte '€' of the
// original report among them), invalid bytes, truncated sequences and NULs.
func randomOutput(rng *rand.Rand, size int) []byte {
	pieces := [][]byte{
		[]byte("plain ascii line\n"), []byte("é"), []byte("€"), []byte("😀"), []byte("\u2028"),
		{0}, {0xff}, {0x80}, {0xe2, 0x82}, {0xf0, 0x9f, 0x98}, {0xc3}, []byte("\"\\\t\r"),
	}
	var out []byte
	for len(out) < size {
		p := pieces[rng.IntN(len(pieces))]
		for range 1 + rng.IntN(3000) { // long runs, so reads and events end inside them
			out = append(out, p...)
		}
	}
	return out[:size]
}

// propCase is one command whose output is known byte for byte.
type propCase struct {
	id             string
	stdout, stderr []byte
}

// startProp creates a command that writes random output in random-sized
// writes; with live set the writes are paced over about a second.
func startProp(t *testing.T, ts *testServer, rng *rand.Rand, live bool) propCase {
	t.Helper()
	pc := propCase{stdout: randomOutput(rng, 120<<10+rng.IntN(200<<10)), stderr: randomOutput(rng, rng.IntN(100<<10))}
	var spec []byte
	o, e := pc.stdout, pc.stderr
	for len(o) > 0 || len(e) > 0 {
		src, stream := &o, byte(1)
		if len(o) == 0 || (len(e) > 0 && rng.IntN(3) == 0) {
			src, stream = &e, 2
		}
		n := min(len(*src), 1+rng.IntN([]int{7, 300, 5000, 70000}[rng.IntN(4)]))
		var pause time.Duration
		if live {
			pause = time.Duration(rng.IntN(8000)) * time.Microsecond
		}
		spec = appendSpecWrite(spec, stream, pause, (*src)[:n])
		*src = (*src)[n:]
	}
	path := filepath.Join(t.TempDir(), "spec")
	if err := os.WriteFile(path, spec, 0o600); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	st := atCreate(t, ts, string(marshal(map[string]any{"argv": []string{exe}, "envs": map[string]string{helperWriteSpec: path}})))
	pc.id = st.CommandID
	return pc
}

// propReader collects a command's output from events and checks that the
// cursors are contiguous across every connection.
type propReader struct {
	t              *testing.T
	next           int64 // next_cursor of the last event processed
	stdout, stderr []byte
	events         int
	done           bool // the exit event arrived
}

// event processes one event object; it returns false after the last event
// of a connection (exit or end).
func (p *propReader) event(line []byte) bool {
	p.t.Helper()
	var ev atEvent
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		p.t.Fatalf("event %.200s: %v", line, err)
	}
	if ev.NextCursor == nil {
		p.t.Fatalf("event %.200s has no next_cursor", line)
	}
	p.events++
	switch ev.Type {
	case "output":
		if ev.Cursor == nil || ev.Data == nil {
			p.t.Fatalf("output event %.200s lacks cursor or data", line)
		}
		if *ev.Cursor != p.next {
			p.t.Fatalf("output event cursor %d; want %d, the next_cursor before it (event %.120s)", *ev.Cursor, p.next, line)
		}
		b := []byte(*ev.Data)
		if ev.Encoding == "base64" {
			var err error
			if b, err = base64.StdEncoding.DecodeString(*ev.Data); err != nil {
				p.t.Fatalf("output event: bad base64: %v", err)
			}
		} else if ev.Encoding != "" {
			p.t.Fatalf("output event encoding %q", ev.Encoding)
		}
		if len(b) == 0 {
			p.t.Fatalf("empty output event %s", line)
		}
		if want := *ev.Cursor + int64(len(b)); *ev.NextCursor != want {
			p.t.Fatalf("output next_cursor %d; want cursor+len = %d", *ev.NextCursor, want)
		}
		switch ev.Stream {
		case "stdout":
			p.stdout = append(p.stdout, b...)
		case "stderr":
			p.stderr = append(p.stderr, b...)
		default:
			p.t.Fatalf("output event stream %q", ev.Stream)
		}
	case "gap":
		p.t.Fatalf("gap event %s: the output fits in the ring", line)
	case "heartbeat":
		if *ev.NextCursor != p.next {
			p.t.Fatalf("heartbeat next_cursor %d; want %d", *ev.NextCursor, p.next)
		}
	case "started":
	case "exit", "end":
		if *ev.NextCursor != p.next {
			p.t.Fatalf("%s next_cursor %d; want %d", ev.Type, *ev.NextCursor, p.next)
		}
		p.done = ev.Type == "exit"
		return false
	default:
		p.t.Fatalf("unexpected event %s", line)
	}
	p.next = *ev.NextCursor
	return true
}

// check compares what arrived with what was written.
func (p *propReader) check(pc propCase, what string) {
	p.t.Helper()
	if !p.done {
		p.t.Fatalf("%s: no exit event", what)
	}
	for _, s := range []struct {
		name      string
		got, want []byte
	}{{"stdout", p.stdout, pc.stdout}, {"stderr", p.stderr, pc.stderr}} {
		if !bytes.Equal(s.got, s.want) {
			i := 0
			for i < len(s.got) && i < len(s.want) && s.got[i] == s.want[i] {
				i++
			}
			p.t.Fatalf("%s: %s: got %d bytes; want %d; first difference at byte %d", what, s.name, len(s.got), len(s.want), i)
		}
	}
	if total := int64(len(pc.stdout) + len(pc.stderr)); p.next != total {
		p.t.Fatalf("%s: final next_cursor %d; want %d", what, p.next, total)
	}
}

// readNDJSON reads the stream from p.next until exit, closing the
// connection after a random number of events and re-opening at p.next.
func readNDJSON(t *testing.T, ts *testServer, rng *rand.Rand, pc propCase) *propReader {
	p := &propReader{t: t}
	for opens := 0; !p.done; opens++ {
		if opens > 2000 {
			t.Fatalf("no exit after %d re-opens (next_cursor %d)", opens, p.next)
		}
		q := "cursor=" + strconv.FormatInt(p.next, 10)
		if rng.IntN(3) == 0 {
			q += "&max_wait=0." + strconv.Itoa(1+rng.IntN(5))
		}
		ctx, cancel := context.WithTimeout(context.Background(), atTimeout)
		req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/commands/"+pc.id+"/output?"+q, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("open %s: %v", q, err)
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			cancel()
			t.Fatalf("open %s: %d %s", q, resp.StatusCode, b)
		}
		br := bufio.NewReaderSize(resp.Body, 64<<10)
		budget := 1 + rng.IntN(12) // events before a disconnect
		for ; ; budget-- {
			if budget == 0 && rng.IntN(2) == 0 {
				break // hang up without reading further
			}
			line, err := br.ReadBytes('\n')
			if err != nil {
				t.Fatalf("stream %s ended without exit or end: %v", q, err)
			}
			if !p.event(bytes.TrimSuffix(line, []byte("\n"))) {
				break
			}
		}
		resp.Body.Close()
		cancel()
	}
	return p
}

// readWS does the same over WebSocket attachments.
func readWS(t *testing.T, ts *testServer, rng *rand.Rand, pc propCase) *propReader {
	p := &propReader{t: t}
	for opens := 0; !p.done; opens++ {
		if opens > 2000 {
			t.Fatalf("no exit after %d re-attaches (next_cursor %d)", opens, p.next)
		}
		ctx, cancel := context.WithTimeout(context.Background(), atTimeout)
		ws, resp, err := websocket.DefaultDialer.DialContext(ctx, atWSURL(ts, pc.id, "cursor="+strconv.FormatInt(p.next, 10)), nil)
		cancel()
		if err != nil {
			status := 0
			if resp != nil {
				status = resp.StatusCode
			}
			t.Fatalf("attach at %d: %v (status %d)", p.next, err, status)
		}
		budget := 1 + rng.IntN(12)
		for ; ; budget-- {
			if budget == 0 && rng.IntN(2) == 0 {
				break
			}
			ws.SetReadDeadline(time.Now().Add(atTimeout))
			kind, data, err := ws.ReadMessage()
			if err != nil {
				t.Fatalf("attach at %d: reading: %v", p.next, err)
			}
			if kind != websocket.TextMessage {
				t.Fatalf("frame type %d", kind)
			}
			if !p.event(data) {
				var ce *websocket.CloseError
				if _, _, err := ws.ReadMessage(); !errors.As(err, &ce) || ce.Code != websocket.CloseNormalClosure {
					t.Fatalf("after exit: %v; want a normal close", err)
				}
				break
			}
		}
		ws.Close()
	}
	return p
}

func propRand(t *testing.T) *rand.Rand {
	seed := *propSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (re-run with -stream.seed=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed^0x5eed))
}

func TestStreamExactlyOnceProperty(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	rng := propRand(t)
	for round := range 3 {
		for _, tr := range []struct {
			name string
			read func(*testing.T, *testServer, *rand.Rand, propCase) *propReader
		}{{"ndjson", readNDJSON}, {"websocket", readWS}} {
			live := startProp(t, ts, rng, true)
			readLive := tr.read(t, ts, rng, live)
			readLive.check(live, fmt.Sprintf("round %d %s live", round, tr.name))
			// The same command again, replayed from 0 after its end.
			tr.read(t, ts, rng, live).check(live, fmt.Sprintf("round %d %s replayed", round, tr.name))
		}
	}
}

// TestStreamCursorInsideCharacter is the original report: '€' * 1000,
// written 300 times (900 KB, within the ring), replayed from 0 in one NDJSON stream. Every read of
// 64 KiB ends inside a character; every event must still start where the
// one before ended, and the text must decode to the characters written.
func TestStreamCursorInsideCharacter(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	want := strings.Repeat(strings.Repeat("€", 1000), 300)
	var spec []byte
	for i := range 300 {
		spec = appendSpecWrite(spec, 1, 0, []byte(want[i*3000:(i+1)*3000]))
	}
	path := filepath.Join(t.TempDir(), "spec")
	os.WriteFile(path, spec, 0o600)
	exe, _ := os.Executable()
	st := atCreate(t, ts, string(marshal(map[string]any{"argv": []string{exe}, "envs": map[string]string{helperWriteSpec: path}})))
	atGet(t, ts, st.CommandID, 10)
	code, body := atDo(t, "GET", ts.URL+"/v1/commands/"+st.CommandID+"/output?cursor=0", "", nil)
	if code != http.StatusOK {
		t.Fatalf("output: %d %s", code, body)
	}
	p := &propReader{t: t}
	for line := range bytes.Lines(body) {
		p.event(bytes.TrimSuffix(line, []byte("\n")))
	}
	p.check(propCase{stdout: []byte(want)}, "replay from 0")
	// Re-opening at a next_cursor in the middle starts on a character.
	for line := range bytes.Lines(body) {
		var ev atEvent
		json.Unmarshal(line, &ev)
		if ev.Type != "output" || *ev.NextCursor == int64(len(want)) {
			continue
		}
		if *ev.NextCursor%3 != 0 || ev.Encoding != "" || !utf8.ValidString(*ev.Data) {
			t.Fatalf("event cursor %d next_cursor %d encoding %q: not on a character boundary of '€'*N", *ev.Cursor, *ev.NextCursor, ev.Encoding)
		}
	}
}
