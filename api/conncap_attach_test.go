package api

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"
)

// TestAttachAdmission: WebSocket attachments are counted from the upgrade
// until they end (issue 20 item 9: hijacked connections were counted
// nowhere and could take every fd). Beyond maxAttach, one more is refused
// before the upgrade with 503 too_busy and Retry-After; the connections
// stay counted against the cap while attached; an ended attachment frees
// its place.
func TestAttachAdmission(t *testing.T) {
	ts := newTestServer(t, nil)
	ts.Server.conns.mu.Lock()
	ts.Server.conns.maxAttach = 2
	ts.Server.conns.mu.Unlock()
	st := atCreate(t, ts, `{"argv":["sleep","30"],"timeout":60}`)
	a := atDial(t, ts, st.CommandID, "")
	b := atDial(t, ts, st.CommandID, "")
	defer b.ws.Close()
	if n := ts.OpenConns(); n < 2 {
		t.Errorf("%d connections counted with two attachments open; want them counted", n)
	}
	ws, resp, err := websocket.DefaultDialer.Dial(atWSURL(ts, st.CommandID, ""), nil)
	if err == nil {
		ws.Close()
		t.Fatal("a third attachment was upgraded; want 503 too_busy")
	}
	if resp == nil {
		t.Fatalf("third attachment: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var eb errorBody
	if resp.StatusCode != http.StatusServiceUnavailable || json.Unmarshal(body, &eb) != nil || eb.Error.Code != "too_busy" || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("third attachment: %d %v %s; want 503 too_busy with Retry-After: 1", resp.StatusCode, resp.Header, body)
	}
	a.ws.Close()
	deadline := time.Now().Add(atTimeout)
	for ts.Server.conns.attachments() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d attachments counted after one ended; want 1", ts.Server.conns.attachments())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := atDial(t, ts, st.CommandID, "") // the freed place
	c.ws.Close()
}

// TestAttachCeiling: the attachment cap is a share of the fd limit and
// never more than MaxAttachments. Before, at nofile 1,048,576 it was
// 393,024 (~15 GB of attachments at ~40 KB each).
func TestAttachCeiling(t *testing.T) {
	for _, tc := range []struct {
		fds  uint64
		want int
	}{{4096, 1344}, {20000, MaxAttachments}, {1 << 20, MaxAttachments}} {
		l := newConnLimiter(tc.fds, zap.NewNop())
		if l.maxAttach != tc.want {
			t.Errorf("nofile %d: %d attachments at once; want %d", tc.fds, l.maxAttach, tc.want)
		}
		var releases []func()
		for range l.maxAttach {
			release, ok := l.admitAttach(nil)
			if !ok {
				t.Fatalf("nofile %d: attachment %d refused below the cap %d", tc.fds, len(releases)+1, l.maxAttach)
			}
			releases = append(releases, release)
		}
		if _, ok := l.admitAttach(nil); ok {
			t.Errorf("nofile %d: attachment %d admitted beyond the cap", tc.fds, l.maxAttach+1)
		}
		for _, r := range releases {
			r()
		}
	}
}
