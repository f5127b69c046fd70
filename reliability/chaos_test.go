//go:build reliability && linux

package reliability

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// dropConn closes c abruptly: with a reset (SO_LINGER 0) or a plain FIN.
func dropConn(c net.Conn, reset bool) {
	if tc, ok := c.(*net.TCPConn); ok && reset {
		tc.SetLinger(0)
	}
	c.Close()
}

// feeder writes numbered lines to a command's stdin through the API, one
// request at a time, and remembers exactly what was accepted.
type feeder struct {
	d    *daemon
	id   string
	mu   sync.Mutex
	sent bytes.Buffer
}

func (f *feeder) feed(line string) error {
	code, data, _, err := f.d.call("POST", "/v1/commands/"+f.id+"/stdin", map[string]any{"data": line})
	if err != nil {
		return err
	}
	if code != http.StatusAccepted {
		return fmt.Errorf("stdin: %d %s", code, data)
	}
	var r wire.StdinResponse
	json.Unmarshal(data, &r)
	if r.QueuedBytes != len(line) {
		return fmt.Errorf("stdin: queued %d of %d bytes", r.QueuedBytes, len(line))
	}
	f.mu.Lock()
	f.sent.WriteString(line)
	f.mu.Unlock()
	return nil
}

// replay returns the retained stdout and stderr of a finished command.
func (d *daemon) replay(id string) (stdout, stderr string, err error) {
	evs, err := d.output(id, 0)
	if err != nil {
		return "", "", err
	}
	var o, e strings.Builder
	var acc streamAccount
	for _, ev := range evs {
		if err := acc.add(ev, nil); err != nil {
			return "", "", err
		}
		if ev.Type == "output" && ev.Stream == "stdout" {
			o.WriteString(ev.Data)
		} else if ev.Type == "output" {
			e.WriteString(ev.Data)
		}
	}
	if acc.last.Type != "exit" {
		return "", "", fmt.Errorf("replay ended with %q", acc.last.Type)
	}
	return o.String(), e.String(), nil
}

// TestDisconnectChaos drops 1,000 NDJSON streams, WebSocket attaches, waits,
// creates and stdin POSTs at random points (mid-header, mid-event, mid-body,
// reset or FIN) while two commands echo what is fed to their stdin. After:
// every command finishes normally with exactly the bytes fed, and the
// daemon's goroutines and fds are back to baseline.
func TestDisconnectChaos(t *testing.T) {
	rng := newRand(t)
	ops := scale(2000, 1000)
	d := startDaemon(t, daemonConfig{env: map[string]string{"SANDBOX_KILL_GRACE_SECONDS": "0.5"}})

	// Warm up every path once, then take the baseline.
	w := d.mustCreate(map[string]any{"argv": []string{"echo", "warm"}})
	d.mustWaitFinished(w.CommandID, 10*time.Second)
	d.output(w.CommandID, 0)
	wsOK := false
	if c, resp, err := websocket.DefaultDialer.Dial("ws://"+d.addr+"/v1/commands/"+w.CommandID+"/attach", nil); err == nil {
		wsOK = true
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				break
			}
		}
		c.Close()
	} else {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		t.Logf("TODO: WebSocket attach not available (%v, status %d): attach drops are left out", err, code)
	}
	base := d.baseline()

	cat := d.mustCreate(map[string]any{"argv": []string{"cat"}, "stdin": true, "timeout": 300})
	tee := d.mustCreate(map[string]any{"argv": []string{"sh", "-c", `while IFS= read -r l; do printf '%s\n' "$l"; printf '%s\n' "$l" >&2; done`}, "stdin": true, "timeout": 300})
	feeds := []*feeder{{d: d, id: cat.CommandID}, {d: d, id: tee.CommandID}}
	pad := strings.Repeat("p", 1000)
	for i := range 100 {
		for _, f := range feeds {
			if err := f.feed(fmt.Sprintf("pre-%04d %s\n", i, pad)); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Let both echo the pre-feed, so that every cursor below 100,000 is valid.
	for _, id := range []string{cat.CommandID, tee.CommandID} {
		ok, msg := poll(10*time.Second, 10*time.Millisecond, func() (bool, string) {
			_, st, err := d.status(id, 0)
			return err == nil && st.NextCursor >= 100*1010, fmt.Sprint(st.NextCursor, err)
		})
		if !ok {
			t.Fatalf("the pre-feed was not echoed: %s", msg)
		}
	}

	// The feeder keeps writing during the chaos.
	var errs errSet
	stopFeed := make(chan struct{})
	var feedDone sync.WaitGroup
	feedDone.Add(1)
	go func() {
		defer feedDone.Done()
		for i := 0; ; i++ {
			select {
			case <-stopFeed:
				return
			default:
			}
			if err := feeds[i%2].feed(fmt.Sprintf("feed-%06d\n", i)); err != nil {
				errs.add("feeder: %v", err)
				return
			}
		}
	}()

	targets := []string{cat.CommandID, tee.CommandID}
	modes := []string{"mid-header", "mid-event", "create-stream", "stdin-mid-body", "wait-drop", "create-mid-body"}
	if wsOK {
		modes = append(modes, "ws-drop", "ws-drop")
	}
	var perMode sync.Map
	var created atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for worker := range 8 {
		r := rand.New(rand.NewPCG(rng.Uint64(), uint64(worker)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(ops) {
				mode := modes[r.IntN(len(modes))]
				n, _ := perMode.LoadOrStore(mode, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				if err := chaosOp(d, r, mode, targets[r.IntN(2)], &created); err != nil {
					errs.add("%s: %v", mode, err)
				}
			}
		}()
	}
	wg.Wait()
	chaosTook := time.Since(start)
	close(stopFeed)
	feedDone.Wait()
	mid, _ := d.resources()

	// End both commands with EOF; they must exit 0 with exactly what was fed.
	for _, f := range feeds {
		code, data := d.mustCall("POST", "/v1/commands/"+f.id+"/stdin", map[string]any{"eof": true})
		if code != http.StatusAccepted {
			t.Fatalf("eof: %d %s", code, data)
		}
	}
	for i, f := range feeds {
		st := d.mustWaitFinished(f.id, 30*time.Second)
		want := f.sent.String()
		if st.State != "exited" || st.exitCode() != 0 || st.StdoutBytes != int64(len(want)) {
			t.Errorf("command %d: %s exit %d stdout %d bytes; want exited 0 with %d bytes", i, st.State, st.exitCode(), st.StdoutBytes, len(want))
		}
		if i == 1 && st.StderrBytes != int64(len(want)) {
			t.Errorf("command %d: stderr %d bytes; want %d", i, st.StderrBytes, len(want))
		}
		if len(want)*(i+1) <= 1<<20 {
			out, serr, err := d.replay(f.id)
			if err != nil {
				t.Fatal(err)
			}
			if out != want || (i == 1 && serr != want) {
				t.Errorf("command %d: replayed output differs from what was fed (%d vs %d bytes)", i, len(out), len(want))
			}
		}
		figure(t, "chaos: command %d fed %d bytes over the API; finished %s exit %d with stdout %d stderr %d bytes", i, len(want), st.State, st.exitCode(), st.StdoutBytes, st.StderrBytes)
	}

	// Every command the chaos created finished normally.
	ok, _ := poll(15*time.Second, 50*time.Millisecond, func() (bool, string) {
		m, err := d.metrics()
		return err == nil && m["sandbox_runtime_commands_running"] == 0 && m["sandbox_runtime_stream_clients"] == 0 &&
			m["sandbox_runtime_websocket_clients"] == 0, ""
	})
	m := d.mustMetrics()
	started, exited := m["sandbox_runtime_commands_started_total"], m[`sandbox_runtime_commands_finished_total{state="exited"}`]
	if !ok || exited != started || finishedTotal(m) != started {
		t.Errorf("after the chaos: running %v streams %v websockets %v; started %v finished %v exited %v",
			m["sandbox_runtime_commands_running"], m["sandbox_runtime_stream_clients"], m["sandbox_runtime_websocket_clients"], started, finishedTotal(m), exited)
	}

	after, flat := d.settle(base, 3, 15*time.Second)
	var counts []string
	for _, mode := range modes {
		if n, ok := perMode.Load(mode); ok && !strings.Contains(strings.Join(counts, " "), mode+"=") {
			counts = append(counts, fmt.Sprintf("%s=%d", mode, n.(*atomic.Int64).Load()))
		}
	}
	figure(t, "chaos: %d dropped connections in %v (%s); %d commands created by dropped creates, all exited normally (started %v, exited %v)",
		ops, chaosTook.Round(time.Millisecond), strings.Join(counts, " "), created.Load(), started, exited)
	figure(t, "chaos: goroutines %d before, %d right after the chaos, %d settled; fds %d before, %d right after, %d settled (slack 3)",
		base.goroutines, mid.goroutines, after.goroutines, base.fds, mid.fds, after.fds)
	if !flat {
		t.Errorf("resources not back to baseline: %+v -> %+v", base, after)
	}
	errs.report(t, "chaos errors")
	if !d.alive() {
		t.Fatal("the daemon died")
	}
	d.assertCleanLogs()
}

// chaosOp performs one dropped interaction.
func chaosOp(d *daemon, r *rand.Rand, mode, target string, created *atomic.Int64) error {
	reset := r.IntN(2) == 0
	dial := func() (net.Conn, error) {
		c, err := net.DialTimeout("tcp", d.addr, 5*time.Second)
		if err == nil {
			c.SetDeadline(time.Now().Add(10 * time.Second))
		}
		return c, err
	}
	switch mode {
	case "mid-header":
		req := fmt.Sprintf("GET /v1/commands/%s/output?cursor=0 HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n", target, strings.Repeat("h", r.IntN(200)))
		c, err := dial()
		if err != nil {
			return err
		}
		c.Write([]byte(req[:1+r.IntN(len(req)-1)]))
		dropConn(c, reset)
	case "mid-event", "wait-drop":
		path := fmt.Sprintf("/v1/commands/%s/output?cursor=%d&max_wait=30", target, r.IntN(100_000))
		if mode == "wait-drop" {
			path = fmt.Sprintf("/v1/commands/%s?wait=20", target)
		}
		c, err := dial()
		if err != nil {
			return err
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		status := make([]byte, 12)
		if _, err := io.ReadFull(c, status); err != nil || string(status) != "HTTP/1.1 200" {
			dropConn(c, reset)
			return fmt.Errorf("answer %q, %v", status, err)
		}
		want := r.IntN(64 << 10)
		if mode == "wait-drop" {
			want = r.IntN(100) // headers arrive at once; the body only at the end
		}
		io.ReadFull(c, make([]byte, want))
		dropConn(c, reset)
	case "create-stream":
		body := `{"argv":["sh","-c","echo one; echo two >&2; echo three"]}`
		c, err := dial()
		if err != nil {
			return err
		}
		fmt.Fprintf(c, "POST /v1/commands?stream=true HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		status := make([]byte, 12)
		if _, err := io.ReadFull(c, status); err != nil {
			dropConn(c, reset)
			return fmt.Errorf("no answer: %v", err)
		}
		switch string(status) {
		case "HTTP/1.1 201":
			created.Add(1)
		case "HTTP/1.1 429":
		default:
			dropConn(c, reset)
			return fmt.Errorf("answer %q", status)
		}
		io.ReadFull(c, make([]byte, r.IntN(400)))
		dropConn(c, reset)
	case "stdin-mid-body", "create-mid-body":
		body := fmt.Sprintf(`{"data":"lost-%d\n"}`, r.IntN(1000))
		path := "/v1/commands/" + target + "/stdin"
		if mode == "create-mid-body" {
			body, path = `{"argv":["echo","never"]}`, "/v1/commands"
		}
		c, err := dial()
		if err != nil {
			return err
		}
		cut := r.IntN(len(body)) // a strict prefix: the request is incomplete
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body[:cut])
		if r.IntN(2) == 0 {
			// Half-close and read the answer: the body ends early, so 400.
			c.(*net.TCPConn).CloseWrite()
			buf := make([]byte, 12)
			n, _ := io.ReadAtLeast(c, buf, len(buf))
			if n > 0 && !bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 400")) {
				dropConn(c, reset)
				return fmt.Errorf("truncated body answered %q", buf[:n])
			}
		}
		dropConn(c, reset)
	case "ws-drop":
		dialer := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
		ws, resp, err := dialer.Dial(fmt.Sprintf("ws://%s/v1/commands/%s/attach?cursor=%d", d.addr, target, r.IntN(100_000)), nil)
		if err != nil {
			code := 0
			if resp != nil {
				code = resp.StatusCode
			}
			return fmt.Errorf("attach: %v (%d)", err, code)
		}
		ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		frames := r.IntN(6)
		if r.IntN(4) == 0 {
			ws.WriteMessage(websocket.BinaryMessage, []byte("junk")) // answered by an error event
		}
		for range frames {
			if _, _, err := ws.ReadMessage(); err != nil {
				break
			}
		}
		if r.IntN(3) == 0 {
			ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		}
		dropConn(ws.NetConn(), reset)
	}
	return nil
}
