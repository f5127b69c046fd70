package api

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// throttledConn is a client connection that reads at about rate bytes per
// second (the sleeps pace a slow client; nothing waits on them).
type throttledConn struct {
	net.Conn
	rate  float64
	start time.Time
	n     int64
}

func (c *throttledConn) Read(p []byte) (int, error) {
	if c.start.IsZero() {
		c.start = time.Now()
	}
	n, err := c.Conn.Read(p[:min(len(p), 4<<10)])
	c.n += int64(n)
	if d := time.Until(c.start.Add(time.Duration(float64(c.n) / c.rate * float64(time.Second)))); d > 0 {
		time.Sleep(d)
	}
	return n, err
}

// TestAttachPingsReachSlowReader: a client reading at 300 KB/s from `yes`
// still gets the server's pings about every ping period, not behind
// megabytes of queued output, and is not dropped.
func TestAttachPingsReachSlowReader(t *testing.T) {
	const period = time.Second // pongWait 2 s, writeWait 1 s
	ts := newTestServer(t, func(c *runtime.Config, o *Options) {
		atQuietAPI(c, o)
		o.HeartbeatInterval = period
	})
	st := atCreate(t, ts, `{"argv":["yes"],"timeout":120}`)
	defer atDo(t, "POST", ts.URL+"/v1/commands/"+st.CommandID+"/kill", "", nil)
	c, err := ts.M.Get(st.CommandID)
	if err != nil {
		t.Fatal(err)
	}
	d := websocket.Dialer{
		HandshakeTimeout: atTimeout,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			conn.(*net.TCPConn).SetReadBuffer(64 << 10)
			return &throttledConn{Conn: conn, rate: 300e3}, nil
		},
	}
	ws, _, err := d.Dial(atWSURL(ts, st.CommandID, "cursor="+strconv.FormatInt(c.NextCursor(), 10)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	var mu sync.Mutex
	var pings []time.Time
	ws.SetPingHandler(func(data string) error {
		mu.Lock()
		pings = append(pings, time.Now())
		mu.Unlock()
		return ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	start := time.Now()
	for time.Since(start) < 6*time.Second {
		ws.SetReadDeadline(time.Now().Add(atTimeout))
		if _, _, err := ws.ReadMessage(); err != nil {
			t.Fatalf("after %v: %v; want the slow client kept", time.Since(start), err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(pings) == 0 {
		t.Fatal("no ping reached the slow reader in 6 s")
	}
	first, worst := pings[0].Sub(start), time.Duration(0)
	for i := 1; i < len(pings); i++ {
		worst = max(worst, pings[i].Sub(pings[i-1]))
	}
	t.Logf("%d pings in %v; the first after %v, longest gap %v (period %v)", len(pings), time.Since(start), first, worst, period)
	if worst > period+time.Second || first > period+2*time.Second || len(pings) < 4 {
		t.Fatalf("pings to a 300 KB/s reader: %d in 6 s, longest gap %v; want one about every %v", len(pings), worst, period)
	}
}
