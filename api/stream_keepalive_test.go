package api

import (
	"bufio"
	"bytes"
	"context"
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
