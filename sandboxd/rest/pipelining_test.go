package rest_test

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNeverReadingPipelinersAreCutOnBothListeners: the real daemon, its main
// port and sandboxd's REST port at once. A client sends request after
// request (Expect: 100-continue bodies, requests with large answers) and never
// reads; each listener must reset it once its socket buffers are full and a
// write has waited 10 s (httpx.BoundWrites in main), and keep answering
// others meanwhile. Without the bound the daemon wrote on for ever.
func TestNeverReadingPipelinersAreCutOnBothListeners(t *testing.T) {
	d, rest := startOurs(t, "SANDBOXD_REST_ADDR=127.0.0.1:0")
	targets := map[string]string{
		"main": strings.TrimPrefix(d.URL, "http://"),
		"rest": strings.TrimPrefix(rest, "http://"),
	}
	// Each round: a body behind Expect: 100-continue, then a request with
	// a large answer (12 KB of metrics; a 6 KB 404 naming the long path),
	// so that the buffers fill within a few hundred rounds, also with the
	// race detector's daemon.
	long := strings.Repeat("a", 6000)
	reqs := map[string]string{
		"main": "POST /v1/commands HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n{}" +
			"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
		"rest": "PUT /v1/files/pipelined.txt HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\nhi" +
			"GET /v1/" + long + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
	}
	ended := make(chan string, len(targets))
	for name, addr := range targets {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
			t.Fatal(err)
		}
		go func() {
			c.SetWriteDeadline(time.Now().Add(60 * time.Second)) // bounded: the test fails first
			req := []byte(reqs[name])
			for {
				if _, err := c.Write(req); err != nil {
					if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
						ended <- name
					} else {
						ended <- name + ": " + err.Error()
					}
					return
				}
			}
		}()
	}
	timeout := time.After(50 * time.Second)
	for range targets {
		select {
		case got := <-ended:
			t.Logf("ended: %s", got)
			if _, ok := targets[got]; !ok {
				t.Errorf("the client's writes ended with %s; want the daemon to reset it", got)
			}
		case <-timeout:
			t.Fatal("a listener still holds a client that never reads")
		}
	}
	// Served others all along, and still does.
	for name, addr := range targets {
		if code, body := get(t, "http://"+addr+"/v1/health"); code != 200 {
			t.Errorf("%s health after the cut: %d %s", name, code, body)
		}
	}
}
