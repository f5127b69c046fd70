package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// bigRing keeps every byte of the pattern commands, so that a gap can only
// come from a client bug.
const bigRing = "SANDBOX_OUTPUT_LIMIT_BYTES=67108864"

const (
	patternOut = 4 << 20
	patternErr = 1 << 20
)

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestRunExactlyOnceThroughCuttingProxy runs a command with 5 MiB of
// multi-byte (and, on stderr, non-UTF-8) output through a proxy that cuts
// every connection after at most 128 KiB: the create is retried with its
// command_id, the stream resumed from the last processed next_cursor, and
// the collected output must be the command's, byte for byte.
func TestRunExactlyOnceThroughCuttingProxy(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, bigRing)
	p := newCutProxy(t, strings.TrimPrefix(d.url, "http://"), 128<<10, 1)
	c := newClient(t, p.url(), Options{})
	var gotOut, gotErr bytes.Buffer
	var started atomic.Int32
	res, err := c.Run(testCtx(t, 3*time.Minute), helperReq("pattern", "7", itoa(patternOut), itoa(patternErr)), RunOptions{
		Stdout: func(b []byte) {
			if started.Load() == 0 {
				t.Error("output before OnStart")
			}
			gotOut.Write(b)
		},
		Stderr:  func(b []byte) { gotErr.Write(b) },
		OnStart: func(*wire.Status) { started.Add(1) },
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantOut, wantErr := patternText(7, patternOut, patternErr)
	checkBytes(t, "Result.Stdout", res.Stdout, wantOut)
	checkBytes(t, "Result.Stderr", res.Stderr, wantErr)
	checkBytes(t, "Stdout callbacks", gotOut.Bytes(), wantOut)
	checkBytes(t, "Stderr callbacks", gotErr.Bytes(), wantErr)
	if res.GapBytes != 0 || res.StdoutDropped != 0 || res.StderrDropped != 0 {
		t.Errorf("gap %d, dropped %d/%d; want none", res.GapBytes, res.StdoutDropped, res.StderrDropped)
	}
	if res.Status.State != wire.StateExited || res.ExitCode() != 0 {
		t.Errorf("state %s exit %d; want exited 0", res.Status.State, res.ExitCode())
	}
	if n := started.Load(); n != 1 {
		t.Errorf("OnStart called %d times, want 1", n)
	}
	// The proxy must really have cut streams mid-way, many times.
	if cuts := p.cuts.Load(); cuts < 20 {
		t.Errorf("the proxy cut %d connections; the test needs at least 20 to mean anything", cuts)
	}
	// Exactly one command was created, whatever the retries of the create.
	all, err := newClient(t, d.url, Options{}).List(testCtx(t, 10*time.Second), "")
	if err != nil || len(all) != 1 {
		t.Errorf("List: %d commands, %v; want exactly 1", len(all), err)
	}
	t.Logf("%d connections, %d cut by the proxy", p.accepted.Load(), p.cuts.Load())
}

// TestRunRetriesACreateCutOff cuts the create three ways: inside the
// request (nothing created), after the whole request with no answer (the
// command exists, the client does not know), and inside the answer's
// headers. Run must retry with its command_id, create exactly one command
// and deliver its output once.
func TestRunRetriesACreateCutOff(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, bigRing)
	p := newCutProxy(t, strings.TrimPrefix(d.url, "http://"), 1<<30, 5,
		cutLimits{up: 40, down: -1}, cutLimits{up: -1, down: 0}, cutLimits{up: -1, down: 20})
	c := newClient(t, p.url(), Options{})
	res, err := c.Run(testCtx(t, time.Minute), helperReq("pattern", "9", "300000", "1000"), RunOptions{})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantOut, wantErr := patternText(9, 300000, 1000)
	checkBytes(t, "stdout", res.Stdout, wantOut)
	checkBytes(t, "stderr", res.Stderr, wantErr)
	if p.cuts.Load() < 3 {
		t.Errorf("%d cuts, want at least the 3 scripted", p.cuts.Load())
	}
	all, err := newClient(t, d.url, Options{}).List(testCtx(t, 10*time.Second), "")
	if err != nil || len(all) != 1 {
		t.Errorf("List: %d commands, %v; want exactly 1", len(all), err)
	}
}

// TestFollowExactlyOnceThroughCuttingProxy follows a running command from
// cursor 0 through the cutting proxy.
func TestFollowExactlyOnceThroughCuttingProxy(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, bigRing)
	direct := newClient(t, d.url, Options{})
	ctx := testCtx(t, 3*time.Minute)
	st, err := direct.Start(ctx, helperReq("pattern", "11", itoa(patternOut), itoa(patternErr)))
	if err != nil {
		t.Fatal(err)
	}
	p := newCutProxy(t, strings.TrimPrefix(d.url, "http://"), 96<<10, 2)
	c := newClient(t, p.url(), Options{})
	var out, errb bytes.Buffer
	final, err := c.Follow(ctx, st.CommandID, 0, func(ev *wire.Event) error {
		if ev.Type == wire.EventGap {
			t.Errorf("gap of %d bytes", *ev.DroppedBytes)
			return nil
		}
		b, _ := ev.Bytes()
		if ev.Stream == wire.StreamStderr {
			errb.Write(b)
		} else {
			out.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	wantOut, wantErr := patternText(11, patternOut, patternErr)
	checkBytes(t, "stdout", out.Bytes(), wantOut)
	checkBytes(t, "stderr", errb.Bytes(), wantErr)
	if final.NextCursor != int64(patternOut+patternErr) {
		t.Errorf("final next_cursor %d, want %d", final.NextCursor, patternOut+patternErr)
	}
	if p.cuts.Load() < 20 {
		t.Errorf("only %d cuts", p.cuts.Load())
	}
}

// TestAttachExactlyOnceThroughCuttingProxy reads the same output over a
// WebSocket that the proxy keeps cutting (the handshake included).
func TestAttachExactlyOnceThroughCuttingProxy(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, bigRing)
	direct := newClient(t, d.url, Options{})
	ctx := testCtx(t, 3*time.Minute)
	st, err := direct.Start(ctx, helperReq("pattern", "13", itoa(patternOut/2), itoa(patternErr/2)))
	if err != nil {
		t.Fatal(err)
	}
	p := newCutProxy(t, strings.TrimPrefix(d.url, "http://"), 96<<10, 4)
	c := newClient(t, p.url(), Options{})
	var a *Attachment
	for a == nil { // the handshake itself may be cut
		a, err = c.Attach(ctx, st.CommandID, 0)
		if err != nil && ctx.Err() != nil {
			t.Fatal(err)
		}
	}
	defer a.Close()
	var out, errb bytes.Buffer
	var exit *wire.Event
	for {
		ev, err := a.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		switch ev.Type {
		case wire.EventExit:
			exit = ev
		case wire.EventOutput:
			b, _ := ev.Bytes()
			if ev.Stream == wire.StreamStderr {
				errb.Write(b)
			} else {
				out.Write(b)
			}
		default:
			t.Errorf("unexpected %s event", ev.Type)
		}
	}
	wantOut, wantErr := patternText(13, patternOut/2, patternErr/2)
	checkBytes(t, "stdout", out.Bytes(), wantOut)
	checkBytes(t, "stderr", errb.Bytes(), wantErr)
	if exit == nil || exit.Status.State != wire.StateExited {
		t.Errorf("exit event %+v", exit)
	}
	if p.cuts.Load() < 10 {
		t.Errorf("only %d cuts", p.cuts.Load())
	}
}

// countingTransport counts the requests whose path ends with suffix.
type countingTransport struct {
	rt     http.RoundTripper
	suffix string
	n      atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, c.suffix) && r.URL.Query().Has("wait") {
		c.n.Add(1)
	}
	return c.rt.RoundTrip(r)
}

// TestWaitLoopsPastTheDaemonClamp waits for a 21 s command, longer than
// the daemon's 20 s clamp of ?wait=: Wait must ask again and return it
// finished.
func TestWaitLoopsPastTheDaemonClamp(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ct := &countingTransport{rt: http.DefaultTransport}
	c := newClient(t, d.url, Options{HTTPClient: &http.Client{Transport: ct}})
	ctx := testCtx(t, 2*time.Minute)
	st, err := c.Start(ctx, wire.CreateRequest{Argv: []string{"sleep", "21"}})
	if err != nil {
		t.Fatal(err)
	}
	ct.suffix = st.CommandID // set before any wait request: no race
	got, err := c.Wait(ctx, st.CommandID, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != wire.StateExited || ExitCode(got) != 0 {
		t.Errorf("after Wait: state %s exit %d; want exited 0", got.State, ExitCode(got))
	}
	if n := ct.n.Load(); n < 2 {
		t.Errorf("%d wait requests; a 21 s wait needs at least 2", n)
	}
}

// TestWaitTimeoutLeavesItRunning: a short Wait returns the running status
// near its timeout, and never kills.
func TestWaitTimeoutLeavesItRunning(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	c := newClient(t, d.url, Options{})
	ctx := testCtx(t, time.Minute)
	st, err := c.Start(ctx, wire.CreateRequest{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	got, err := c.Wait(ctx, st.CommandID, 1500*time.Millisecond)
	el := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != wire.StateRunning {
		t.Errorf("state %s, want running", got.State)
	}
	if el < 1400*time.Millisecond || el > 15*time.Second {
		t.Errorf("Wait(1.5 s) took %v", el)
	}
	k, err := c.Kill(ctx, st.CommandID)
	if err != nil || k.State != wire.StateCancelled || ExitCode(k) != 128+15 {
		t.Errorf("Kill: %+v, %v; want cancelled, exit 143", k, err)
	}
}

func TestStdinLargeBinaryRoundTrip(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, bigRing)
	c := newClient(t, d.url, Options{})
	ctx := testCtx(t, 2*time.Minute)
	req := helperReq("cat")
	req.Stdin = true
	st, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// 3 MiB: more than the 1 MiB stdin queue and the JSON body limit, with
	// bytes that are not UTF-8 and characters across chunk boundaries.
	text, bin := patternText(5, 3<<20, 64<<10)
	data := append(text, bin...)
	n, err := c.Stdin(ctx, st.CommandID, data, true)
	if err != nil || n != len(data) {
		t.Fatalf("Stdin: %d, %v; want %d", n, err, len(data))
	}
	var out bytes.Buffer
	final, err := c.Follow(ctx, st.CommandID, 0, func(ev *wire.Event) error {
		b, _ := ev.Bytes()
		out.Write(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkBytes(t, "cat output", out.Bytes(), data)
	if final.State != wire.StateExited || !final.StdinClosed {
		t.Errorf("final: %s stdin_closed %v", final.State, final.StdinClosed)
	}
	if _, err := c.Stdin(ctx, st.CommandID, []byte("late"), false); ErrorCode(err) == "" {
		t.Errorf("stdin after exit: %v, want a daemon error", err)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "SANDBOX_RUNTIME_TOKEN_FILE="+tokenFile)
	ctx := testCtx(t, time.Minute)

	anon := newClient(t, d.url, Options{})
	_, err := anon.List(ctx, "")
	var e *Error
	if !errors.As(err, &e) || e.StatusCode != 401 || e.Code != wire.CodeUnauthorized {
		t.Errorf("without token: %v; want 401 unauthorized", err)
	}

	c := newClient(t, d.url, Options{Token: "s3cret"})
	if _, err := c.Get(ctx, "00000000-0000-4000-8000-000000000000"); ErrorCode(err) != wire.CodeNotFound {
		t.Errorf("unknown id: %v; want not_found", err)
	}
	_, err = c.Start(ctx, wire.CreateRequest{Argv: []string{"/no/such/program"}})
	if ErrorCode(err) != wire.CodeSpawnFailed || !strings.Contains(err.Error(), "/no/such/program") {
		t.Errorf("spawn: %v; want spawn_failed naming the program", err)
	}
	res, err := c.Run(ctx, helperReq("exit", "3"), RunOptions{})
	if err != nil || res.ExitCode() != 3 {
		t.Fatalf("Run exit 3: %v, %v", res, err)
	}
	if _, err := c.Signal(ctx, res.Status.CommandID, "SIGINT"); ErrorCode(err) != wire.CodeFinished {
		t.Errorf("signal a finished command: %v; want finished", err)
	}
	if _, err := c.Signal(ctx, res.Status.CommandID, "SIGNOPE"); ErrorCode(err) != wire.CodeInvalidRequest {
		t.Errorf("bad signal: %v; want invalid_request", err)
	}
	// Nothing listens: a transport error naming the URL, after the retries.
	dead := newClient(t, "http://127.0.0.1:1", Options{RetryFor: 200 * time.Millisecond})
	_, err = dead.Info(ctx)
	var te *TransportError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("dead daemon: %v; want a TransportError naming the URL", err)
	}
	for _, bad := range []string{"ftp://x", "http://", "127.0.0.1:8888", "http://h/?q=1"} {
		if _, err := New(bad, Options{}); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
}

func TestSignalAndAttachFrames(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	c := newClient(t, d.url, Options{})
	ctx := testCtx(t, time.Minute)
	st, err := c.Start(ctx, wire.CreateRequest{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := c.Signal(ctx, st.CommandID, "SIGINT"); err != nil || s.CommandID != st.CommandID {
		t.Fatalf("Signal: %v", err)
	}
	got, err := c.Wait(ctx, st.CommandID, 10*time.Second)
	if err != nil || got.State != wire.StateExited || got.Signal == nil || *got.Signal != "SIGINT" || ExitCode(got) != 130 {
		t.Fatalf("after SIGINT: %+v %v; want exited by SIGINT, 130", got, err)
	}

	st, err = c.Start(ctx, wire.CreateRequest{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Attach(ctx, st.CommandID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Stdin([]byte("x"), false); err != nil { // no stdin pipe: an error event
		t.Fatal(err)
	}
	ev, err := a.Next(ctx)
	if err != nil || ev.Type != wire.EventError || ev.Error.Code != wire.CodeStdinNotEnabled {
		t.Fatalf("after a stdin frame: %+v %v; want an error event stdin_not_enabled", ev, err)
	}
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	ev, err = a.Next(ctx)
	if err != nil || ev.Type != wire.EventExit || ev.Status.State != wire.StateCancelled {
		t.Fatalf("after kill: %+v %v; want exit cancelled", ev, err)
	}
	if _, err := a.Next(ctx); err != io.EOF {
		t.Errorf("Next after exit: %v, want io.EOF", err)
	}
}

func TestFiles(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	c := newClient(t, d.url, Options{})
	ctx := testCtx(t, time.Minute)
	name := "dir with space/ü 100%#?.txt"
	data := bytes.Repeat([]byte("data\x00\xff"), 100000)
	if err := c.WriteFile(ctx, name, bytes.NewReader(data), 0o600); err != nil {
		t.Fatal(err)
	}
	onDisk, err := os.ReadFile(filepath.Join(d.base, name))
	if err != nil || !bytes.Equal(onDisk, data) {
		t.Fatalf("on disk: %d bytes, %v; want %d", len(onDisk), err, len(data))
	}
	fi, _ := os.Stat(filepath.Join(d.base, name))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	rc, err := c.ReadFile(ctx, "/"+name)
	if err != nil {
		t.Fatal(err)
	}
	back, _ := io.ReadAll(rc)
	rc.Close()
	checkBytes(t, "ReadFile", back, data)
	l, err := c.ListDir(ctx, "dir with space")
	if err != nil || len(l.Entries) != 1 || l.Entries[0].Name != "ü 100%#?.txt" || l.Entries[0].Size != int64(len(data)) {
		t.Fatalf("ListDir: %+v %v", l, err)
	}
	if _, err := c.ReadFile(ctx, "dir with space"); !errors.Is(err, ErrIsDirectory) {
		t.Errorf("ReadFile of a directory: %v", err)
	}
	if _, err := c.ReadFile(ctx, "missing"); ErrorCode(err) != wire.CodeNotFound {
		t.Errorf("ReadFile of nothing: %v", err)
	}
	if err := c.Remove(ctx, "dir with space", false); ErrorCode(err) != wire.CodeConflict {
		t.Errorf("Remove non-empty: %v; want conflict", err)
	}
	if err := c.Remove(ctx, "dir with space", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.base, "dir with space")); !os.IsNotExist(err) {
		t.Errorf("still there: %v", err)
	}
}

func checkBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	t.Errorf("%s: got %d bytes, want %d; first difference at byte %d: got %q…, want %q…",
		what, len(got), len(want), i, snippet(got, i), snippet(want, i))
}

func snippet(b []byte, i int) []byte {
	return b[i:min(len(b), i+40)]
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestAttachCloseDoesNotRedial checks that a Next ended by Close returns
// net.ErrClosed without dialling the daemon again: each attachment goes
// through a proxy that counts the connections it accepted.
func TestAttachCloseDoesNotRedial(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx := testCtx(t, time.Minute)
	for i := range 5 {
		p := newCutProxy(t, strings.TrimPrefix(d.url, "http://"), 1<<30, uint64(i), slices.Repeat([]cutLimits{{-1, -1}}, 8)...) // no cuts
		c := newClient(t, p.url(), Options{})
		st, err := c.Start(ctx, wire.CreateRequest{Argv: []string{"sh", "-c", "echo ready; exec sleep 300"}})
		if err != nil {
			t.Fatal(err)
		}
		a, err := c.Attach(ctx, st.CommandID, 0)
		if err != nil {
			t.Fatal(err)
		}
		before := p.accepted.Load()
		first := make(chan error, 1)
		ended := make(chan error, 1)
		go func() {
			_, err := a.Next(ctx)
			first <- err
			_, err = a.Next(ctx) // blocks until Close
			ended <- err
		}()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		a.Close()
		if err := <-ended; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Next after Close: %v; want net.ErrClosed", err)
		}
		if n := p.accepted.Load(); n != before {
			t.Fatalf("attachment %d: the proxy accepted %d connections after the attach; want none (Close re-dialled)", i, n-before)
		}
		if _, err := c.Kill(ctx, st.CommandID); err != nil {
			t.Fatal(err)
		}
	}
}

// quietCat starts a quiet `cat` with stdin on a new daemon, and returns a
// client (RetryFor retryFor) that reaches the daemon through a proxy the
// test can take down, and one that reaches it directly.
func quietCat(t *testing.T) (ctx context.Context, p *cutProxy, c, direct *Client, st *wire.Status, retryFor time.Duration) {
	t.Helper()
	d := startDaemon(t)
	ctx = testCtx(t, time.Minute)
	p = newCutProxy(t, strings.TrimPrefix(d.url, "http://"), 1<<30, 1, slices.Repeat([]cutLimits{{-1, -1}}, 16)...)
	retryFor = 300 * time.Millisecond
	c = newClient(t, p.url(), Options{RetryFor: retryFor})
	direct = newClient(t, d.url, Options{})
	req := helperReq("cat")
	req.Stdin = true
	st, err := direct.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, p, c, direct, st, retryFor
}

// TestQuietAttachmentResumesAfterABlip (F15): an attachment that has been
// quiet for longer than RetryFor is still re-dialled when its connection
// breaks: the time without progress counts from the break.
func TestQuietAttachmentResumesAfterABlip(t *testing.T) {
	t.Parallel()
	ctx, p, c, direct, st, retryFor := quietCat(t)
	defer direct.Kill(ctx, st.CommandID)
	a, err := c.Attach(ctx, st.CommandID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	got := make(chan *wire.Event, 1)
	failed := make(chan error, 1)
	go func() {
		ev, err := a.Next(ctx)
		if err != nil {
			failed <- err
			return
		}
		got <- ev
	}()
	// The quiet time is the condition under test, not a synchronisation:
	// Next has waited three times RetryFor when the link breaks.
	time.Sleep(3 * retryFor)
	p.cutAll()
	if _, err := direct.Stdin(ctx, st.CommandID, []byte("after the blip\n"), false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		t.Fatalf("Next after a blip on a quiet attachment: %v; want the output", err)
	case ev := <-got:
		if b, _ := ev.Bytes(); string(b) != "after the blip\n" {
			t.Fatalf("Next: %+v; want the output after the blip", ev)
		}
	}
}

// headerLen returns the length of the headers of the daemon's answer to
// GET path, read off a raw request.
func headerLen(t *testing.T, daemonURL, path string) int {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(daemonURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path)
	b, _ := io.ReadAll(conn)
	i := bytes.Index(b, []byte("\r\n\r\n"))
	if i < 0 || len(b) < i+20 {
		t.Fatalf("answer to %s: %q", path, b)
	}
	return i + 4
}

// TestIdempotentReadsRetryACutBody (F06): a Get or List whose answer breaks
// off after its headers is asked again; so is Attach's first dial.
func TestIdempotentReadsRetryACutBody(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx := testCtx(t, time.Minute)
	direct := newClient(t, d.url, Options{})
	st, err := direct.Start(ctx, wire.CreateRequest{Argv: []string{"sh", "-c", "echo ready; exec sleep 300"}})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Kill(ctx, st.CommandID)
	target := strings.TrimPrefix(d.url, "http://")
	for _, tc := range []struct {
		what string
		path string
		call func(c *Client) error
	}{
		{"Get", "/v1/commands/" + st.CommandID, func(c *Client) error { _, err := c.Get(ctx, st.CommandID); return err }},
		{"List", "/v1/commands", func(c *Client) error { _, err := c.List(ctx, ""); return err }},
	} {
		p := newCutProxy(t, target, 1<<30, 1, cutLimits{-1, headerLen(t, d.url, tc.path) + 5}, cutLimits{-1, -1}, cutLimits{-1, -1})
		if err := tc.call(newClient(t, p.url(), Options{})); err != nil {
			t.Errorf("%s with its answer cut after the headers: %v", tc.what, err)
		}
		if p.cuts.Load() != 1 {
			t.Errorf("%s: the proxy cut %d answers; want 1", tc.what, p.cuts.Load())
		}
	}
	p := newCutProxy(t, target, 1<<30, 1, cutLimits{0, -1}, cutLimits{-1, -1})
	c := newClient(t, p.url(), Options{})
	c.reached.Store(true) // as after any earlier request
	a, err := c.Attach(ctx, st.CommandID, 0)
	if err != nil {
		t.Fatalf("Attach with its first dial cut: %v", err)
	}
	a.Close()
}

// TestCreateNaNTimeoutIsAnError (F01): a timeout JSON cannot carry is an
// error of Start and Run, not a panic; nothing is sent.
func TestCreateNaNTimeoutIsAnError(t *testing.T) {
	c := newClient(t, "http://127.0.0.1:1", Options{RetryFor: -1})
	ctx := testCtx(t, 10*time.Second)
	if _, err := c.Start(ctx, wire.CreateRequest{Argv: []string{"true"}, Timeout: math.NaN()}); err == nil || !strings.Contains(err.Error(), "cannot be encoded") {
		t.Errorf("Start with a NaN timeout: %v", err)
	}
	if _, err := c.Run(ctx, wire.CreateRequest{Argv: []string{"true"}, Timeout: math.Inf(1)}, RunOptions{}); err == nil || !strings.Contains(err.Error(), "cannot be encoded") {
		t.Errorf("Run with an infinite timeout: %v", err)
	}
}

// TestQuietFollowResumesAfterABlip (F15): like the attachment, a followed
// stream quiet for longer than RetryFor is re-opened when it breaks.
func TestQuietFollowResumesAfterABlip(t *testing.T) {
	t.Parallel()
	ctx, p, c, direct, st, retryFor := quietCat(t)
	defer direct.Kill(ctx, st.CommandID)
	var got bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := c.Follow(ctx, st.CommandID, 0, func(ev *wire.Event) error { b, _ := ev.Bytes(); got.Write(b); return nil })
		done <- err
	}()
	// The quiet time is the condition under test: the stream has been
	// silent three times RetryFor when the link breaks.
	time.Sleep(3 * retryFor)
	p.cutAll()
	if _, err := direct.Stdin(ctx, st.CommandID, []byte("after the blip\n"), true); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || got.String() != "after the blip\n" {
		t.Fatalf("Follow: %v, got %q; want the output after the blip and the end", err, got.String())
	}
}

// TestUntrustedCertificateIsNotRetried: a request that can never succeed
// (a certificate the client does not trust) fails at once. Before, it was
// retried for the whole RetryFor like a daemon that is restarting.
func TestUntrustedCertificateIsNotRetried(t *testing.T) {
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer ts.Close()
	c, err := New(ts.URL, Options{RetryFor: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Info(context.Background())
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("Info against an untrusted certificate: %v after %v; want an error at once", err, time.Since(start))
	}
	if err := c.Health(context.Background()); err == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("Health against an untrusted certificate: %v after %v; want an error at once", err, time.Since(start))
	}
}

// TestUnsendableTokenRefused (D6): New refuses a token no header can carry;
// the message never shows it.
func TestUnsendableTokenRefused(t *testing.T) {
	for _, tok := range []string{"s3c\nret", "s3c\x00ret", "\uFEFFs3cret", "s3c\x7fret"} {
		_, err := New("http://127.0.0.1:1", Options{Token: tok})
		if err == nil || strings.Contains(err.Error(), "s3c") {
			t.Errorf("New with token %q: %v; want an error that does not show it", tok, err)
		}
	}
}

// TestRunHoldLosesNothing: through a daemon with a 64 KiB ring, `yes`
// writing 8 MiB outruns a Run whose Stdout callback is slow; with
// RunOptions.Hold every byte arrives, without it (the control) most of the
// output is a gap.
func TestRunHoldLosesNothing(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "SANDBOX_OUTPUT_LIMIT_BYTES=65536")
	c := newClient(t, d.url, Options{})
	const n = 8 << 20
	req := wire.CreateRequest{Argv: []string{"sh", "-c", "yes 0123456789abcdef | head -c " + itoa(n)}}
	want := bytes.Repeat([]byte("0123456789abcdef\n"), n/17+1)[:n]
	slow := func([]byte) { runtime.Gosched() } // a client slower than yes
	res, err := c.Run(testCtx(t, 2*time.Minute), req, RunOptions{Hold: time.Second, Stdout: slow})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkBytes(t, "Result.Stdout with a hold", res.Stdout, want)
	if res.GapBytes != 0 || res.Status.State != wire.StateExited {
		t.Fatalf("with a hold: gap %d, state %s", res.GapBytes, res.Status.State)
	}
	res, err = c.Run(testCtx(t, 2*time.Minute), req, RunOptions{Stdout: slow})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.GapBytes == 0 {
		t.Fatalf("without a hold the client lost nothing: the test cannot tell a hold from none")
	}
	t.Logf("without a hold: %d of %d bytes were a gap", res.GapBytes, n)
}

// TestAttachHeldLosesNothing: AttachHeld attaches with a hold, so a slow
// attachment gets all 8 MiB of `yes` through a 64 KiB ring; Attach without
// one (the control) sees gaps. The command waits on stdin until the
// attachment is open.
func TestAttachHeldLosesNothing(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "SANDBOX_OUTPUT_LIMIT_BYTES=65536")
	c := newClient(t, d.url, Options{})
	ctx := testCtx(t, 2*time.Minute)
	const n = 8 << 20
	follow := func(hold time.Duration) (out []byte, gaps int) {
		st, err := c.Start(ctx, wire.CreateRequest{Argv: []string{"sh", "-c", "read x; yes | head -c " + itoa(n)}, Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		a, err := c.AttachHeld(ctx, st.CommandID, 0, hold)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		if err := a.Stdin([]byte("go\n"), false); err != nil {
			t.Fatal(err)
		}
		for {
			ev, err := a.Next(ctx)
			if err == io.EOF {
				return out, gaps
			}
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			switch ev.Type {
			case wire.EventOutput:
				b, _ := ev.Bytes()
				out = append(out, b...)
				runtime.Gosched() // a client slower than yes
			case wire.EventGap:
				gaps++
			}
		}
	}
	out, gaps := follow(time.Second)
	checkBytes(t, "held attachment", out, bytes.Repeat([]byte("y\n"), n/2))
	if gaps != 0 {
		t.Fatalf("held attachment: %d gaps", gaps)
	}
	if _, gaps := follow(0); gaps == 0 {
		t.Fatal("without a hold the attachment lost nothing: the test cannot tell a hold from none")
	}
}
