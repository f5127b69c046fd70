package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/internal/conntest"
)

// TestEveryAnswerWriteHasADeadline: the answers whose handlers set no
// deadline of their own (JSON bodies, refusals of the v1 and the legacy
// shape, a `?wait=` whose headers go out before its body, an answer without
// a body) are written under one (httpx.BoundWrites' default), like the
// streams and /execute, which keep theirs. Before, net/http wrote them with none:
// a client that pipelined requests and never read held the connection for
// ever.
func TestEveryAnswerWriteHasADeadline(t *testing.T) {
	hs, log := recordingServer(t, newTestServer(t, nil), nil)
	do := func(method, path, body string) (int, string) {
		t.Helper()
		status, b := atDo(t, method, hs.URL+path, body, nil) // one kept-alive connection: requests in turn
		return status, string(b)
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
		conn.SetWriteDeadline(time.Now().Add(httpx.WriteWait + 30*time.Second))
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
	case <-time.After(httpx.WriteWait + 40*time.Second):
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

// TestNetHTTPsOwnWritesHaveADeadline: what net/http writes itself, outside
// any handler's writes, has the default deadline too (ConnState arms it when
// a request arrives): a 100 Continue (written inside the handler's first
// body read), and its refusals of a request it cannot parse (400, 417, 431,
// 501), each after a first request answered on the same connection. Found
// by the attack on the answers' deadlines: a client pipelining requests with
// Expect: 100-continue and never reading held connections for as long as it
// liked, each holding a slot of the body gate.
func TestNetHTTPsOwnWritesHaveADeadline(t *testing.T) {
	health := "GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
	for _, tc := range []struct{ name, raw, status string }{
		{"100-continue", "POST /v1/commands HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n{}", "100 Continue"},
		{"400", health + "BOGUS\r\n\r\n", "400 Bad Request"},
		{"417", health + "GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: foo\r\n\r\n", "417 Expectation Failed"},
		{"431", health + "GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + strings.Repeat("a", 80<<10) + "\r\n\r\n", "431 Request Header Fields Too Large"},
		{"501", health + "POST /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n", "501 Not Implemented"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs, log := recordingServer(t, newTestServer(t, nil), func(s *http.Server) {
				s.MaxHeaderBytes = 64 << 10 // as main's
			})
			c, err := net.Dial("tcp", hs.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte(tc.raw)); err != nil {
				t.Fatal(err)
			}
			// Every case ends with the daemon closing the connection.
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			got, err := io.ReadAll(c)
			if err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("reading the answers: %v (%.200q)", err, got)
			}
			if !strings.Contains(string(got), "HTTP/1.1 "+tc.status) {
				t.Fatalf("no %q among the answers %.300q", tc.status, got)
			}
			seen := false
			for i, w := range log.Writes() {
				line, _, _ := strings.Cut(string(w.Data), "\r\n")
				seen = seen || strings.Contains(line, tc.status)
				if w.Deadline.IsZero() || !w.Deadline.After(w.At) {
					t.Errorf("write %d (%.60q) had deadline %v at %v; want one in the future", i, line, w.Deadline, w.At)
				}
			}
			if !seen {
				t.Errorf("the %s was not written as a write of its own", tc.status)
			}
		})
	}
}

// sndbufListener accepts connections with a small send buffer, so that a
// large answer waits on its reader instead of on nothing.
type sndbufListener struct {
	net.Listener
	size int
}

func (l sndbufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		c.(*net.TCPConn).SetWriteBuffer(l.size)
	}
	return c, err
}

// TestLargeAnswerToASteadyReaderIsNotCut: a JSON answer larger than the
// socket buffers and than 10 s of its reader's pace (a listing of commands
// with big argvs, 2.1 MB here, read at 150 KB/s: 14 s) arrives whole. Its
// deadline is per 256 KiB of progress (statusRecorder.Write), as a file
// body's: the attack measured a 14 MB listing at 300 KB/s cut at 6.9 MB
// when one Write of the whole body had one 10 s deadline.
func TestLargeAnswerToASteadyReaderIsNotCut(t *testing.T) {
	ts := newTestServer(t, nil)
	hs := httptest.NewUnstartedServer(ts.Handler())
	hs.Listener = httpx.BoundWrites(sndbufListener{Listener: hs.Listener, size: 32 << 10})
	hs.Config.ConnContext = ConnContext
	hs.Config.ConnState = ts.ConnState
	hs.Start()
	t.Cleanup(hs.Close)
	argv := []string{"true"}
	for range 7 {
		argv = append(argv, strings.Repeat("x", 100_000)) // each within Linux's 128 KiB per argument
	}
	for range 3 {
		body, _ := json.Marshal(map[string]any{"argv": argv})
		resp, err := http.Post(hs.URL+"/v1/commands", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create: %d", resp.StatusCode)
		}
	}
	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(32 << 10)
	conn.SetDeadline(time.Now().Add(60 * time.Second)) // bounded
	if _, err := conn.Write([]byte("GET /v1/commands HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(&throttledReader{r: conn, rate: 150_000}, 4<<10), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || n != resp.ContentLength || n < 2_000_000 {
		t.Fatalf("read %d of %d bytes in %v: %v; want the whole listing", n, resp.ContentLength, time.Since(start), err)
	}
	t.Logf("%d bytes at 150 KB/s in %v", n, time.Since(start))
}

// recordingServer serves ts's handler as main does (httpx.BoundWrites,
// ConnContext, ConnState) on a listener that records every write and its
// deadline; config, if set, adjusts the http.Server before it starts.
func recordingServer(t *testing.T, ts *testServer, config func(*http.Server)) (*httptest.Server, *conntest.Log) {
	t.Helper()
	log := &conntest.Log{}
	hs := httptest.NewUnstartedServer(ts.Handler())
	hs.Listener = httpx.BoundWrites(conntest.Listener{Listener: hs.Listener, Log: log})
	hs.Config.ConnContext = ConnContext
	hs.Config.ConnState = ts.ConnState
	if config != nil {
		config(hs.Config)
	}
	hs.Start()
	t.Cleanup(hs.Close)
	return hs, log
}

// TestSlowFileReadersAreNotCut: a file body larger than loopback's
// autotuned send buffer (4 MiB), read at a steady 40 KB/s (above the
// promised 25.6 KiB/s) for 15 s and then at full speed, arrives whole:
// through GET /v1/files (its own deadline per 256 KiB) and legacy
// /download (BoundWrites' default), at once. Found by the attack on
// BoundWrites: both were cut at 10 s at 28-120 KB/s, because a write
// blocked on a full 4 MiB send buffer is woken only once about a third of
// it has drained; every connection now holds at most httpx.DefaultUnsent
// unsent (TCP_NOTSENT_LOWAT).
func TestSlowFileReadersAreNotCut(t *testing.T) {
	ts := newTestServer(t, nil)
	const size = 8 << 20
	if err := os.WriteFile(filepath.Join(ts.BaseDir, "big.bin"), bytes.Repeat([]byte("0123456789abcdef"), size/16), 0o644); err != nil {
		t.Fatal(err)
	}
	paths := []string{"/v1/files/big.bin", "/download/big.bin"}
	errs := make(chan error, len(paths))
	for _, p := range paths {
		go func() { errs <- slowThenFast(ts, p, size) }()
	}
	for range paths {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// slowThenFast reads path at 40 KB/s for 15 s through a 16 KiB receive
// buffer, then at full speed, and checks that all size bytes came.
func slowThenFast(ts *testServer, path string, size int64) error {
	// The small receive buffer is set before the connection is made, as a
	// slow client's would be: shrunk after the handshake, the window the
	// sender was told about can no longer be honoured.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10) })
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(60 * time.Second)) // bounded
	if _, err := conn.Write([]byte("GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4<<10), nil)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != size {
		return fmt.Errorf("%s: %d, Content-Length %d", path, resp.StatusCode, resp.ContentLength)
	}
	slow := &throttledReader{r: resp.Body, rate: 40_000}
	n, err := io.Copy(io.Discard, io.LimitReader(slow, 40_000*15))
	if err != nil {
		return fmt.Errorf("%s: cut after %d bytes read at 40 KB/s: %w", path, n, err)
	}
	m, err := io.Copy(io.Discard, resp.Body)
	if err != nil || n+m != size {
		return fmt.Errorf("%s: %d of %d bytes (%d at 40 KB/s, then %d): %v; want all of it", path, n+m, size, n, m, err)
	}
	return nil
}
