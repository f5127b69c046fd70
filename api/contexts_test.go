package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

func contextPython(t testing.TB) string {
	if p := os.Getenv("SANDBOX_TEST_PYTHON"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("machine precondition: no python3 on this machine")
	}
	return p
}

func ctxPost(t testing.TB, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// readEvents reads NDJSON events until the end or stream_end event, or
// until stop says so (then the connection is dropped).
func readEvents(t testing.TB, resp *http.Response, stop func(wire.ContextEvent) bool) []wire.ContextEvent {
	t.Helper()
	defer resp.Body.Close()
	var out []wire.ContextEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var ev wire.ContextEvent
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("event %s: %v", sc.Bytes(), err)
		}
		if ev.Type == wire.CtxEventHeartbeat {
			continue
		}
		out = append(out, ev)
		if ev.Type == wire.CtxEventEnd || ev.Type == wire.CtxEventStreamEnd || (stop != nil && stop(ev)) {
			return out
		}
	}
	return out
}

func TestContextsHTTP(t *testing.T) {
	py := contextPython(t)
	ts := newTestServer(t, func(c *runtime.Config, _ *Options) { c.Python = py; c.MaxContexts = 2 })
	resp, b := ctxPost(t, ts.URL+"/v1/contexts", `{}`)
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	var ctx wire.Context
	json.Unmarshal(b, &ctx)
	base := ts.URL + "/v1/contexts/" + ctx.ContextID

	// A stream that the client drops after the 3rd line, then resumes by
	// cursor: every line once, in order.
	code := `import time\nfor i in range(8):\n    print(i)\n    time.sleep(0.1)\n42`
	resp, err := http.Post(base+"/executions?stream=true", "application/json", strings.NewReader(`{"code":"`+code+`"}`))
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("execute: %v %v", err, resp)
	}
	first := readEvents(t, resp, func(ev wire.ContextEvent) bool { return ev.Cursor == 2 })
	if len(first) != 3 {
		t.Fatalf("first part %+v", first)
	}
	resp, err = http.Get(fmt.Sprintf("%s/executions/1?cursor=%d", base, first[len(first)-1].Cursor+1))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("resume: %v %v", err, resp)
	}
	all := append(first, readEvents(t, resp, nil)...)
	var out strings.Builder
	for i, ev := range all {
		if ev.Cursor != int64(i) {
			t.Fatalf("event %d has cursor %d: lost or duplicated: %+v", i, ev.Cursor, all)
		}
		out.WriteString(ev.Text)
	}
	if out.String() != "0\n1\n2\n3\n4\n5\n6\n7\n" || all[len(all)-2].Type != wire.CtxEventResult || all[len(all)-1].Status != wire.ExecOK {
		t.Fatalf("events %+v", all)
	}
	// Re-reading from 0 after the end gives the same events.
	resp, _ = http.Get(base + "/executions/1?cursor=0")
	if again := readEvents(t, resp, nil); len(again) != len(all) {
		t.Fatalf("re-read %d events, want %d", len(again), len(all))
	}

	// A retried POST with the same execution_id never runs twice.
	body := `{"code":"n = globals().get('n', 0) + 1\nn","execution_id":"once"}`
	r1, b1 := ctxPost(t, base+"/executions", body)
	r2, b2 := ctxPost(t, base+"/executions", body)
	var x1, x2 wire.Execution
	json.Unmarshal(b1, &x1)
	json.Unmarshal(b2, &x2)
	if r1.StatusCode != 201 || r2.StatusCode != 200 || x1.N != x2.N {
		t.Fatalf("retry: %d %s / %d %s", r1.StatusCode, b1, r2.StatusCode, b2)
	}
	// The POST answers at once; the execution may still be running (a
	// loaded machine): read its events to its end before the next one.
	resp, err = http.Get(fmt.Sprintf("%s/executions/%d?cursor=0", base, x1.N))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("events of execution %d: %v %v", x1.N, err, resp)
	}
	if evs := readEvents(t, resp, nil); len(evs) == 0 || evs[len(evs)-1].Type != wire.CtxEventEnd {
		t.Fatalf("execution %d did not end: %+v", x1.N, evs)
	}

	// Busy: 409 busy; a timed-out unkillable code: state_lost, then 409 until restart.
	if resp, b := ctxPost(t, base+"/executions?stream=true", `{"code":"while True:\n    try:\n        __import__('time').sleep(10)\n    except KeyboardInterrupt:\n        pass","timeout":0.3}`); resp.StatusCode != 201 {
		t.Fatalf("the unkillable execution: %d %s", resp.StatusCode, b)
	}
	resp, b = ctxPost(t, base+"/executions", `{"code":"1"}`)
	var eb wire.ErrorBody
	json.Unmarshal(b, &eb)
	if resp.StatusCode != 409 || eb.Error.Code != "state_lost" || !strings.Contains(eb.Error.Message, "restart") {
		t.Fatalf("after the timeout: %d %s", resp.StatusCode, b)
	}
	resp, b = ctxPost(t, base+"/restart", ``)
	if resp.StatusCode != 200 {
		t.Fatalf("restart: %d %s", resp.StatusCode, b)
	}
	resp, b = ctxPost(t, base+"/executions?stream=true", `{"code":"'n' in globals()"}`)
	if !strings.Contains(string(b), `"text/plain":"False"`) {
		t.Fatalf("after restart: %d %s", resp.StatusCode, b)
	}

	// Unknown fields are refused; a missing code too.
	if resp, b = ctxPost(t, base+"/executions", `{"code":"1","Code":"2"}`); resp.StatusCode != 400 {
		t.Fatalf("duplicate key: %d %s", resp.StatusCode, b)
	}
	if resp, b = ctxPost(t, base+"/executions", `{"timeout":1}`); resp.StatusCode != 400 {
		t.Fatalf("no code: %d %s", resp.StatusCode, b)
	}
	// The limit: 2 contexts.
	ctxPost(t, ts.URL+"/v1/contexts", `{}`)
	if resp, b = ctxPost(t, ts.URL+"/v1/contexts", `{}`); resp.StatusCode != 429 || !strings.Contains(string(b), "too_many_contexts") {
		t.Fatalf("third context: %d %s", resp.StatusCode, b)
	}
	// Delete: 204, then 410 gone, and a re-create of the id is 410 too.
	req, _ := http.NewRequest("DELETE", base, nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("delete: %v %v", err, resp)
	}
	resp.Body.Close()
	resp, _ = http.Get(base)
	resp.Body.Close()
	if resp.StatusCode != 410 {
		t.Fatalf("deleted context: %d", resp.StatusCode)
	}
	if resp, b = ctxPost(t, ts.URL+"/v1/contexts", `{"context_id":"`+ctx.ContextID+`"}`); resp.StatusCode != 410 {
		t.Fatalf("re-create: %d %s", resp.StatusCode, b)
	}
}
