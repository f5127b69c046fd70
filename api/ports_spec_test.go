//go:build linux

package api

import (
	"net"
	"os/exec"
	"strconv"
	"testing"
)

// specScenarioPorts runs a real listener (python3 -m http.server on
// 127.0.0.1) and reads it back through ?wait_port, listeners and
// GET /v1/ports, every answer validated against the spec.
func specScenarioPorts(t *testing.T, c *specClient) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed (a machine precondition of this scenario)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := c.do(t, specReq{method: "POST", path: "/v1/commands", want: 201,
		json: map[string]any{"argv": []string{py, "-m", "http.server", "--bind", "127.0.0.1", strconv.Itoa(port)}}})
	id, _ := r.object(t)["command_id"].(string)
	r = c.do(t, specReq{method: "GET", path: "/v1/commands/" + id + "?wait=20&wait_port=" + strconv.Itoa(port), want: 200})
	if got := r.object(t)["wait_port_result"]; got != "listening" {
		t.Errorf("wait_port: %s", r.body)
	}
	r = c.do(t, specReq{method: "GET", path: "/v1/ports", want: 200})
	found := false
	for _, p := range r.object(t)["ports"].([]any) {
		p := p.(map[string]any)
		if p["port"] == float64(port) && p["command_id"] == id && p["loopback_only"] == true {
			found = true
		}
	}
	if !found {
		t.Errorf("GET /v1/ports lacks %d of %s: %s", port, id, r.body)
	}
	c.do(t, specReq{method: "GET", path: "/v1/commands/" + id + "?wait_port=0", want: 400, specRejects: true})
	c.do(t, specReq{method: "POST", path: "/v1/commands/" + id + "/kill", want: 200})
}
