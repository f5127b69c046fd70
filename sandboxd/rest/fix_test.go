package rest_test

// Tests of the attacker's findings on the sandboxd REST listener (issue 22).

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// do sends method u with the Host header host (the URL's when "") and
// header pairs, and returns the status and body.
func doHost(t *testing.T, method, u, host string, body io.Reader, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{Timeout: 10 * time.Second}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestRebindingRefused (F1): on loopback the listener asks no token, so a
// web page whose name was re-pointed at 127.0.0.1 (DNS rebinding: Host and
// Origin both its own name) must be refused whatever the route; loopback
// literals and localhost are served.
func TestRebindingRefused(t *testing.T) {
	d, u := startOurs(t, "SANDBOXD_REST_ADDR=127.0.0.1:0")
	port := u[strings.LastIndex(u, ":")+1:]
	if err := os.WriteFile(filepath.Join(d.BaseDir, "victim.txt"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	evil := "rebind.attacker.example:" + port
	for _, m := range []struct{ method, path string }{{"DELETE", "/v1/files/victim.txt"}, {"GET", "/v1/metadata"}, {"GET", "/v1/files/victim.txt"}, {"PUT", "/v1/files/planted.txt"}} {
		code, body := doHost(t, m.method, u+m.path, evil, strings.NewReader("x"), "Origin", "http://"+evil)
		if code != 403 || !strings.Contains(body, `"code":"PERMISSION_DENIED"`) {
			t.Errorf("%s %s with Host and Origin %s: %d %s; want 403 PERMISSION_DENIED", m.method, m.path, evil, code, body)
		}
		if code, body := doHost(t, m.method, u+m.path, "rebind.attacker.example", strings.NewReader("x")); code != 403 {
			t.Errorf("%s %s with Host rebind.attacker.example and no Origin: %d %s; want 403", m.method, m.path, code, body)
		}
	}
	if b, err := os.ReadFile(filepath.Join(d.BaseDir, "victim.txt")); err != nil || string(b) != "keep me" {
		t.Errorf("victim.txt after the rebound DELETE: %q, %v; want it intact", b, err)
	}
	if _, err := os.Stat(filepath.Join(d.BaseDir, "planted.txt")); err == nil {
		t.Errorf("the rebound PUT wrote planted.txt")
	}
	for _, h := range []string{"127.0.0.1:" + port, "localhost:" + port, "localhost", "[::1]:" + port} {
		if code, body := doHost(t, "GET", u+"/v1/files/victim.txt", h, nil); code != 200 || body != "keep me" {
			t.Errorf("GET with Host %s: %d %q; want 200", h, code, body)
		}
	}
}
