package api

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// slowPut opens a raw connection and starts a PUT whose body it never
// finishes; it returns the connection and a reader of its answer.
func slowPut(t *testing.T, ts *testServer, path string, length int) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\nab", path, length)
	return c, bufio.NewReader(c)
}

// statusLine reads the status line of an answer within timeout.
func statusLine(t *testing.T, c net.Conn, br *bufio.Reader, timeout time.Duration) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(timeout))
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("no answer within %v: %v (got %q)", timeout, err, line)
	}
	return strings.TrimSpace(line)
}

func TestBodyThatStopsIsCut(t *testing.T) {
	ts := newTestServer(t, nil)
	ts.bodies.grace, ts.bodies.idle = 300*time.Millisecond, time.Second
	// A handler that reads the body (PUT /v1/files), and one that answers
	// without reading it (PUT /execute is a 405): net/http drains the rest
	// before it sends that answer, and the drain must not wait forever.
	for _, c := range []struct{ path, want string }{
		{"/v1/files/stalled.txt", "HTTP/1.1 400"},
		{"/execute", "HTTP/1.1 405"},
	} {
		start := time.Now()
		conn, br := slowPut(t, ts, c.path, 100000)
		line := statusLine(t, conn, br, 10*time.Second)
		took := time.Since(start)
		if !strings.HasPrefix(line, c.want) || took < 250*time.Millisecond {
			t.Errorf("PUT %s stalled after 2 bytes: %q after %v; want %s after the 300 ms grace", c.path, line, took, c.want)
		}
		// The connection is closed after the answer, not kept.
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			if _, err := br.ReadString('\n'); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Errorf("PUT %s: the connection of a stalled body stayed open", c.path)
				}
				break
			}
		}
	}
	if ts.bodies.cut.Load() != 1 {
		t.Errorf("cut %d bodies; want 1 (the one a handler read)", ts.bodies.cut.Load())
	}
	if n := ts.bodies.inFlight.Load(); n != 0 {
		t.Errorf("%d bodies still counted in flight", n)
	}
}

func TestBodyAtMinimumRateIsNotCut(t *testing.T) {
	ts := newTestServer(t, nil)
	// A steady body well above the minimum (1,000 bytes/s against 100) for
	// 2 s. The writer catches up after any stall of this (loaded, -race)
	// process, and the grace and the pause limit leave room for a stall of
	// up to a second: what is tested is that a body the gate should let
	// through is not cut, not the scheduler.
	ts.bodies.grace, ts.bodies.idle, ts.bodies.minRate = time.Second, 3*time.Second, 100
	const rate, total = 1000, 2000
	c, br := slowPut(t, ts, "/v1/files/steady.txt", 2+total)
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for sent := 0; sent < total; {
		<-tick.C
		due := min(total, int(time.Since(start).Seconds()*rate))
		if due <= sent {
			continue
		}
		if _, err := c.Write([]byte(strings.Repeat("x", due-sent))); err != nil {
			t.Fatalf("the body was cut at ten times the minimum rate after %d bytes: %v", sent, err)
		}
		sent = due
	}
	if line := statusLine(t, c, br, 10*time.Second); !strings.HasPrefix(line, "HTTP/1.1 204") {
		t.Fatalf("a body at ten times the minimum rate: %q; want 204", line)
	}
}

func TestBodiesBeyondTheGateAre503(t *testing.T) {
	ts := newTestServer(t, nil)
	ts.bodies.max = 2
	ts.bodies.grace, ts.bodies.idle = time.Minute, time.Minute
	for i := range 2 {
		slowPut(t, ts, fmt.Sprintf("/v1/files/held%d.txt", i), 1000)
	}
	// The two held bodies are admitted by their connections' goroutines:
	// wait (bounded) until the gate counts them.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for ts.bodies.inFlight.Load() != 2 {
		select {
		case <-tick.C:
			continue
		case <-deadline:
		}
		break
	}
	if ts.bodies.inFlight.Load() != 2 {
		t.Fatalf("in flight %d; want 2", ts.bodies.inFlight.Load())
	}
	for _, p := range []string{"/v1/files/third.txt", "/upload"} {
		req, _ := http.NewRequest("PUT", ts.URL+p, strings.NewReader("x"))
		if p == "/upload" {
			req.Method = "POST"
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := make([]byte, 512)
		n, _ := resp.Body.Read(body)
		resp.Body.Close()
		want := `"too_busy"`
		if p == "/upload" {
			want = `"detail"`
		}
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body[:n]), want) {
			t.Errorf("%s beyond the gate: %d Retry-After %q %s; want 503 with %s", p, resp.StatusCode, resp.Header.Get("Retry-After"), body[:n], want)
		}
	}
	resp, err := http.Get(ts.URL + "/v1/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("health with the gate full: %v %v", resp, err)
	}
	resp.Body.Close()
	// Both refusals, the legacy one too, count as too_busy (an alert on it
	// must not miss legacy clients).
	resp, err = http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `sandbox_runtime_refusals_total{reason="too_busy"} 2`; !strings.Contains(string(metrics), want) {
		t.Errorf("/metrics lacks %s", want)
	}
}

func TestMaxBodiesFor(t *testing.T) {
	for _, c := range []struct {
		limit uint64
		want  int64
	}{{0, minBodies}, {512, minBodies}, {560, minBodies}, {600, minBodies}, {1024, 32}, {4096, 224}, {20000, 1218}, {1 << 20, (1<<20 - 512) / 16}} {
		if got := maxBodiesFor(c.limit); got != c.want {
			t.Errorf("maxBodiesFor(%d) = %d; want %d", c.limit, got, c.want)
		}
	}
}

func TestOutOfFDsIs503(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		err := &os.PathError{Op: "open", Path: "/app/x", Err: errno}
		rec := httptest.NewRecorder()
		fail(rec, err)
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"resource_exhausted"`) || rec.Header().Get("Retry-After") != "1" {
			t.Errorf("%v: %d %s Retry-After %q; want 503 resource_exhausted with Retry-After 1", errno, rec.Code, rec.Body, rec.Header().Get("Retry-After"))
		}
	}
}
