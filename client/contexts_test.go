package client

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

func contextPython(t *testing.T) string {
	for _, p := range []string{os.Getenv("SANDBOX_TEST_PYTHON"), "/usr/bin/python3"} {
		if p != "" && exec.Command(p, "-c", "1").Run() == nil {
			return p
		}
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("machine precondition: no python3 on this machine")
	}
	return p
}

// TestContextWireTypesMatchDaemon: the context answers of the real daemon
// decode into the wire types with DisallowUnknownFields and encode back to
// the same JSON (as TestWireTypesMatchDaemon does for commands), and the
// client's context methods run code with its events once each, in order.
func TestContextWireTypesMatchDaemon(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "SANDBOX_PYTHON="+contextPython(t), "SANDBOX_KILL_GRACE_SECONDS=0.2")
	post := func(path, body string, want int) []byte { t.Helper(); return do(t, "POST", d.url+path, body, want) }
	get := func(path string, want int) []byte { t.Helper(); return do(t, "GET", d.url+path, "", want) }
	events := func(raw []byte) map[string]bool {
		t.Helper()
		seen := map[string]bool{}
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			ev := roundTrip[wire.ContextEvent](t, nil, "context event", sc.Bytes())
			seen[ev.Type] = true
		}
		return seen
	}
	st := roundTrip[wire.Context](t, nil, "context", post("/v1/contexts", `{}`, 201))
	base := "/v1/contexts/" + st.ContextID
	roundTrip[wire.Execution](t, nil, "execution", post(base+"/executions", `{"code":"print(1)\nclass X:\n    def _repr_html_(self): return '<i>x</i>'\ndisplay(X())\n2"}`, 201))
	seen := events(get(base+"/executions/1", 200))
	seen2 := events(post(base+"/executions?stream=true", `{"code":"1/0"}`, 201))
	for _, k := range []string{"stdout", "display", "result", "end"} {
		if !seen[k] {
			t.Errorf("no %s event: %v", k, seen)
		}
	}
	if !seen2["error"] {
		t.Errorf("no error event: %v", seen2)
	}
	roundTrip[wire.ContextList](t, nil, "contexts", get("/v1/contexts", 200))
	// A lost context: its status carries state_lost.
	post(base+"/executions?stream=true", `{"code":"import os\nos._exit(2)"}`, 201)
	lost := roundTrip[wire.Context](t, nil, "context lost", get(base, 200))
	if lost.StateLost == nil || !strings.Contains(lost.StateLost.Reason, "exited with code 2") {
		t.Errorf("status %+v", lost)
	}
	roundTrip[wire.ErrorBody](t, nil, "state_lost", post(base+"/executions", `{"code":"1"}`, 409))

	// The client: RunCode sees every event once, in order; a restart
	// empties the state.
	c, err := New(d.url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.RestartContext(ctx, st.ContextID); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	next := int64(0)
	end, err := c.RunCode(ctx, st.ContextID, wire.ExecutionRequest{Code: "import time\nfor i in range(5):\n    print(i)\n    time.sleep(0.05)\n'done'"}, func(ev *wire.ContextEvent) error {
		if ev.Cursor != next {
			t.Errorf("event cursor %d, want %d", ev.Cursor, next)
		}
		next++
		text.WriteString(ev.Text)
		return nil
	})
	if err != nil || end.Status != wire.ExecOK || text.String() != "0\n1\n2\n3\n4\n" {
		t.Fatalf("RunCode: %v %+v %q", err, end, text.String())
	}
	if err := c.DeleteContext(ctx, st.ContextID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetContext(ctx, st.ContextID); ErrorCode(err) != "gone" {
		t.Fatalf("after delete: %v", err)
	}
}
