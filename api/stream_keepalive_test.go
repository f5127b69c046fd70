package api

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"
)

// A stream that ends with its exit line leaves the connection to the next
// request: the second `echo hi` runs on the first one's connection.
func TestStreamConnectionReused(t *testing.T) {
	ts := newTestServer(t, nil)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	for i := range 3 {
		var reused bool
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(g httptrace.GotConnInfo) { reused = g.Reused }})
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/commands?stream=true", strings.NewReader(`{"argv":["echo","hi"]}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Connection") == "close" || resp.Close {
			t.Errorf("stream %d: status %d, Connection %q", i, resp.StatusCode, resp.Header.Get("Connection"))
		}
		sc := bufio.NewScanner(resp.Body)
		var last []byte
		for sc.Scan() {
			last = append(last[:0], sc.Bytes()...)
		}
		resp.Body.Close()
		cancel()
		if !bytes.Contains(last, []byte(`"type":"exit"`)) || !bytes.Contains(last, []byte(`"exit_code":0`)) {
			t.Fatalf("stream %d: last line %s", i, last)
		}
		if i > 0 && !reused {
			t.Errorf("stream %d ran on a new connection; want the previous stream's", i)
		}
	}
}

// A connection going idle sheds the write deadline a finished stream left on
// it, so the next response on it is not cut.
func TestIdleConnectionDropsWriteDeadline(t *testing.T) {
	ts := newTestServer(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ts.ConnState(c, http.StateNew)
	defer ts.ConnState(c, http.StateClosed)
	c.SetWriteDeadline(time.Now().Add(-time.Second)) // what a finished stream may leave
	ts.ConnState(c, http.StateIdle)
	if _, err := c.Write([]byte("next response")); err != nil {
		t.Fatalf("write after idle: %v", err)
	}
}
