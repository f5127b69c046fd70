package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// specScenarioWatch exercises /v1/watches against the spec: every answer
// and every stream line validated by TestSpecResponsesValidate's client.
func specScenarioWatch(t *testing.T, c *specClient, ts *testServer) {
	os.MkdirAll(filepath.Join(ts.BaseDir, "w"), 0o755)
	r := c.do(t, specReq{method: "POST", path: "/v1/watches", json: map[string]any{"path": "w", "recursive": true}, want: 201})
	var info struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(r.body, &info); err != nil || info.ID == "" {
		t.Fatalf("create: %s (%v)", r.body, err)
	}
	c.do(t, specReq{method: "POST", path: "/v1/watches", json: map[string]any{"path": "w", "bogus": 1}, want: 400, specRejects: true})
	c.do(t, specReq{method: "POST", path: "/v1/watches", json: map[string]any{"path": "nope"}, want: 404})
	os.Mkdir(filepath.Join(ts.BaseDir, "w\xff"), 0o755)
	r = c.do(t, specReq{method: "POST", path: "/v1/watches", json: map[string]any{"path": "", "escaped_path": "w%FF"}, want: 201})
	var esc struct {
		ID          string `json:"id"`
		EscapedPath string `json:"escaped_path"`
	}
	if err := json.Unmarshal(r.body, &esc); err != nil || esc.EscapedPath != "w%FF" {
		t.Fatalf("create by escaped_path: %s (%v)", r.body, err)
	}
	c.do(t, specReq{method: "DELETE", path: "/v1/watches/" + esc.ID, want: 204})
	os.WriteFile(filepath.Join(ts.BaseDir, "wf"), nil, 0o644)
	c.do(t, specReq{method: "POST", path: "/v1/watches", json: map[string]any{"path": "wf"}, want: 400})
	c.do(t, specReq{method: "POST", path: "/v1/watches", json: map[string]any{"path": "w/../.."}, want: 403})
	c.do(t, specReq{method: "GET", path: "/v1/watches", want: 200})
	c.do(t, specReq{method: "GET", path: "/v1/watches/" + info.ID, want: 200})
	c.do(t, specReq{method: "GET", path: "/v1/watches/nope", want: 404})
	os.WriteFile(filepath.Join(ts.BaseDir, "w", "a"), []byte("x"), 0o644)
	os.Rename(filepath.Join(ts.BaseDir, "w", "a"), filepath.Join(ts.BaseDir, "w", "b"))
	os.Mkdir(filepath.Join(ts.BaseDir, "w", "d"), 0o755)
	r = c.do(t, specReq{method: "GET", path: "/v1/watches/" + info.ID + "/events?max_wait=0.5", want: 200})
	if len(r.events) == 0 {
		t.Fatalf("no lines: %s", r.body)
	}
	c.do(t, specReq{method: "GET", path: "/v1/watches/" + info.ID + "/events?follow=false", want: 200})
	c.do(t, specReq{method: "GET", path: "/v1/watches/" + info.ID + "/events?cursor=999999", want: 400})
	c.do(t, specReq{method: "DELETE", path: "/v1/watches/" + info.ID, want: 204})
	c.do(t, specReq{method: "DELETE", path: "/v1/watches/" + info.ID, want: 404})
}
