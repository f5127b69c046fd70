package api

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// specScenarioPTY runs the terminal endpoints and fields against the spec:
// create with "pty", the status and output events of a terminal, resize
// (200, 400, 404, 409 not_a_terminal and finished), stdin eof as VEOF, and
// the resize frame's schema.
func specScenarioPTY(t *testing.T, c *specClient) {
	c.do(t, specReq{method: "POST", path: "/v1/commands", want: 400, specRejects: true,
		json: map[string]any{"argv": []string{"true"}, "pty": map[string]any{"cols": 0, "rows": 24}}})
	c.do(t, specReq{method: "POST", path: "/v1/commands", want: 400, specRejects: true,
		json: map[string]any{"argv": []string{"true"}, "pty": map[string]any{"cols": 80}}})

	// A terminal that reports its size before and after a resize.
	r := c.do(t, specReq{method: "POST", path: "/v1/commands", want: 201,
		json: map[string]any{"argv": []string{"sh", "-c", "stty size; read x; stty size"}, "pty": map[string]any{"cols": 120, "rows": 40, "term": "vt100"}}})
	st := r.object(t)
	id := st["command_id"].(string)
	if p, _ := st["pty"].(map[string]any); p["cols"] != float64(120) || p["rows"] != float64(40) || p["term"] != "vt100" || st["waiting_for_input"] != false {
		t.Errorf("create status: %s", r.body)
	}
	// Resize once the first stty has run and read waits for the line.
	atWaitFor(t, "read x waiting for input", func() bool {
		return c.do(t, specReq{method: "GET", path: "/v1/commands/" + id, want: 200}).object(t)["waiting_for_input"] == true
	})
	r = c.do(t, specReq{method: "POST", path: "/v1/commands/" + id + "/resize", want: 200, json: map[string]any{"cols": 100, "rows": 30}})
	if p, _ := r.object(t)["pty"].(map[string]any); p["cols"] != float64(100) || p["rows"] != float64(30) {
		t.Errorf("resize status: %s", r.body)
	}
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + id + "/resize", want: 400, specRejects: true, json: map[string]any{"cols": 0, "rows": 30}})
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + id + "/resize", want: 400, specRejects: true, json: map[string]any{"cols": 100}})
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + uuid.NewString() + "/resize", want: 404, json: map[string]any{"cols": 100, "rows": 30}})
	r = c.do(t, specReq{method: "POST", path: "/v1/commands/" + id + "/stdin", want: 202, json: map[string]any{"data": "\n"}})
	if r.object(t)["stdin_closed"] != false {
		t.Errorf("stdin on a terminal: %s", r.body)
	}
	r = c.do(t, specReq{method: "GET", path: "/v1/commands/" + id + "/output?cursor=0&max_wait=10", want: 200})
	var out strings.Builder
	for _, ev := range r.events {
		if ev["type"] == "output" {
			if ev["stream"] != "pty" {
				t.Errorf("terminal output event %v; want stream pty", ev)
			}
			out.WriteString(ev["data"].(string))
		}
	}
	if got := out.String(); got != "40 120\r\n\r\n30 100\r\n" {
		t.Errorf("terminal output %q; want the size before and after the resize", got)
	}
	last := r.events[len(r.events)-1]
	if last["type"] != "exit" {
		t.Fatalf("terminal stream ended with %v; want exit", last)
	}
	if fin := last["status"].(map[string]any); fin["pty_bytes"] != fin["next_cursor"] || fin["stdout_bytes"] != float64(0) || fin["waiting_for_input"] != false {
		t.Errorf("final terminal status %v", fin)
	}
	r = c.do(t, specReq{method: "POST", path: "/v1/commands/" + id + "/resize", want: 409, json: map[string]any{"cols": 80, "rows": 24}})
	if r.errorCode(t) != "finished" {
		t.Errorf("resize after the end: %s", r.body)
	}

	// eof on a terminal is VEOF: cat ends on its own.
	r = c.do(t, specReq{method: "POST", path: "/v1/commands", want: 201, json: map[string]any{"argv": []string{"cat"}, "pty": map[string]any{"cols": 80, "rows": 24}}})
	cat := r.object(t)["command_id"].(string)
	// The second VEOF that ends the pending "x" is typed only when cat was
	// asleep reading as the line began (protocol.md §2).
	for deadline := time.Now().Add(10 * time.Second); ; {
		if r = c.do(t, specReq{method: "GET", path: "/v1/commands/" + cat, want: 200}); r.object(t)["waiting_for_input"] == true {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cat never waited for input: %s", r.body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + cat + "/stdin", want: 202, json: map[string]any{"data": "x", "eof": true}})
	if r = c.do(t, specReq{method: "GET", path: "/v1/commands/" + cat + "?wait=10", want: 200}); r.object(t)["state"] != "exited" || r.object(t)["exit_code"] != float64(0) {
		t.Errorf("cat after eof: %s", r.body)
	}

	// A command without a terminal: 409 not_a_terminal, and null fields.
	r = c.do(t, specReq{method: "POST", path: "/v1/commands", want: 201, json: map[string]any{"argv": []string{"sleep", "30"}}})
	pipe := r.object(t)
	if pipe["pty"] != nil || pipe["waiting_for_input"] != nil || pipe["pty_bytes"] != float64(0) {
		t.Errorf("status without a terminal: %s", r.body)
	}
	r = c.do(t, specReq{method: "POST", path: "/v1/commands/" + pipe["command_id"].(string) + "/resize", want: 409, json: map[string]any{"cols": 80, "rows": 24}})
	if r.errorCode(t) != "not_a_terminal" {
		t.Errorf("resize without a terminal: %s", r.body)
	}
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + pipe["command_id"].(string) + "/kill", want: 200})

	schemas := c.doc.Components.Schemas
	if err := specValidateJSON(schemas["AttachClientFrame"].Value, []byte(`{"type":"resize","cols":80,"rows":24}`)); err != nil {
		t.Errorf("resize frame does not match AttachClientFrame: %v", err)
	}
	if err := specValidateJSON(schemas["AttachClientFrame"].Value, []byte(`{"type":"resize","cols":80}`)); err == nil {
		t.Errorf("a resize frame without rows matches AttachClientFrame")
	}
}
