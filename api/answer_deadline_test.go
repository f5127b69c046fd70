package api

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/internal/conntest"
)

// TestEveryAnswerWriteHasADeadline: the answers whose handlers set no
// deadline of their own (JSON bodies, refusals of the v1 and the legacy
// shape, a `?wait=` whose headers go out before its body, an answer without
// a body) are written under one (statusRecorder.armWrite), like the streams
// and /execute, which keep theirs. Before, net/http wrote them with none:
// a client that pipelined requests and never read held the connection for
// ever.
func TestEveryAnswerWriteHasADeadline(t *testing.T) {
	ts := newTestServer(t, nil)
	log := &conntest.Log{}
	hs := httptest.NewUnstartedServer(ts.Handler())
	hs.Listener = conntest.Listener{Listener: hs.Listener, Log: log}
	hs.Config.ConnContext = ConnContext
	hs.Config.ConnState = ts.ConnState
	hs.Start()
	t.Cleanup(hs.Close)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	t.Cleanup(client.CloseIdleConnections)

	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp.StatusCode, string(b)
	}
	// A command that is still running when ?wait= flushes its headers.
	_, created := do("POST", "/v1/commands", `{"argv":["sh","-c","read x; echo $x"],"stdin":true}`)
	var st struct {
		CommandID string `json:"command_id"`
	}
	if err := json.Unmarshal([]byte(created), &st); err != nil || st.CommandID == "" {
		t.Fatalf("create: %v %.200q", err, created)
	}
	id := st.CommandID
	steps := []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/v1/health", "", 200},
		{"GET", "/v1/no-such-route", "", 404},     // a v1 refusal
		{"GET", "/no-such-page", "", 404},         // the legacy shape's refusal
		{"POST", "/v1/commands", `{"argv":`, 400}, // a bad body
		{"GET", "/v1/commands/" + id, "", 200},    // a JSON body
		{"HEAD", "/v1/commands/" + id, "", 200},   // no body at all
		{"POST", "/v1/commands/" + id + "/stdin", `{"data":"go\n","eof":true}`, 202},
		{"GET", "/v1/commands/" + id + "?wait=10", "", 200},                 // headers flushed, then the body
		{"GET", "/v1/commands", "", 200},                                    // a listing
		{"GET", "/metrics", "", 200},                                        // promhttp's own writes
		{"POST", "/v1/commands?stream=true", `{"argv":["echo","hi"]}`, 201}, // a stream: its own deadlines
		{"GET", "/v1/health", "", 200},
	}
	for _, s := range steps {
		if status, body := do(s.method, s.path, s.body); status != s.status {
			t.Fatalf("%s %s: %d %.200q; want %d", s.method, s.path, status, body, s.status)
		}
	}
	if n := log.Conns(); n != 1 {
		t.Errorf("%d connections; want every request on one", n)
	}
	writes := log.Writes()
	if len(writes) < len(steps) {
		t.Fatalf("%d writes recorded for %d answers", len(writes), len(steps)+1)
	}
	for i, w := range writes {
		if w.Deadline.IsZero() || !w.Deadline.After(w.At) {
			t.Errorf("write %d of %d (%.60q) had deadline %v at %v; want one in the future", i, len(writes), w.Data, w.Deadline, w.At)
		}
	}
}

// TestGuardedAnswerWritesHaveADeadline: another listener's handler behind
// Server.Guard (sandboxd's REST) gets the same default: its own answers and
// the guard's refusals.
func TestGuardedAnswerWritesHaveADeadline(t *testing.T) {
	ts := newTestServer(t, nil)
	h := ts.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}), GuardOptions{Name: "guarded", Refuse: func(w http.ResponseWriter, status int, code, msg string) {
		http.Error(w, msg, status)
	}})
	log := &conntest.Log{}
	hs := httptest.NewUnstartedServer(h)
	hs.Listener = conntest.Listener{Listener: hs.Listener, Log: log}
	hs.Config.ConnContext = ConnContext
	hs.Config.ConnState = ts.ConnState
	hs.Start()
	t.Cleanup(hs.Close)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	t.Cleanup(client.CloseIdleConnections)
	for _, host := range []string{"", "elsewhere.example"} { // served, then refused (403: not a loopback Host)
		req, _ := http.NewRequest("GET", hs.URL+"/x", nil)
		if host != "" {
			req.Host = host
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if want := map[string]int{"": 200, "elsewhere.example": 403}[host]; resp.StatusCode != want {
			t.Fatalf("Host %q: %d; want %d", host, resp.StatusCode, want)
		}
	}
	writes := log.Writes()
	if len(writes) < 2 {
		t.Fatalf("%d writes recorded for 2 answers", len(writes))
	}
	for i, w := range writes {
		if w.Deadline.IsZero() || !w.Deadline.After(w.At) {
			t.Errorf("write %d of %d (%.60q) had deadline %v at %v; want one in the future", i, len(writes), w.Data, w.Deadline, w.At)
		}
	}
}

// TestPipeliningClientThatNeverReadsIsCut is the attack: a client sends
// request after request on one connection and never reads an answer. Once
// the socket buffers are full the daemon's write blocks; it must give the
// connection up after the write deadline (closing it resets the client's
// connection, whose unread requests were still queued) instead of holding
// it, its goroutine and its buffers for ever.
func TestPipeliningClientThatNeverReadsIsCut(t *testing.T) {
	ts := newTestServer(t, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A small receive window: the daemon's writes block sooner.
	if err := conn.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	req := []byte("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	wrote := make(chan error, 1)
	go func() {
		// Bounded: the connection is cut well before, or the test fails.
		conn.SetWriteDeadline(time.Now().Add(answerWriteWait + 30*time.Second))
		for {
			if _, err := conn.Write(req); err != nil {
				wrote <- err
				return
			}
		}
	}()
	select {
	case err := <-wrote:
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("the client's writes ended with %v; want the daemon to reset the connection", err)
		}
	case <-time.After(answerWriteWait + 40*time.Second):
		t.Fatal("the daemon still holds a connection whose client never reads")
	}
	// The daemon answered until its buffers were full: some answers are
	// there to read, then the reset.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer before the cut: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("first answer %d; want 200", resp.StatusCode)
	}
}
