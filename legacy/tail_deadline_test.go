package legacy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/api"
	"github.com/sandbox-runtime/sandbox-runtime/internal/conntest"
)

// TestLegacyExecuteEveryWriteHasADeadline: every write of an /execute
// answer has a write deadline, including what net/http writes after the
// handler has returned (its buffered tail and the closing chunk). That tail
// once went out with no deadline at all, so a client that never reads could
// hold the connection and a goroutine for ever once the socket buffers were
// full. The deadline is cleared when the connection goes idle: the next
// request on it is answered.
func TestLegacyExecuteEveryWriteHasADeadline(t *testing.T) {
	ts := newTestServer(t, nil)
	log := &conntest.Log{}
	hs := httptest.NewUnstartedServer(ts.Server.Handler())
	hs.Listener = conntest.Listener{Listener: hs.Listener, Log: log}
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
	if n := log.Conns(); n != 1 {
		t.Errorf("%d connections; want the three requests on one", n)
	}
	writes := log.Writes()
	if len(writes) < 4 {
		t.Fatalf("%d writes recorded; want the long answer in several", len(writes))
	}
	for i, w := range writes {
		if w.Deadline.IsZero() || !w.Deadline.After(w.At) {
			t.Errorf("write %d of %d (%d bytes) had deadline %v at %v; want one in the future", i, len(writes), len(w.Data), w.Deadline, w.At)
		}
	}
}
