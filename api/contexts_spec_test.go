package api

import (
	"fmt"
	"strings"
	"testing"
)

// specScenarioContexts runs every /v1/contexts operation against the spec
// (the interpreter: python3 on the commands' PATH, the default rule).
func specScenarioContexts(t *testing.T, c *specClient) {
	r := c.do(t, specReq{method: "POST", path: "/v1/contexts", json: map[string]any{"envs": map[string]string{"A": "1"}}, want: 201})
	id, _ := r.object(t)["context_id"].(string)
	base := "/v1/contexts/" + id
	c.do(t, specReq{method: "POST", path: "/v1/contexts", json: map[string]any{"context_id": id, "envs": map[string]string{"A": "1"}}, want: 200})
	c.do(t, specReq{method: "GET", path: "/v1/contexts", want: 200})
	c.do(t, specReq{method: "GET", path: base, want: 200})
	c.do(t, specReq{method: "POST", path: base + "/executions", json: map[string]any{"code": "x = 1", "execution_id": "e1"}, want: 201})
	c.do(t, specReq{method: "POST", path: base + "/executions", json: map[string]any{"code": "x = 1", "execution_id": "e1"}, want: 200})
	r = c.do(t, specReq{method: "GET", path: base + "/executions/1", want: 200})
	if n := len(r.events); n == 0 || r.events[n-1]["type"] != "end" {
		t.Fatalf("events %v", r.events)
	}
	r = c.do(t, specReq{method: "POST", path: base + "/executions?stream=true", json: map[string]any{"code": "import os\nprint('a')\ndisplay(1)\nos.environ['A']", "timeout": 10}, want: 201})
	// print writes "a" and "\n" apart (unbuffered): they may come as two
	// stdout events.
	var out strings.Builder
	for _, ev := range r.events {
		if ev["type"] == "stdout" {
			out.WriteString(fmt.Sprint(ev["text"]))
		}
	}
	if len(r.events) < 4 || out.String() != "a\n" {
		t.Fatalf("events %v", r.events)
	}
	c.do(t, specReq{method: "GET", path: base + "/executions/2?cursor=1&follow=false", want: 200})
	c.do(t, specReq{method: "GET", path: base + "/executions", want: 200})
	r = c.do(t, specReq{method: "POST", path: base + "/executions", json: map[string]any{"code": "import time\nprint(1)\ntime.sleep(20)"}, want: 201})
	c.do(t, specReq{method: "GET", path: base + "/executions/3?cursor=0&max_wait=0.2", want: 200}) // the first event, then stream_end
	r = c.do(t, specReq{method: "POST", path: base + "/executions", json: map[string]any{"code": "1"}, want: 409})
	if r.errorCode(t) != "busy" {
		t.Errorf("second execution: %s", r.body)
	}
	c.do(t, specReq{method: "POST", path: base + "/interrupt", want: 200})
	r = c.do(t, specReq{method: "GET", path: base + "/executions/3", want: 200})
	if end := r.events[len(r.events)-1]; end["status"] != "interrupted" {
		t.Errorf("end %v", end)
	}
	c.do(t, specReq{method: "POST", path: base + "/executions?stream=true", json: map[string]any{"code": "import os\nos._exit(1)"}, want: 201})
	r = c.do(t, specReq{method: "POST", path: base + "/executions", json: map[string]any{"code": "1"}, want: 409})
	if r.errorCode(t) != "state_lost" {
		t.Errorf("after os._exit: %s", r.body)
	}
	c.do(t, specReq{method: "POST", path: base + "/restart", want: 200})
	c.do(t, specReq{method: "DELETE", path: base, want: 204})
	r = c.do(t, specReq{method: "GET", path: base, want: 410})
	if !strings.Contains(string(r.body), `"reason":"deleted"`) {
		t.Errorf("410 %s", r.body)
	}
	c.do(t, specReq{method: "GET", path: fmt.Sprintf("/v1/contexts/%s/executions/1", id), want: 410})
}
