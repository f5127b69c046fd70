package api

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
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

// TestHeadOfAStreamDoesNotHoldTheConnection: a HEAD of a followed stream
// (and of a waiting status) answers its headers and ends, so the next
// request on the same kept-alive connection is served; before, it waited
// out the whole max_wait while the stream ran for nobody.
func TestHeadOfAStreamDoesNotHoldTheConnection(t *testing.T) {
	ts := newTestServer(t, nil)
	st := atCreate(t, ts, `{"argv":["sleep","300"]}`)
	defer atDo(t, "POST", ts.URL+"/v1/commands/"+st.CommandID+"/kill", "", nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	// The client gives up long before the 60 s window and the 20 s wait:
	// only an answer that does not wait for them passes.
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for _, path := range []string{
		"/v1/commands/" + st.CommandID + "/output?follow=true&max_wait=60",
		"/v1/commands/" + st.CommandID + "?wait=20",
	} {
		fmt.Fprintf(c, "HEAD %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		resp, err := http.ReadResponse(br, &http.Request{Method: "HEAD"})
		if err != nil {
			t.Fatalf("HEAD %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("HEAD %s: %d close=%v; want 200 on a kept-alive connection", path, resp.StatusCode, resp.Close)
		}
	}
	fmt.Fprintf(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatalf("the request after the HEADs on the same connection: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("health after the HEADs: %d", resp.StatusCode)
	}
}
