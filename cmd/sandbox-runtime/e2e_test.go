//go:build linux

package main

// End-to-end tests: the real binary, started as a child process on
// 127.0.0.1:0, driven over real HTTP. Every test starts its own daemon with
// its own base directory and settings. Synchronisation is on log lines and
// HTTP responses; the few places that must poll do so with a deadline.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/internal/daemontest"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

const e2eVersion = "e2e-test"

// binPath is the daemon built once by TestMain (race-enabled when the
// tests are).
var binPath string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandbox-runtime-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	binPath, err = daemontest.Build(ctx, daemontest.BuildOptions{Dir: dir, Version: e2eVersion, Race: daemontest.RaceEnabled})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return m.Run()
}

// ---------------------------------------------------------------------------
// The daemon under test.

type daemon struct {
	*daemontest.Daemon
	t    *testing.T
	base string
	addr string // 127.0.0.1:PORT
	url  string // http://127.0.0.1:PORT

	mu      sync.Mutex
	lines   []string      // stderr, one entry per line
	changed chan struct{} // closed and replaced on every new line and on exit
}

// cleanEnv is the test process's environment without any SANDBOX_ variable,
// so that the developer's shell cannot change what a test sees.
func cleanEnv() []string { return daemontest.CleanEnv() }

// startDaemon starts the binary with env (KEY=VALUE) through the shared
// launcher (a clean environment, a fresh base directory, 127.0.0.1:0, log
// level debug) and waits for the "listening" log line. The daemon is shut
// down (SIGTERM, then SIGKILL) at the end of the test, which fails if the
// log shows a data race or a panic, or a command's process group outlived
// the daemon.
func startDaemon(t *testing.T, env ...string) *daemon {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e tests are skipped with -short")
	}
	d := &daemon{t: t, base: t.TempDir(), changed: make(chan struct{})}
	d.Daemon = daemontest.StartT(t, daemontest.Options{
		Bin:        binPath,
		BaseDir:    d.base,
		LogPath:    filepath.Join(t.TempDir(), "daemon.log"),
		LogLevel:   "debug",
		Env:        env,
		OnLine:     d.addLine,
		CheckLeaks: true,
	})
	go func() {
		<-d.Exited()
		d.mu.Lock()
		d.notifyLocked()
		d.mu.Unlock()
	}()
	line := d.Listening
	if line["version"] != e2eVersion {
		t.Errorf("listening line version = %v, want %q", line["version"], e2eVersion)
	}
	if line["base_dir"] != d.base {
		t.Errorf("listening line base_dir = %v, want %q", line["base_dir"], d.base)
	}
	d.addr = d.Addr
	d.url = d.URL
	return d
}

func (d *daemon) addLine(line string) {
	d.mu.Lock()
	d.lines = append(d.lines, line)
	d.notifyLocked()
	d.mu.Unlock()
}

func (d *daemon) notifyLocked() {
	close(d.changed)
	d.changed = make(chan struct{})
}

// logs returns everything the daemon wrote to stderr so far.
func (d *daemon) logs() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Join(d.lines, "\n")
}

// waitLog waits up to timeout for a JSON log line matching pred, looking at
// every line logged so far first. It returns false on timeout or when the
// process exits without logging one.
func (d *daemon) waitLog(timeout time.Duration, pred func(map[string]any) bool) (map[string]any, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	seen := 0
	for {
		d.mu.Lock()
		lines := d.lines[seen:]
		seen = len(d.lines)
		changed := d.changed
		exited := !d.Alive()
		d.mu.Unlock()
		for _, l := range lines {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && pred(m) {
				return m, true
			}
		}
		if exited {
			return nil, false
		}
		select {
		case <-changed:
		case <-deadline.C:
			return nil, false
		}
	}
}

// signal sends sig to the daemon (the process this test started).
func (d *daemon) signal(sig syscall.Signal) {
	d.t.Helper()
	if err := d.Signal(sig); err != nil {
		d.t.Fatalf("signalling the daemon: %v", err)
	}
}

// waitExit waits up to timeout for the daemon to exit and returns its exit
// code (-1 when it did not exit in time).
func (d *daemon) waitExit(timeout time.Duration) int {
	code, _ := d.Wait(timeout)
	return code
}

// ---------------------------------------------------------------------------
// HTTP helpers.

// The protocol's types, from the one definition.
type (
	status   = wire.Status
	apiError = wire.ErrorBody
)

// event is one line of the event stream (protocol.md §4), with its text.
type event struct {
	wire.Event
	raw string
}

// bytes returns the decoded data of an output event.
func (e *event) bytes(t *testing.T) []byte {
	t.Helper()
	if e.Encoding == "base64" {
		b, err := base64.StdEncoding.DecodeString(e.Data)
		if err != nil {
			t.Fatalf("bad base64 in %s: %v", e.raw, err)
		}
		return b
	}
	if e.Encoding != "" {
		t.Fatalf("unknown encoding in %s", e.raw)
	}
	return []byte(e.Data)
}

var client = &http.Client{Timeout: 0} // bounded by each request's context

// do sends a request with a JSON body (nil: none) and returns the response
// with its body read. Requests are bounded by ctx.
func (d *daemon) do(ctx context.Context, method, path string, body any, hdr ...string) (*http.Response, []byte) {
	d.t.Helper()
	resp := d.open(ctx, method, path, body, hdr...)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return resp, b
}

// try is do without failing the test on a transport error.
func (d *daemon) try(ctx context.Context, method, path string, body any) (*http.Response, []byte, error) {
	var r io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			return nil, nil, err
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.url+path, r)
	if err != nil {
		return nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// open sends a request and returns the response once its headers arrived.
func (d *daemon) open(ctx context.Context, method, path string, body any, hdr ...string) *http.Response {
	d.t.Helper()
	var r io.Reader
	if body != nil {
		switch b := body.(type) {
		case string:
			r = strings.NewReader(b)
		default:
			j, err := json.Marshal(b)
			if err != nil {
				d.t.Fatal(err)
			}
			r = bytes.NewReader(j)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, d.url+path, r)
	if err != nil {
		d.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// doJSON is do plus a status check and decoding into out (nil: skip).
func (d *daemon) doJSON(ctx context.Context, method, path string, body any, wantCode int, out any) *http.Response {
	d.t.Helper()
	resp, b := d.do(ctx, method, path, body)
	if resp.StatusCode != wantCode {
		d.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, resp.StatusCode, wantCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			d.t.Fatalf("%s %s: decoding %s: %v", method, path, b, err)
		}
	}
	return resp
}

// wantError checks a v1 error answer.
func (d *daemon) wantError(ctx context.Context, method, path string, body any, wantCode int, wantErr string) (*http.Response, apiError) {
	d.t.Helper()
	var e apiError
	resp := d.doJSON(ctx, method, path, body, wantCode, &e)
	if e.Error.Code != wantErr {
		d.t.Fatalf("%s %s: error code %q, want %q (message %q)", method, path, e.Error.Code, wantErr, e.Error.Message)
	}
	if e.Error.Message == "" {
		d.t.Errorf("%s %s: error without a message", method, path)
	}
	return resp, e
}

// create starts a command and returns its status (201). A quick command
// may already have finished when the answer is built.
func (d *daemon) create(ctx context.Context, body map[string]any) status {
	d.t.Helper()
	var st status
	d.doJSON(ctx, "POST", "/v1/commands", body, http.StatusCreated, &st)
	if st.CommandID == "" || st.State == "" || st.PID <= 0 {
		d.t.Fatalf("create %v: unexpected status %+v", body, st)
	}
	return st
}

// createRunning is create for a command that must still be running.
func (d *daemon) createRunning(ctx context.Context, body map[string]any) status {
	d.t.Helper()
	st := d.create(ctx, body)
	if st.State != "running" || st.ExitCode != nil || st.FinishedAt != nil {
		d.t.Fatalf("create %v: status %+v, want running", body, st)
	}
	return st
}

// get returns a command's status, waiting up to wait seconds (0: no wait).
func (d *daemon) get(ctx context.Context, id string, wait float64) status {
	d.t.Helper()
	path := "/v1/commands/" + id
	if wait > 0 {
		path += "?wait=" + strconv.FormatFloat(wait, 'f', -1, 64)
	}
	var st status
	d.doJSON(ctx, "GET", path, nil, http.StatusOK, &st)
	return st
}

// waitFinished waits (in wait=20 windows, within ctx) until id finishes.
func (d *daemon) waitFinished(ctx context.Context, id string) status {
	d.t.Helper()
	for {
		st := d.get(ctx, id, 20)
		if st.State != "running" {
			return st
		}
		if ctx.Err() != nil {
			d.t.Fatalf("command %s still running at the deadline", id)
		}
	}
}

// eventReader reads an NDJSON event stream and checks the invariants that
// hold for every line: valid JSON, next_cursor present, output cursors
// contiguous.
type eventReader struct {
	t      *testing.T
	resp   *http.Response
	br     *bufio.Reader
	next   int64 // next_cursor of the last line (the cursor asked for before any)
	lines  int
	closed bool
}

func newEventReader(t *testing.T, resp *http.Response, from int64) *eventReader {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("Content-Type %q (status %d, body %s), want application/x-ndjson", ct, resp.StatusCode, b)
	}
	return &eventReader{t: t, resp: resp, br: bufio.NewReaderSize(resp.Body, 4096), next: from}
}

// read returns the next event, or nil at the end of the body.
func (r *eventReader) read() *event {
	r.t.Helper()
	line, err := r.br.ReadString('\n')
	if err == io.EOF && line == "" {
		return nil
	}
	if err != nil {
		r.t.Fatalf("reading the stream after %d lines: %v (partial %q)", r.lines, err, line)
	}
	r.lines++
	var e event
	dec := json.NewDecoder(strings.NewReader(line))
	if err := dec.Decode(&e); err != nil {
		r.t.Fatalf("stream line %d is not JSON: %q: %v", r.lines, line, err)
	}
	e.raw = strings.TrimSpace(line)
	var present struct {
		NextCursor *int64 `json:"next_cursor"`
	}
	if json.Unmarshal([]byte(line), &present); present.NextCursor == nil {
		r.t.Fatalf("stream line %d has no next_cursor: %s", r.lines, e.raw)
	}
	switch e.Type {
	case "output":
		if e.Cursor == nil {
			r.t.Fatalf("output line without cursor: %s", e.raw)
		}
		if *e.Cursor != r.next {
			r.t.Fatalf("output cursor %d after next_cursor %d: bytes missing or repeated: %s", *e.Cursor, r.next, e.raw)
		}
		if n := int64(len(e.bytes(r.t))); e.NextCursor != *e.Cursor+n {
			r.t.Fatalf("output next_cursor %d != cursor %d + %d bytes: %s", e.NextCursor, *e.Cursor, n, e.raw)
		}
		if e.Stream != "stdout" && e.Stream != "stderr" {
			r.t.Fatalf("output stream %q: %s", e.Stream, e.raw)
		}
	case "gap":
		r.t.Fatalf("unexpected gap (nothing should be evicted in this test): %s", e.raw)
	case "started", "heartbeat", "exit", "end":
		if e.NextCursor < r.next {
			r.t.Fatalf("%s line moves next_cursor back from %d: %s", e.Type, r.next, e.raw)
		}
	default:
		r.t.Fatalf("unknown event type: %s", e.raw)
	}
	r.next = e.NextCursor
	return &e
}

// readAll reads events until the end of the body and checks that the last
// line is an exit or end event and that nothing follows it.
func (r *eventReader) readAll() []*event {
	r.t.Helper()
	var evs []*event
	for {
		e := r.read()
		if e == nil {
			break
		}
		if len(evs) > 0 {
			if last := evs[len(evs)-1]; last.Type == "exit" || last.Type == "end" {
				r.t.Fatalf("a line follows the final %s line: %s", last.Type, e.raw)
			}
		}
		evs = append(evs, e)
	}
	if len(evs) == 0 {
		r.t.Fatal("empty event stream")
	}
	if last := evs[len(evs)-1]; last.Type != "exit" && last.Type != "end" {
		r.t.Fatalf("the stream ends with %s, want exit or end", last.raw)
	}
	r.close()
	return evs
}

// close drops the connection (mid-stream, if the stream is still open).
func (r *eventReader) close() {
	if !r.closed {
		r.closed = true
		r.resp.Body.Close()
	}
}

// collect appends the output of evs to per-stream buffers.
func collect(t *testing.T, evs []*event, out map[string]*bytes.Buffer) {
	t.Helper()
	for _, e := range evs {
		if e.Type == "output" {
			if out[e.Stream] == nil {
				out[e.Stream] = new(bytes.Buffer)
			}
			out[e.Stream].Write(e.bytes(t))
		}
	}
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// ---------------------------------------------------------------------------
// Process groups, seen through /proc.

// groupMembers lists the processes whose process group is pgid, with their
// /proc state letter, zombies included.
func groupMembers(pgid int) map[int]string {
	members := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may contain spaces and ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			members[pid] = f[0]
		}
	}
	return members
}

// waitGroupGone waits up to timeout until no process (not even a zombie)
// is left in process group pgid; kill(-pgid, 0) must then say ESRCH.
func waitGroupGone(t *testing.T, pgid int, timeout time.Duration, allowZombies bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		m := groupMembers(pgid)
		if allowZombies {
			for pid, st := range m {
				if st == "Z" {
					delete(m, pid)
				}
			}
		}
		if len(m) == 0 {
			if !allowZombies {
				if err := syscall.Kill(-pgid, 0); !errors.Is(err, syscall.ESRCH) {
					t.Fatalf("kill(-%d, 0) = %v, want ESRCH", pgid, err)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has members %v after %v", pgid, m, timeout)
		}
		<-tick.C
	}
}

// ---------------------------------------------------------------------------
// Tests.

func TestE2EStreamedRun(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx := testCtx(t, 30*time.Second)

	body := map[string]any{"argv": []string{"sh", "-c", "echo out1; echo err1 >&2; printf 'out2 \\342\\202\\254\\n'; echo err2 >&2"}}
	resp := d.open(ctx, "POST", "/v1/commands?stream=true", body, "X-Request-ID", "e2e-req-streamed")
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d, want 201: %s", resp.StatusCode, b)
	}
	if v := resp.Header.Get("Sandbox-Runtime-Version"); v != e2eVersion {
		t.Errorf("Sandbox-Runtime-Version %q, want %q", v, e2eVersion)
	}
	if v := resp.Header.Get("X-Request-ID"); v != "e2e-req-streamed" {
		t.Errorf("X-Request-ID %q, want the one sent", v)
	}
	r := newEventReader(t, resp, 0)
	evs := r.readAll()

	first := evs[0]
	if first.Type != "started" || first.NextCursor != 0 || first.Status == nil || first.Status.CommandID == "" {
		t.Fatalf("first line %s, want started with next_cursor 0 and a status", first.raw)
	}
	last := evs[len(evs)-1]
	if last.Type != "exit" || last.Status == nil {
		t.Fatalf("last line %s, want exit with a status", last.raw)
	}
	st := last.Status
	if st.State != "exited" || st.ExitCode == nil || *st.ExitCode != 0 || st.Signal != nil {
		t.Errorf("exit status %s, want exited with exit_code 0", last.raw)
	}
	if st.CommandID != first.Status.CommandID {
		t.Errorf("exit status is for %s, started for %s", st.CommandID, first.Status.CommandID)
	}
	out := map[string]*bytes.Buffer{}
	collect(t, evs, out)
	if got, want := out["stdout"].String(), "out1\nout2 €\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if got, want := out["stderr"].String(), "err1\nerr2\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
	total := int64(out["stdout"].Len() + out["stderr"].Len())
	if last.NextCursor != total || st.NextCursor != total || st.StdoutBytes+st.StderrBytes != total {
		t.Errorf("exit next_cursor %d, status next_cursor %d, stdout+stderr bytes %d; want all %d",
			last.NextCursor, st.NextCursor, st.StdoutBytes+st.StderrBytes, total)
	}
	for _, e := range evs[1 : len(evs)-1] {
		if e.Type != "output" && e.Type != "heartbeat" {
			t.Errorf("unexpected line in the middle: %s", e.raw)
		}
	}

	// A request without X-Request-ID gets one generated; every response
	// carries the version, errors included.
	resp, b := d.do(ctx, "GET", "/v1/commands/"+st.CommandID, nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Request-ID") == "" || resp.Header.Get("Sandbox-Runtime-Version") != e2eVersion {
		t.Errorf("GET status: %d, headers %v, body %s", resp.StatusCode, resp.Header, b)
	}
	resp, _ = d.wantError(ctx, "POST", "/v1/commands", map[string]any{"argv": []string{"true"}, "bogus": 1}, 400, "invalid_request")
	if resp.Header.Get("Sandbox-Runtime-Version") != e2eVersion || resp.Header.Get("X-Request-ID") == "" {
		t.Errorf("error response headers %v", resp.Header)
	}
	// A refusal of a streamed create is a plain JSON error.
	resp, b = d.do(ctx, "POST", "/v1/commands?stream=true", map[string]any{"argv": []string{"/nonexistent/e2e-binary"}})
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Errorf("streamed create of a missing binary: %d %s %s, want 422 JSON", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}

	// The request was logged with its id, and the command's end too.
	if _, ok := d.waitLog(5*time.Second, func(m map[string]any) bool {
		return m["msg"] == "request" && m["request_id"] == "e2e-req-streamed"
	}); !ok {
		t.Error("no request log line with request_id e2e-req-streamed")
	}
	if _, ok := d.waitLog(5*time.Second, func(m map[string]any) bool {
		return m["msg"] == "command finished" && m["state"] == "exited" && m["command_id"] == st.CommandID
	}); !ok {
		t.Error("no \"command finished\" log line for the command")
	}
}

// TestE2EReattach drops output streams mid-way and re-opens them with the
// last next_cursor; the bytes received must be exactly the output.
func TestE2EReattach(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx := testCtx(t, 60*time.Second)

	t.Run("paced", func(t *testing.T) {
		// Output is paced by stdin we control: each input line n gives
		// "line-n" on stdout and "err-n" on stderr.
		st := d.createRunning(ctx, map[string]any{
			"argv":  []string{"sh", "-c", `while IFS= read -r l; do echo "line-$l"; echo "err-$l" >&2; done`},
			"stdin": true,
		})
		id := st.CommandID
		var wantOut, wantErr strings.Builder
		feed := func(from, to int) {
			t.Helper()
			var in strings.Builder
			for i := from; i <= to; i++ {
				fmt.Fprintf(&in, "%d\n", i)
				fmt.Fprintf(&wantOut, "line-%d\n", i)
				fmt.Fprintf(&wantErr, "err-%d\n", i)
			}
			var res map[string]any
			d.doJSON(ctx, "POST", "/v1/commands/"+id+"/stdin", map[string]any{"data": in.String()}, 202, &res)
		}
		out := map[string]*bytes.Buffer{"stdout": {}, "stderr": {}}
		// readUntil reads events from r until want bytes in total were
		// received, then returns (the stream stays open).
		readUntil := func(r *eventReader, want int64) {
			t.Helper()
			for r.next < want {
				e := r.read()
				if e == nil {
					t.Fatalf("stream ended at cursor %d, want %d", r.next, want)
				}
				collect(t, []*event{e}, out)
			}
		}
		expected := func() int64 { return int64(wantOut.Len() + wantErr.Len()) }

		feed(1, 200)
		r := newEventReader(t, d.open(ctx, "GET", "/v1/commands/"+id+"/output?max_wait=60", nil), 0)
		readUntil(r, expected())
		// The stream now follows a command that waits for input: drop it.
		cursor := r.next
		r.close()

		feed(201, 400) // produced while nobody is connected
		r = newEventReader(t, d.open(ctx, "GET", fmt.Sprintf("/v1/commands/%s/output?cursor=%d&max_wait=60", id, cursor), nil), cursor)
		readUntil(r, expected())
		feed(401, 600) // produced while connected
		readUntil(r, expected())

		// follow=false on a running command: what is retained, then
		// end/caught_up.
		fr := newEventReader(t, d.open(ctx, "GET", "/v1/commands/"+id+"/output?follow=false", nil), 0)
		evs := fr.readAll()
		if last := evs[len(evs)-1]; last.Type != "end" || last.Reason != "caught_up" || last.NextCursor != expected() {
			t.Errorf("follow=false on a running command ended with %s, want end/caught_up at %d", last.raw, expected())
		}
		// max_wait on a quiet running command: end/max_wait.
		t0 := time.Now()
		mr := newEventReader(t, d.open(ctx, "GET", fmt.Sprintf("/v1/commands/%s/output?cursor=%d&max_wait=0.5", id, expected()), nil), expected())
		evs = mr.readAll()
		if last := evs[len(evs)-1]; last.Type != "end" || last.Reason != "max_wait" || last.NextCursor != expected() {
			t.Errorf("max_wait=0.5 ended with %s, want end/max_wait at %d", last.raw, expected())
		}
		if el := time.Since(t0); el < 450*time.Millisecond || el > 10*time.Second {
			t.Errorf("max_wait=0.5 took %v", el)
		}

		// Drop the first stream again mid-way, then finish with EOF.
		cursor = r.next
		r.close()
		feed(601, 800)
		var res map[string]any
		d.doJSON(ctx, "POST", "/v1/commands/"+id+"/stdin", map[string]any{"eof": true}, 202, &res)
		r = newEventReader(t, d.open(ctx, "GET", fmt.Sprintf("/v1/commands/%s/output?cursor=%d&max_wait=60", id, cursor), nil), cursor)
		evs = r.readAll()
		collect(t, evs, out)
		last := evs[len(evs)-1]
		if last.Type != "exit" || last.Status.State != "exited" || last.Status.ExitCode == nil || *last.Status.ExitCode != 0 {
			t.Fatalf("last line %s, want exit with exit_code 0", last.raw)
		}
		if got := out["stdout"].String(); got != wantOut.String() {
			t.Errorf("stdout across reconnects differs from the output (%d bytes, want %d)", len(got), wantOut.Len())
		}
		if got := out["stderr"].String(); got != wantErr.String() {
			t.Errorf("stderr across reconnects differs from the output (%d bytes, want %d)", len(got), wantErr.Len())
		}
		if last.NextCursor != expected() {
			t.Errorf("final next_cursor %d, want %d", last.NextCursor, expected())
		}
	})

	t.Run("free-running", func(t *testing.T) {
		// A command that writes as fast as it can; the stream is dropped
		// after its first output line, whatever is in flight.
		const n = 20000
		var want strings.Builder
		for i := 1; i <= n; i++ {
			fmt.Fprintf(&want, "line-%d\n", i)
		}
		st := d.create(ctx, map[string]any{"argv": []string{"sh", "-c", fmt.Sprintf(`i=1; while [ $i -le %d ]; do echo "line-$i"; i=$((i+1)); done`, n)}})
		var got bytes.Buffer
		cursor := int64(0)
		for reconnects := 0; ; reconnects++ {
			if reconnects > 10000 {
				t.Fatal("too many reconnects")
			}
			r := newEventReader(t, d.open(ctx, "GET", fmt.Sprintf("/v1/commands/%s/output?cursor=%d&max_wait=60", st.CommandID, cursor), nil), cursor)
			e := r.read()
			for e != nil && e.Type != "output" && e.Type != "exit" {
				e = r.read()
			}
			if e == nil {
				t.Fatalf("stream from %d ended without output or exit", cursor)
			}
			if e.Type == "exit" {
				r.close()
				if got.String() != want.String() {
					t.Fatalf("output across %d reconnects: %d bytes, want %d; equal prefix %d", reconnects, got.Len(), want.Len(), commonPrefix(got.String(), want.String()))
				}
				if e.NextCursor != int64(want.Len()) || e.Status.ExitCode == nil || *e.Status.ExitCode != 0 {
					t.Fatalf("exit line %s", e.raw)
				}
				return
			}
			if e.Stream != "stdout" {
				t.Fatalf("unexpected stderr: %s", e.raw)
			}
			got.Write(e.bytes(t))
			cursor = r.next
			// Read one more line half the time, to drop at other points.
			if reconnects%2 == 1 {
				if e := r.read(); e != nil && e.Type == "output" {
					got.Write(e.bytes(t))
					cursor = r.next
				}
			}
			r.close()
		}
	})
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestE2EWaitDoesNotKill(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx := testCtx(t, 30*time.Second)
	st := d.createRunning(ctx, map[string]any{"argv": []string{"sleep", "30"}})
	id := st.CommandID

	t0 := time.Now()
	got := d.get(ctx, id, 0.5)
	if el := time.Since(t0); el < 450*time.Millisecond {
		t.Errorf("wait=0.5 answered after %v", el)
	}
	if got.State != "running" || got.ExitCode != nil || got.FinishedAt != nil {
		t.Errorf("after wait=0.5: %+v, want running", got)
	}
	if got := d.get(ctx, id, 0); got.State != "running" {
		t.Errorf("after the wait the command is %s, want running", got.State)
	}
	if err := syscall.Kill(st.PID, 0); err != nil {
		t.Errorf("the process is gone after a wait: %v", err)
	}

	// The headers of a wait arrive at once, long before the wait ends (the
	// margin, not absolute times, is checked: the machine may be slow).
	t0 = time.Now()
	resp := d.open(ctx, "GET", "/v1/commands/"+id+"?wait=3", nil)
	headersAt := time.Since(t0)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	bodyAt := time.Since(t0)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("wait=3: %d %v %s", resp.StatusCode, err, b)
	}
	if bodyAt < 2900*time.Millisecond || bodyAt-headersAt < 1500*time.Millisecond {
		t.Errorf("wait=3: headers after %v, body after %v; want the headers at once and the body after the wait", headersAt, bodyAt)
	}
	var st2 status
	if err := json.Unmarshal(b, &st2); err != nil || st2.State != "running" {
		t.Errorf("wait=3 body %s", b)
	}

	// A client that gives up on a wait does not affect the command.
	cctx, cancel := context.WithCancel(ctx)
	resp = d.open(cctx, "GET", "/v1/commands/"+id+"?wait=20", nil)
	cancel()
	resp.Body.Close()
	if got := d.get(ctx, id, 0); got.State != "running" {
		t.Errorf("after an abandoned wait the command is %s", got.State)
	}

	// Bad wait values are 400.
	for _, q := range []string{"wait=-1", "wait=abc"} {
		d.wantError(ctx, "GET", "/v1/commands/"+id+"?"+q, nil, 400, "invalid_request")
	}
}

func TestE2EKillProcessTree(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "SANDBOX_KILL_GRACE_SECONDS=1")
	ctx := testCtx(t, 30*time.Second)

	st := d.createRunning(ctx, map[string]any{"argv": []string{"sh", "-c", "sleep 300 & sleep 300 & echo ready; wait"}})
	pgid := st.PID
	// Sync on the output: both children exist once "ready" is printed.
	r := newEventReader(t, d.open(ctx, "GET", "/v1/commands/"+st.CommandID+"/output?max_wait=30", nil), 0)
	if e := r.read(); e == nil || e.Type != "output" || e.Data != "ready\n" {
		t.Fatalf("first line %+v, want ready", e)
	}
	if m := groupMembers(pgid); len(m) < 3 {
		t.Fatalf("process group %d has %v, want the shell and two sleeps", pgid, m)
	}

	var killed status
	t0 := time.Now()
	d.doJSON(ctx, "POST", "/v1/commands/"+st.CommandID+"/kill", nil, 200, &killed)
	if killed.State != "cancelled" || killed.ExitCode == nil || killed.FinishedAt == nil {
		t.Fatalf("kill answered %+v, want cancelled with an exit code", killed)
	}
	if el := time.Since(t0); el > 10*time.Second {
		t.Errorf("kill took %v", el)
	}
	// The follower sees the exit.
	evs := r.readAll()
	if last := evs[len(evs)-1]; last.Type != "exit" || last.Status.State != "cancelled" {
		t.Errorf("follower ended with %s, want exit/cancelled", last.raw)
	}
	// Nothing of the group survives, zombies included (the daemon reaps).
	waitGroupGone(t, pgid, 10*time.Second, false)

	// Kill is idempotent: the same final status.
	var again status
	d.doJSON(ctx, "POST", "/v1/commands/"+st.CommandID+"/kill", nil, 200, &again)
	if again.State != killed.State || *again.ExitCode != *killed.ExitCode || !equalPtr(again.Signal, killed.Signal) || !equalPtr(again.FinishedAt, killed.FinishedAt) {
		t.Errorf("second kill %+v, first %+v", again, killed)
	}
	if _, ok := d.waitLog(5*time.Second, func(m map[string]any) bool {
		return m["msg"] == "command finished" && m["state"] == "cancelled" && m["command_id"] == st.CommandID
	}); !ok {
		t.Error("no \"command finished\" log line with state cancelled")
	}
	// Signal on a finished command is 409 finished.
	d.wantError(ctx, "POST", "/v1/commands/"+st.CommandID+"/signal", map[string]any{"signal": "SIGINT"}, 409, "finished")
}

func equalPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func TestE2EStdin(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx := testCtx(t, 30*time.Second)

	st := d.createRunning(ctx, map[string]any{"argv": []string{"cat"}, "stdin": true})
	if !st.Stdin || st.StdinClosed {
		t.Errorf("status stdin=%v stdin_closed=%v, want true/false", st.Stdin, st.StdinClosed)
	}
	path := "/v1/commands/" + st.CommandID + "/stdin"
	var res map[string]any
	d.doJSON(ctx, "POST", path, map[string]any{"data": "hello\n"}, 202, &res)
	if res["queued_bytes"] != float64(6) || res["stdin_closed"] != false {
		t.Errorf("stdin answered %v, want queued_bytes 6, stdin_closed false", res)
	}
	bin := []byte("b\x00\xff\xfe wörld\n")
	d.doJSON(ctx, "POST", path, map[string]any{"data": base64.StdEncoding.EncodeToString(bin), "encoding": "base64"}, 202, &res)
	if res["queued_bytes"] != float64(len(bin)) {
		t.Errorf("base64 stdin answered %v, want queued_bytes %d", res, len(bin))
	}
	d.wantError(ctx, "POST", path, map[string]any{"data": "!!!", "encoding": "base64"}, 400, "invalid_request")
	d.doJSON(ctx, "POST", path, map[string]any{"eof": true}, 202, &res)
	if res["stdin_closed"] != true || res["queued_bytes"] != float64(0) {
		t.Errorf("eof answered %v, want queued_bytes 0, stdin_closed true", res)
	}
	// After EOF: stdin_closed, or finished once cat has exited.
	var late apiError
	d.doJSON(ctx, "POST", path, map[string]any{"data": "late"}, 409, &late)
	if late.Error.Code != "stdin_closed" && late.Error.Code != "finished" {
		t.Errorf("stdin after EOF: %q, want stdin_closed or finished", late.Error.Code)
	}

	fin := d.waitFinished(ctx, st.CommandID)
	if fin.State != "exited" || fin.ExitCode == nil || *fin.ExitCode != 0 {
		t.Fatalf("cat ended %+v, want exited 0", fin)
	}
	r := newEventReader(t, d.open(ctx, "GET", "/v1/commands/"+st.CommandID+"/output?follow=false", nil), 0)
	evs := r.readAll()
	out := map[string]*bytes.Buffer{"stdout": {}}
	collect(t, evs, out)
	if want := append([]byte("hello\n"), bin...); !bytes.Equal(out["stdout"].Bytes(), want) {
		t.Errorf("cat echoed %q, want %q", out["stdout"].Bytes(), want)
	}
	if last := evs[len(evs)-1]; last.Type != "exit" {
		t.Errorf("follow=false on a finished command ended with %s, want exit", last.raw)
	}

	// A command without stdin: 409 stdin_not_enabled, and it says so.
	st = d.createRunning(ctx, map[string]any{"argv": []string{"sleep", "30"}})
	if st.Stdin || !st.StdinClosed {
		t.Errorf("without stdin: stdin=%v stdin_closed=%v, want false/true", st.Stdin, st.StdinClosed)
	}
	d.wantError(ctx, "POST", "/v1/commands/"+st.CommandID+"/stdin", map[string]any{"data": "x"}, 409, "stdin_not_enabled")
}

func TestE2ELimits(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "SANDBOX_MAX_RUNNING=2", "SANDBOX_MAX_RETAINED=4")
	ctx := testCtx(t, 30*time.Second)

	var info wire.Info
	d.doJSON(ctx, "GET", "/v1/info", nil, 200, &info)
	if info.Version != e2eVersion || info.Limits.MaxRunning != 2 || info.Limits.MaxRetained != 4 {
		t.Errorf("/v1/info: %+v", info)
	}

	a := d.createRunning(ctx, map[string]any{"argv": []string{"sleep", "30"}})
	b := d.createRunning(ctx, map[string]any{"argv": []string{"sleep", "30"}})
	resp, _ := d.wantError(ctx, "POST", "/v1/commands", map[string]any{"argv": []string{"sleep", "30"}}, 429, "too_many_running")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	var list wire.CommandList
	d.doJSON(ctx, "GET", "/v1/commands", nil, 200, &list)
	if len(list.Commands) != 2 || list.Commands[0].CommandID != a.CommandID || list.Commands[1].CommandID != b.CommandID {
		t.Fatalf("list after the 429: %+v, want the two sleeps oldest first", list.Commands)
	}

	// Retained handles: 2 running + finished ones, at most 4; the oldest
	// finished is evicted and then answers 410 evicted. Run the finished
	// ones after freeing a slot.
	var killed status
	d.doJSON(ctx, "POST", "/v1/commands/"+b.CommandID+"/kill", nil, 200, &killed)
	var done []string
	for i := 0; i < 3; i++ {
		st := d.create(ctx, map[string]any{"argv": []string{"true"}})
		d.waitFinished(ctx, st.CommandID)
		done = append(done, st.CommandID)
	}
	// Retained: a (running), b (killed, finished first), done[0..2] → 5 > 4:
	// b, the oldest finished, was evicted when done[2] was created.
	d.doJSON(ctx, "GET", "/v1/commands", nil, 200, &list)
	var ids []string
	for _, c := range list.Commands {
		ids = append(ids, c.CommandID)
	}
	if want := append([]string{a.CommandID}, done...); !slices.Equal(ids, want) {
		t.Errorf("retained %v, want %v", ids, want)
	}
	_, e := d.wantError(ctx, "GET", "/v1/commands/"+b.CommandID, nil, 410, "gone")
	if e.Error.Reason != "evicted" {
		t.Errorf("evicted handle: reason %q, want evicted", e.Error.Reason)
	}
	d.doJSON(ctx, "GET", "/v1/commands?state=running", nil, 200, &list)
	if len(list.Commands) != 1 || list.Commands[0].CommandID != a.CommandID {
		t.Errorf("?state=running: %+v", list.Commands)
	}
}

func TestE2EExpiry(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "SANDBOX_RESULT_TTL_SECONDS=0.5")
	ctx := testCtx(t, 30*time.Second)

	st := d.create(ctx, map[string]any{"argv": []string{"true"}})
	fin := d.waitFinished(ctx, st.CommandID)
	if fin.State != "exited" || fin.ExpiresAt == nil {
		t.Fatalf("finished status %+v, want exited with expires_at", fin)
	}
	// Poll until it expires: bounded, the TTL is 0.5 s.
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, b := d.do(ctx, "GET", "/v1/commands/"+st.CommandID, nil)
		if resp.StatusCode == http.StatusGone {
			var e apiError
			if err := json.Unmarshal(b, &e); err != nil || e.Error.Code != "gone" || e.Error.Reason != "expired" {
				t.Fatalf("410 body %s, want {\"error\":{\"code\":\"gone\",\"reason\":\"expired\"}}", b)
			}
			break
		}
		if resp.StatusCode != 200 {
			t.Fatalf("GET before expiry: %d %s", resp.StatusCode, b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d %s 10 s after finishing with a 0.5 s TTL", resp.StatusCode, b)
		}
		<-tick.C
	}
	// Every route on the id says gone.
	d.wantError(ctx, "GET", "/v1/commands/"+st.CommandID+"/output", nil, 410, "gone")
	d.wantError(ctx, "POST", "/v1/commands/"+st.CommandID+"/kill", nil, 410, "gone")
	// Unknown ids are 404.
	d.wantError(ctx, "GET", "/v1/commands/7f2b3c1e-9a4d-4e5f-8b6a-0c1d2e3f4a5b", nil, 404, "not_found")
	d.wantError(ctx, "GET", "/v1/commands/not-a-uuid", nil, 404, "not_found")
}

func TestE2EShutdown(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "SANDBOX_KILL_GRACE_SECONDS=2")
	ctx := testCtx(t, 60*time.Second)

	// One command that dies on SIGTERM, one that ignores it (SIGKILL after
	// the grace, which keeps the daemon draining long enough to see 503).
	plain := d.createRunning(ctx, map[string]any{"argv": []string{"sleep", "300"}})
	stubborn := d.createRunning(ctx, map[string]any{"argv": []string{"sh", "-c", `trap "" TERM; echo ready; sleep 300`}})
	fPlain := newEventReader(t, d.open(ctx, "GET", "/v1/commands/"+plain.CommandID+"/output?max_wait=60", nil), 0)
	fStub := newEventReader(t, d.open(ctx, "GET", "/v1/commands/"+stubborn.CommandID+"/output?max_wait=60", nil), 0)
	if e := fStub.read(); e == nil || e.Data != "ready\n" {
		t.Fatalf("first line %+v, want ready", e)
	}

	t0 := time.Now()
	d.signal(syscall.SIGTERM)
	if _, ok := d.waitLog(10*time.Second, func(m map[string]any) bool { return m["msg"] == "shutting down" }); !ok {
		t.Fatal("no \"shutting down\" log line after SIGTERM")
	}
	// While the stubborn command is in its grace (2 s), the daemon drains:
	// health 503 and no admission. On a very slow machine the listener may
	// already be closed when we get to ask; that only skips this check.
	saw503, closed := false, false
	for deadline := time.Now().Add(10 * time.Second); !saw503 && !closed && time.Now().Before(deadline); {
		resp, b, err := d.try(ctx, "GET", "/v1/health", nil)
		switch {
		case err != nil:
			closed = true
			t.Logf("health during shutdown: %v (the listener is closed already)", err)
		case resp.StatusCode == http.StatusServiceUnavailable:
			saw503 = true
			if !strings.Contains(string(b), `"shutting_down"`) {
				t.Errorf("health while draining: %s", b)
			}
		case resp.StatusCode != http.StatusOK:
			t.Errorf("health during shutdown: %d %s", resp.StatusCode, b)
		}
	}
	if saw503 {
		resp, b, err := d.try(ctx, "POST", "/v1/commands", map[string]any{"argv": []string{"true"}})
		if err == nil && (resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), `"shutting_down"`)) {
			t.Errorf("create while draining: %d %s, want 503 shutting_down", resp.StatusCode, b)
		}
	} else if !closed {
		t.Error("/v1/health did not answer 503 within 10 s of SIGTERM")
	}

	for name, r := range map[string]*eventReader{"sleep": fPlain, "trap": fStub} {
		evs := r.readAll()
		last := evs[len(evs)-1]
		if last.Type != "exit" || last.Status.State != "terminated" || last.Status.ExitCode == nil {
			t.Errorf("%s follower ended with %s, want exit/terminated", name, last.raw)
		}
	}
	code := d.waitExit(25*time.Second - time.Since(t0))
	if code != 0 {
		t.Fatalf("the daemon exited with %d (-1: not within 25 s), want 0", code)
	}
	for _, id := range []string{plain.CommandID, stubborn.CommandID} {
		if _, ok := d.waitLog(0, func(m map[string]any) bool {
			return m["msg"] == "command finished" && m["state"] == "terminated" && m["command_id"] == id
		}); !ok {
			t.Errorf("no \"command finished\" line with \"state\":\"terminated\" for %s", id)
		}
	}
	if _, ok := d.waitLog(0, func(m map[string]any) bool { return m["msg"] == "stopped" }); !ok {
		t.Error("no \"stopped\" log line")
	}
	waitGroupGone(t, plain.PID, 5*time.Second, true)
	waitGroupGone(t, stubborn.PID, 5*time.Second, true)
}

// ---------------------------------------------------------------------------
// Configuration through the binary.

// runBinary runs the binary to completion (bounded) and returns its exit
// code, stdout and stderr.
func runBinary(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Dir = t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%v %v did not exit within 20 s; stderr: %s", env, args, stderr.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// protocolFile is the protocol document; every SANDBOX_ variable it names
// must be a flag of --help.
const protocolFile = "../../docs/protocol.md"

func TestE2EHelpListsEveryVariable(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runBinary(t, nil, "--help")
	if code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	if stderr != "" {
		t.Errorf("--help wrote to stderr: %q", stderr)
	}
	help := stdout // `sandbox-runtime --help | less` must work
	b, err := os.ReadFile(protocolFile)
	if err != nil {
		t.Fatalf("the protocol document is part of the repository: %v", err)
	}
	names := regexp.MustCompile(`SANDBOX_[A-Z0-9_]+`).FindAllString(string(b), -1)
	if len(names) < 10 {
		t.Fatalf("%s names only %d SANDBOX_ variables", protocolFile, len(names))
	}
	for _, s := range (&config{}).settings() {
		names = append(names, s.env)
		if !strings.Contains(help, "-"+s.flag) {
			t.Errorf("--help does not list the flag --%s", s.flag)
		}
	}
	slices.Sort(names)
	for _, n := range slices.Compact(names) {
		if !regexp.MustCompile(`\b` + n + `\b`).MatchString(help) {
			t.Errorf("--help does not mention %s", n)
		}
	}
	if !strings.Contains(help, "-version") {
		t.Error("--help does not list --version")
	}
}

func TestE2EVersion(t *testing.T) {
	t.Parallel()
	code, stdout, _ := runBinary(t, nil, "--version")
	if code != 0 || strings.TrimSpace(stdout) != "sandbox-runtime "+e2eVersion {
		t.Errorf("--version: exit %d, stdout %q", code, stdout)
	}
}

func TestE2EBadConfigRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		env  []string
		args []string
		want []string // in stderr
	}{
		{"running above retained", []string{"SANDBOX_MAX_RUNNING=5", "SANDBOX_MAX_RETAINED=4"}, nil,
			[]string{"SANDBOX_MAX_RUNNING (5) must not exceed SANDBOX_MAX_RETAINED (4)"}},
		{"running above retained by flag", nil, []string{"--max-running=65"},
			[]string{"must not exceed SANDBOX_MAX_RETAINED (64)"}},
		{"not a number", []string{"SANDBOX_MAX_RUNNING=lots"}, nil, []string{"SANDBOX_MAX_RUNNING", `"lots"`}},
		{"negative seconds", []string{"SANDBOX_RESULT_TTL_SECONDS=-1"}, nil, []string{"SANDBOX_RESULT_TTL_SECONDS"}},
		{"zero limit", []string{"SANDBOX_OUTPUT_LIMIT_BYTES=0"}, nil, []string{"SANDBOX_OUTPUT_LIMIT_BYTES"}},
		{"bad flag value", nil, []string{"--kill-grace-seconds=soon"}, []string{"--kill-grace-seconds", `"soon"`}},
		{"missing base dir", []string{"SANDBOX_BASE_DIR=/nonexistent/e2e"}, nil, []string{"/nonexistent/e2e"}},
		{"two errors at once", []string{"SANDBOX_MAX_RUNNING=x", "SANDBOX_EXEC_TIMEOUT_SECONDS=y"}, nil,
			[]string{"SANDBOX_MAX_RUNNING", "SANDBOX_EXEC_TIMEOUT_SECONDS"}},
		{"unknown flag", nil, []string{"--no-such-flag"}, []string{"no-such-flag"}},
		{"missing token file", []string{"SANDBOX_RUNTIME_TOKEN_FILE=/nonexistent/e2e-token"}, nil, []string{`token file "/nonexistent/e2e-token"`, "no such file"}},
		{"bad log format", nil, []string{"--log-format=xml"}, []string{`"xml"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := append([]string{"SANDBOX_RUNTIME_ADDR=127.0.0.1:0"}, c.env...)
			code, stdout, stderr := runBinary(t, env, c.args...)
			if code != 2 {
				t.Errorf("exit code %d, want 2; stderr %s", code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, `"listening"`) || stdout != "" {
				t.Errorf("a refused configuration started anyway or printed to stdout: %s %s", stdout, stderr)
			}
			checkPlainLine(t, stderr)
		})
	}
}

// checkPlainLine: a start-up failure is one plain line on stderr, never JSON.
func checkPlainLine(t *testing.T, stderr string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") || !strings.HasPrefix(stderr, "sandbox-runtime: ") || strings.Contains(stderr, "{") {
		t.Errorf("stderr is not one plain line starting %q: %q", "sandbox-runtime: ", stderr)
	}
}

// TestE2EStartupFailures: what stops the daemon before it serves exits 2 with
// one plain line naming the problem: an address in use, a token file that is
// empty or unreadable.
func TestE2EStartupFailures(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty-token")
	os.WriteFile(empty, []byte("\n  \n"), 0o600)
	// Tokens no request can send (D5): before, each started with auth on
	// (exit 0) and every request was then refused.
	unsendable := map[string]string{"nul": "s3cr\x00et\n", "two-lines": "s3cret\nsecond\n", "bom": "\uFEFFs3cret\n", "control": "s3c\x1bret"}
	for name, content := range unsendable {
		os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600)
	}
	cases := []struct {
		name string
		env  []string
		want []string
	}{
		{"address in use", []string{"SANDBOX_RUNTIME_ADDR=" + ln.Addr().String()}, []string{ln.Addr().String(), "address already in use"}},
		{"address without a port", []string{"SANDBOX_RUNTIME_ADDR=nonsense"}, []string{"SANDBOX_RUNTIME_ADDR", "missing port"}},
		{"empty token file", []string{"SANDBOX_RUNTIME_ADDR=127.0.0.1:0", "SANDBOX_RUNTIME_TOKEN_FILE=" + empty}, []string{empty, "is empty"}},
		{"token file is a directory", []string{"SANDBOX_RUNTIME_ADDR=127.0.0.1:0", "SANDBOX_RUNTIME_TOKEN_FILE=" + dir}, []string{dir, "not a regular file"}},
		{"token with a NUL", []string{"SANDBOX_RUNTIME_ADDR=127.0.0.1:0", "SANDBOX_RUNTIME_TOKEN_FILE=" + dir + "/nul"}, []string{dir + "/nul", "control byte"}},
		{"token of two lines", []string{"SANDBOX_RUNTIME_ADDR=127.0.0.1:0", "SANDBOX_RUNTIME_TOKEN_FILE=" + dir + "/two-lines"}, []string{dir + "/two-lines", "second line"}},
		{"token with a BOM", []string{"SANDBOX_RUNTIME_ADDR=127.0.0.1:0", "SANDBOX_RUNTIME_TOKEN_FILE=" + dir + "/bom"}, []string{dir + "/bom", "byte-order mark"}},
		{"token with an escape", []string{"SANDBOX_RUNTIME_ADDR=127.0.0.1:0", "SANDBOX_RUNTIME_TOKEN_FILE=" + dir + "/control"}, []string{dir + "/control", "control byte"}},
	}
	for _, c := range cases {
		code, stdout, stderr := runBinary(t, c.env)
		if strings.Contains(stderr, "s3c") {
			t.Errorf("%s: stderr shows the token: %q", c.name, stderr)
		}
		if code != 2 || stdout != "" {
			t.Errorf("%s: exit %d, stdout %q; want 2 and nothing; stderr %q", c.name, code, stdout, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr does not say %q: %q", c.name, w, stderr)
			}
		}
		checkPlainLine(t, stderr)
	}
}

// TestE2EUnknownVariableWarned: a mistyped SANDBOX_ variable is named in a
// warning with the setting it was probably meant to be; the daemon runs.
func TestE2EUnknownVariableWarned(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "SANDBOX_MAX_RUNING=5", "SANDBOX_RUNTIME_SERVICE_HOST=10.0.0.1")
	line, ok := d.waitLog(10*time.Second, func(m map[string]any) bool { return m["variable"] == "SANDBOX_MAX_RUNING" })
	if !ok {
		t.Fatalf("no warning naming SANDBOX_MAX_RUNING:\n%s", d.logs())
	}
	if line["level"] != "warn" || line["did_you_mean"] != "SANDBOX_MAX_RUNNING" {
		t.Errorf("warning %v; want level warn, did_you_mean SANDBOX_MAX_RUNNING", line)
	}
	if strings.Contains(d.logs(), "SANDBOX_RUNTIME_SERVICE_HOST") {
		t.Errorf("a Kubernetes service-link variable was warned about:\n%s", d.logs())
	}
}

// TestE2ELogFormatOnTerminal: with stderr on a terminal the default log is
// console text, not JSON (a pipe, as in every other e2e test, gives JSON).
// script(1) gives the daemon a pseudo-terminal.
func TestE2ELogFormatOnTerminal(t *testing.T) {
	t.Parallel()
	scriptBin, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) from util-linux is not installed: no way to give the daemon a terminal")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, scriptBin, "-qfec", binPath, "/dev/null")
	cmd.Env = append(cleanEnv(), "SANDBOX_RUNTIME_ADDR=127.0.0.1:0", "SANDBOX_BASE_DIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	pidRe := regexp.MustCompile(`"pid": (\d+)`)
	sc := bufio.NewScanner(out)
	var pid int
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "listening") {
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(line), "{") || !strings.Contains(line, "INFO") {
			t.Errorf("the log on a terminal is not console text: %q", line)
		}
		if m := pidRe.FindStringSubmatch(line); m != nil {
			pid, _ = strconv.Atoi(m[1])
		}
		break
	}
	if pid <= 0 {
		t.Fatalf("no listening line with the daemon's pid (scan: %v)", sc.Err())
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil { // the daemon we started, by its pid
		t.Fatal(err)
	}
	go io.Copy(io.Discard, out)
}
