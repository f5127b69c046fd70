package legacy

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/api"
)

// deadlineLog records, for every Write of the connections a listener
// accepted, how many bytes it wrote and the write deadline it had.
type deadlineLog struct {
	mu     sync.Mutex
	writes []timedWrite
	conns  int
}

type timedWrite struct {
	n            int
	at, deadline time.Time
}

type deadlineListener struct {
	net.Listener
	log *deadlineLog
}

func (l deadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.log.mu.Lock()
	l.log.conns++
	l.log.mu.Unlock()
	return &deadlineConn{TCPConn: c.(*net.TCPConn), log: l.log}, nil
}

// deadlineConn keeps *net.TCPConn's methods and records the deadline each
// Write is made under.
type deadlineConn struct {
	*net.TCPConn
	log      *deadlineLog
	mu       sync.Mutex
	deadline time.Time
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.TCPConn.SetWriteDeadline(t)
}

func (c *deadlineConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.TCPConn.SetDeadline(t)
}

func (c *deadlineConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	d := c.deadline
	c.mu.Unlock()
	c.log.mu.Lock()
	c.log.writes = append(c.log.writes, timedWrite{n: len(p), at: time.Now(), deadline: d})
	c.log.mu.Unlock()
	return c.TCPConn.Write(p)
}

// TestLegacyExecuteEveryWriteHasADeadline: every write of an /execute
// answer has a write deadline, including what net/http writes after the
// handler has returned (its buffered tail and the closing chunk). That tail
// once went out with no deadline at all, so a client that never reads could
// hold the connection and a goroutine for ever once the socket buffers were
// full. The deadline is cleared when the connection goes idle: the next
// request on it is answered.
func TestLegacyExecuteEveryWriteHasADeadline(t *testing.T) {
	ts := newTestServer(t, nil)
	log := &deadlineLog{}
	hs := httptest.NewUnstartedServer(ts.Server.Handler())
	hs.Listener = deadlineListener{Listener: hs.Listener, log: log}
	hs.Config.ConnContext = api.ConnContext
	hs.Config.ConnState = ts.Server.ConnState
	hs.Start()
	t.Cleanup(hs.Close)
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	t.Cleanup(client.CloseIdleConnections)

	// A short answer (one write, with Content-Length), a long one (chunked,
	// many writes; its last 4 KiB are written after the handler returns),
	// then a short one again on the same connection.
	long := `sh -c "i=0; while [ $i -lt 3000 ]; do echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done; sleep 0.3"`
	body := func(command string) []byte {
		b, _ := json.Marshal(map[string]string{"command": command})
		return b
	}
	for i, command := range []string{"echo hi", long, "echo again"} {
		resp, err := client.Post(hs.URL+"/execute", "application/json", bytes.NewReader(body(command)))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !strings.Contains(string(answer), `"exit_code":0`) {
			t.Fatalf("request %d: status %d, %v, answer %.200q", i, resp.StatusCode, err, answer)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if log.conns != 1 {
		t.Errorf("%d connections; want the three requests on one", log.conns)
	}
	if len(log.writes) < 4 {
		t.Fatalf("%d writes recorded; want the long answer in several", len(log.writes))
	}
	for i, w := range log.writes {
		if w.deadline.IsZero() || !w.deadline.After(w.at) {
			t.Errorf("write %d of %d (%d bytes) had deadline %v at %v; want one in the future", i, len(log.writes), w.n, w.deadline, w.at)
		}
	}
}
