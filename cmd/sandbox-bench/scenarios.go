package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// status is the status object (the protocol's one definition).
type status = wire.Status

// errNotAvailable marks a route that answers 404 because it is not
// implemented yet.
var errNotAvailable = errors.New("not available")

// httpError is a response with an unexpected status code.
type httpError struct {
	code int
	body string
}

func (e *httpError) Error() string { return fmt.Sprintf("HTTP %d: %.300s", e.code, e.body) }

func (b *bench) do(ctx context.Context, method, u string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return b.client.Do(req)
}

// doJSON sends a request, expects one of the codes, and decodes the answer
// into out (when non-nil).
func (b *bench) doJSON(ctx context.Context, method, u string, body, out any, codes ...int) error {
	resp, err := b.do(ctx, method, u, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if !slices.Contains(codes, resp.StatusCode) {
		return &httpError{resp.StatusCode, string(data)}
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// holdQuery is "&hold=<seconds>" of -hold, or "" without one.
func (b *bench) holdQuery() string {
	if b.o.hold <= 0 {
		return ""
	}
	return "&hold=" + strconv.FormatFloat(b.o.hold.Seconds(), 'f', -1, 64)
}

// holdLabel names -hold in a row's measure, or "" without one.
func (b *bench) holdLabel() string {
	if b.o.hold <= 0 {
		return ""
	}
	return fmt.Sprintf(", hold %v", b.o.hold)
}

// createStream posts a command with ?stream=true and returns the open event
// stream. 429 is retried (briefly) since a just-finished command may not have
// left the running count yet.
func (b *bench) createStream(ctx context.Context, d *daemon, body any) (*http.Response, error) {
	for {
		resp, err := b.do(ctx, "POST", d.url("/v1/commands?stream=true"+b.holdQuery()), body)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusCreated {
			return resp, nil
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			return nil, &httpError{resp.StatusCode, string(data)}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// follow reads an event stream to its exit event, re-opening
// GET /v1/commands/{id}/output at the last cursor whenever a window ends.
func (b *bench) follow(ctx context.Context, d *daemon, src lineSource, st *followStats, keepData bool, id string) (status, error) {
	for {
		err := consume(src, st, keepData)
		src.Close()
		if err == nil {
			var s status
			if err := json.Unmarshal(st.Exit, &s); err != nil {
				return s, fmt.Errorf("exit status: %w", err)
			}
			return s, nil
		}
		if !errors.Is(err, errWindowEnd) {
			return status{}, err
		}
		if id == "" {
			var s status
			if json.Unmarshal(st.Started, &s) != nil || s.CommandID == "" {
				return status{}, errors.New("stream window ended before the command id was known")
			}
			id = s.CommandID
		}
		resp, err := b.do(ctx, "GET", d.url(fmt.Sprintf("/v1/commands/%s/output?cursor=%d&max_wait=60", id, st.Next)), nil)
		if err != nil {
			return status{}, err
		}
		if resp.StatusCode != http.StatusOK {
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return status{}, &httpError{resp.StatusCode, string(data)}
		}
		src = newNDJSONSource(resp.Body)
	}
}

// --- echo hi, three ways -------------------------------------------------

var echoBody = map[string]any{"argv": []string{"echo", "hi"}}

// rawEcho runs `echo hi` with os/exec (fork/exec + output pipe + wait).
func rawEcho(ctx context.Context) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "echo", "hi")
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return err
	}
	if out.String() != "hi\n" {
		return fmt.Errorf("os/exec echo hi printed %q", out.String())
	}
	return nil
}

// streamEcho runs `echo hi` via POST /v1/commands?stream=true and reads the
// stream to its exit event.
func (b *bench) streamEcho(ctx context.Context, d *daemon) error {
	resp, err := b.createStream(ctx, d, echoBody)
	if err != nil {
		return err
	}
	var st followStats
	s, err := b.follow(ctx, d, newNDJSONSource(resp.Body), &st, true, "")
	if err != nil {
		return err
	}
	if string(st.Stdout) != "hi\n" || s.ExitCode == nil || *s.ExitCode != 0 {
		return fmt.Errorf("stream echo hi: stdout %q state %s exit %v", st.Stdout, s.State, s.ExitCode)
	}
	return nil
}

// legacyEcho runs `echo hi` via POST /execute.
func (b *bench) legacyEcho(ctx context.Context, d *daemon) error {
	resp, err := b.do(ctx, "POST", d.url("/execute"), map[string]string{"command": "echo hi"})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusNotFound {
		return errNotAvailable
	}
	if resp.StatusCode != http.StatusOK {
		return &httpError{resp.StatusCode, string(data)}
	}
	var r struct {
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
		ExitCode int    `json:"exit_code"`
	}
	if err := json.Unmarshal(data, &r); err != nil { // leading keep-alive spaces are fine
		return fmt.Errorf("/execute answer %q: %w", data, err)
	}
	if r.Stdout != "hi\n" || r.ExitCode != 0 {
		return fmt.Errorf("/execute echo hi: %+v", r)
	}
	return nil
}

// --- latency (baseline.go has the scenarios) ---

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
func ratio(r float64) string    { return fmt.Sprintf("%.2f×", r) }
func mbps(bytes int64, d time.Duration) float64 {
	return float64(bytes) / d.Seconds() / 1e6
}
func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// --- throughput ----------------------------------------------------------

// concurrently runs f runs times in all from clients goroutines and returns
// the wall time.
func concurrently(ctx context.Context, clients, runs int, f func(context.Context) error) (time.Duration, error) {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	t0 := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(runs) {
				if err := f(ctx); err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(t0), firstErr
}

// --- streaming -------------------------------------------------------------

func (b *bench) streamShell(n int64) string {
	if strings.Contains(b.o.streamCmd, "%d") {
		return fmt.Sprintf(b.o.streamCmd, n)
	}
	return b.o.streamCmd
}

// rawStream runs sh -c cmdline under os/exec and reads its stdout with a
// 64 KiB buffer (the daemon's pump size) until EOF; the raw pipe rate.
func rawStream(ctx context.Context, cmdline string) (int64, time.Duration, error) {
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, "sh", "-c", cmdline)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	buf := make([]byte, 64<<10)
	var total int64
	for {
		n, err := out.Read(buf)
		total += int64(n)
		if err != nil {
			break
		}
	}
	err = cmd.Wait()
	return total, time.Since(t0), err
}

// streamResult is one daemon-side stream run.
type streamResult struct {
	elapsed time.Duration
	st      followStats
	status  status
	dCPU    time.Duration // the daemon's CPU (with the producer), -1 if unknown
	cCPU    time.Duration // this client's CPU
}

func (r streamResult) rate() float64 { return mbps(r.st.Bytes, r.elapsed) }

// checkDelivery verifies a follower's totals against the final status: every
// byte produced was either received or reported lost by a gap.
func checkDelivery(st followStats, s status, want int64) error {
	if s.StdoutBytes != want {
		return fmt.Errorf("stdout_bytes %d; want %d (state %s)", s.StdoutBytes, want, s.State)
	}
	if st.Next != s.NextCursor || st.Bytes+st.Dropped != s.StdoutBytes+s.StderrBytes {
		return fmt.Errorf("follower received %d + %d lost to gaps, ended at cursor %d; the command produced %d (next_cursor %d)",
			st.Bytes, st.Dropped, st.Next, s.StdoutBytes+s.StderrBytes, s.NextCursor)
	}
	return nil
}

// ndjsonStream runs cmdline via POST ?stream=true and follows it live.
func (b *bench) ndjsonStream(ctx context.Context, d *daemon, cmdline string, n int64) (streamResult, error) {
	t0 := time.Now()
	resp, err := b.createStream(ctx, d, map[string]any{"argv": []string{"sh", "-c", cmdline}, "timeout": 300})
	if err != nil {
		return streamResult{}, err
	}
	var r streamResult
	r.status, err = b.follow(ctx, d, newNDJSONSource(resp.Body), &r.st, false, "")
	r.elapsed = time.Since(t0)
	if err != nil {
		return r, err
	}
	return r, checkDelivery(r.st, r.status, n)
}

// createGated creates sh -c "read x && cmdline" with stdin, so that followers
// can attach before any output exists; release starts the output.
func (b *bench) createGated(ctx context.Context, d *daemon, cmdline string) (string, error) {
	var s status
	err := b.doJSON(ctx, "POST", d.url("/v1/commands"), map[string]any{
		"argv": []string{"sh", "-c", "read x && " + cmdline}, "stdin": true, "timeout": 300,
	}, &s, http.StatusCreated)
	return s.CommandID, err
}

func (b *bench) release(ctx context.Context, d *daemon, id string) error {
	return b.doJSON(ctx, "POST", d.url("/v1/commands/"+id+"/stdin"), map[string]any{"data": "go\n", "eof": true}, nil, http.StatusAccepted)
}

func (b *bench) kill(d *daemon, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = b.doJSON(ctx, "POST", d.url("/v1/commands/"+id+"/kill"), nil, nil, http.StatusOK)
}

// wsSource reads event objects from WebSocket text frames.
type wsSource struct {
	c    *websocket.Conn
	buf  []byte
	stop func() bool // ends the close-on-deadline hook
}

func (s *wsSource) next() ([]byte, error) {
	for {
		typ, r, err := s.c.NextReader()
		if err != nil {
			return nil, err
		}
		if typ != websocket.TextMessage {
			continue
		}
		s.buf = s.buf[:0]
		for {
			if len(s.buf) == cap(s.buf) {
				s.buf = slices.Grow(s.buf, max(64<<10, cap(s.buf)))
			}
			n, err := r.Read(s.buf[len(s.buf):cap(s.buf)])
			s.buf = s.buf[:len(s.buf)+n]
			if err == io.EOF {
				return s.buf, nil
			}
			if err != nil {
				return nil, err
			}
		}
	}
}

func (s *wsSource) Close() error {
	s.stop()
	_ = s.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	return s.c.Close()
}

// dialAttach opens /v1/commands/{id}/attach at cursor.
func (b *bench) dialAttach(ctx context.Context, d *daemon, id string, cursor int64) (*wsSource, error) {
	dialer := websocket.Dialer{
		NetDialContext:   loopbackDialer,
		HandshakeTimeout: 10 * time.Second,
		ReadBufferSize:   256 << 10,
		WriteBufferSize:  4 << 10,
	}
	u := url.URL{Scheme: "ws", Host: d.addr, Path: "/v1/commands/" + id + "/attach", RawQuery: "cursor=" + strconv.FormatInt(cursor, 10) + b.holdQuery()}
	c, resp, err := dialer.DialContext(ctx, u.String(), nil)
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			return nil, errNotAvailable
		}
		if resp != nil {
			return nil, fmt.Errorf("attach: HTTP %d: %w", resp.StatusCode, err)
		}
		return nil, err
	}
	// Reads do not take a context: close the connection at the deadline.
	return &wsSource{c: c, stop: context.AfterFunc(ctx, func() { c.Close() })}, nil
}

// wsStream runs cmdline gated, attaches over WebSocket at cursor 0, releases
// it and follows it to the exit frame.
func (b *bench) wsStream(ctx context.Context, d *daemon, cmdline string, n int64) (streamResult, error) {
	id, err := b.createGated(ctx, d, cmdline)
	if err != nil {
		return streamResult{}, err
	}
	src, err := b.dialAttach(ctx, d, id, 0)
	if err != nil {
		b.kill(d, id)
		return streamResult{}, err
	}
	var r streamResult
	t0 := time.Now()
	if err := b.release(ctx, d, id); err != nil {
		src.Close()
		b.kill(d, id)
		return r, err
	}
	for {
		err = consume(src, &r.st, false)
		src.Close()
		if !errors.Is(err, errWindowEnd) {
			break
		}
		if src, err = b.dialAttach(ctx, d, id, r.st.Next); err != nil {
			break
		}
	}
	r.elapsed = time.Since(t0)
	if err != nil {
		b.kill(d, id)
		return r, err
	}
	if err := json.Unmarshal(r.st.Exit, &r.status); err != nil {
		return r, err
	}
	return r, checkDelivery(r.st, r.status, n)
}

func (b *bench) stream(ctx context.Context, d *daemon) error {
	return b.streamOf(ctx, d, "NDJSON", b.ndjsonStream)
}

func (b *bench) ws(ctx context.Context, d *daemon) error {
	// Probe first: the route may not be implemented yet.
	id, err := b.createGated(ctx, d, "true")
	if err != nil {
		return err
	}
	src, err := b.dialAttach(ctx, d, id, 0)
	if errors.Is(err, errNotAvailable) {
		b.kill(d, id)
		fmt.Fprintln(b.log, "ws: attach not available")
		b.add(row{measure: "stream to 1 WebSocket follower", value: "not available", result: "n/a", goal: "≥ 1 GB/s or ≥ 0.5× pipe"})
		return nil
	}
	if err != nil {
		b.kill(d, id)
		return err
	}
	src.Close()
	b.kill(d, id)
	return b.streamOf(ctx, d, "WebSocket", b.wsStream)
}

// streamOf alternates raw pipe reads and daemon streams of the same command
// for the configured rounds and reports the medians.
func (b *bench) streamOf(ctx context.Context, d *daemon, label string, f func(context.Context, *daemon, string, int64) (streamResult, error)) error {
	n := b.o.streamBytes
	cmdline := b.streamShell(n)
	var raws, rates []float64
	var gaps, dropped, bytesIn int64
	var rawCPU, dCPU, cCPU time.Duration
	dKnown := true
	for range b.o.streamRounds {
		m := startCPU(d.pid)
		got, t, err := rawStream(ctx, cmdline)
		self, _ := m.stop()
		rawCPU += self
		if err != nil {
			return fmt.Errorf("raw %q: %w", cmdline, err)
		}
		if got != n {
			return fmt.Errorf("raw %q printed %d bytes; want %d", cmdline, got, n)
		}
		raws = append(raws, mbps(got, t))
		m = startCPU(d.pid)
		r, err := f(ctx, d, cmdline, n)
		if err != nil {
			return err
		}
		self, dc := m.stop()
		cCPU += self
		dCPU += dc
		dKnown = dKnown && dc >= 0
		rates = append(rates, r.rate())
		gaps += r.st.Gaps
		dropped += r.st.Dropped
		bytesIn += r.st.Bytes
	}
	slices.Sort(raws)
	slices.Sort(rates)
	raw, rate := raws[len(raws)/2], rates[len(rates)/2]
	ok := rate >= 1000 || rate >= raw/2 // issue 16: 1 GB/s, or half the raw pipe
	b.add(row{
		measure:  fmt.Sprintf("stream %s to 1 %s follower%s, MB/s received", size(n), label, b.holdLabel()),
		value:    fmt.Sprintf("%.0f MB/s", rate),
		baseline: fmt.Sprintf("%.0f MB/s pipe", raw),
		ratio:    ratio(rate / raw),
		goal:     "≥ 1 GB/s or ≥ 0.5× pipe",
		result:   verdict(ok),
	})
	total := n * int64(b.o.streamRounds)
	b.add(row{
		measure:  fmt.Sprintf("stream %s %s%s: bytes lost to gaps (1 MiB ring)", size(n), label, b.holdLabel()),
		value:    fmt.Sprintf("%.1f%% (%d gaps)", 100*float64(dropped)/float64(total), gaps),
		baseline: fmt.Sprintf("%s of %s received", size(bytesIn), size(total)),
		result:   "info",
	})
	// CPU per byte: the daemon's includes the producer (its child), as the
	// raw baseline's includes it (ours).
	perB := func(d time.Duration, n int64) string {
		return fmt.Sprintf("%.2f ns/B", float64(d.Nanoseconds())/float64(n))
	}
	r := row{measure: fmt.Sprintf("stream %s %s: CPU per byte produced", size(n), label), baseline: perB(rawCPU, total) + " pipe", result: "info"}
	if dKnown {
		r.value = fmt.Sprintf("%s (daemon %s + client %s)", perB(dCPU+cCPU, total), perB(dCPU, total), perB(cCPU, total))
		r.ratio = ratio(float64(dCPU+cCPU) / float64(rawCPU))
	} else {
		r.value = "client " + perB(cCPU, total)
	}
	b.add(r)
	return nil
}

func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// --- fan-out ---------------------------------------------------------------

func (b *bench) fanoutScenario(ctx context.Context, d *daemon) error {
	n := b.o.fanoutBytes
	cmdline := b.streamShell(n)
	got, rawT, err := rawStream(ctx, cmdline)
	if err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("raw %q printed %d bytes; want %d", cmdline, got, n)
	}
	id, err := b.createGated(ctx, d, cmdline)
	if err != nil {
		return err
	}
	defer b.kill(d, id) // a no-op once it finished
	F := b.o.fanout
	srcs := make([]lineSource, F)
	for i := range F {
		resp, err := b.do(ctx, "GET", d.url(fmt.Sprintf("/v1/commands/%s/output?cursor=0&follow=true&max_wait=60", id)), nil)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return &httpError{resp.StatusCode, string(data)}
		}
		srcs[i] = newNDJSONSource(resp.Body)
	}
	stats := make([]followStats, F)
	errs := make([]error, F)
	var wg sync.WaitGroup
	t0 := time.Now()
	if err := b.release(ctx, d, id); err != nil {
		for _, s := range srcs {
			s.Close()
		}
		return err
	}
	for i := range F {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := b.follow(ctx, d, srcs[i], &stats[i], false, id)
			if err == nil {
				err = checkDelivery(stats[i], s, n)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var total, gaps, complete int64
	for _, s := range stats {
		total += s.Bytes
		gaps += s.Gaps
		if s.Bytes == n && s.Gaps == 0 {
			complete++
		}
	}
	agg, raw := mbps(total, elapsed), mbps(n, rawT)
	b.add(row{
		measure:  fmt.Sprintf("fan-out: %d NDJSON followers × %s, aggregate MB/s", F, size(n)),
		value:    fmt.Sprintf("%.0f MB/s", agg),
		baseline: fmt.Sprintf("%.0f MB/s pipe (1 reader)", raw),
		ratio:    ratio(agg / raw),
		result:   "info",
	})
	b.add(row{
		measure:  fmt.Sprintf("fan-out: followers that received every byte (ring %s)", size(b.o.fanoutRing)),
		value:    fmt.Sprintf("%d of %d", complete, F),
		baseline: fmt.Sprintf("%d gaps", gaps),
		goal:     "all",
		result:   verdict(complete == int64(F)),
	})
	return nil
}

// --- memory ----------------------------------------------------------------

// warmUp runs the paths an idle figure should have seen once: a few
// streamed commands and the read-only routes.
func (b *bench) warmUp(ctx context.Context, d *daemon) error {
	for range 5 {
		if err := b.streamEcho(ctx, d); err != nil {
			return err
		}
	}
	for _, p := range []string{"/v1/info", "/v1/health", "/v1/commands"} {
		if err := b.doJSON(ctx, "GET", d.url(p), nil, nil, http.StatusOK); err != nil {
			return fmt.Errorf("GET %s: %w", p, err)
		}
	}
	return nil
}

// memory measures the daemon's RSS idle and under load.
//
// long: one measurement, its samples taken in order; the tool is not
// production code of the daemon.
func (b *bench) memory(ctx context.Context, d *daemon) error {
	if d.pid == 0 {
		b.note("memory: skipped: the daemon's PID is unknown (give -pid with -addr)")
		return nil
	}
	// Idle: after start and a few requests.
	if err := b.warmUp(ctx, d); err != nil {
		return err
	}
	if err := sleep(ctx, 500*time.Millisecond); err != nil {
		return err
	}
	idle, hwm, err := procStatus(d.pid)
	if err != nil {
		return err
	}
	b.mem = append(b.mem, memRow{"idle VmRSS (after start + 8 requests)", kib(idle)}, memRow{"idle VmHWM", kib(hwm)})
	b.add(row{measure: "daemon idle RSS", value: kib(idle), baseline: "—", goal: "≤ 12 MiB", result: verdict(idle <= 12<<10)})

	// Flood: `yes` at full speed with no reader.
	secs := b.o.floodDuration.Seconds()
	var s status
	smp := sampleRSS(d.pid, 50*time.Millisecond)
	t0 := time.Now()
	err = b.doJSON(ctx, "POST", d.url("/v1/commands"), map[string]any{"argv": []string{"yes"}, "timeout": secs}, &s, http.StatusCreated)
	if err == nil {
		s, err = b.waitFinished(ctx, d, s.CommandID)
	}
	peak, samples := smp.Stop()
	elapsed := time.Since(t0)
	if err != nil {
		return err
	}
	if s.State != "timed_out" || !s.OutputTruncated || s.StdoutBytes <= 1<<20 {
		return fmt.Errorf("flood: state %s, %d bytes, truncated %v; want timed_out, > 1 MiB, truncated", s.State, s.StdoutBytes, s.OutputTruncated)
	}
	_, hwm2, _ := procStatus(d.pid)
	b.mem = append(b.mem,
		memRow{fmt.Sprintf("peak VmRSS during %.0f s of `yes` with no reader (%d samples)", secs, samples), kib(peak)},
		memRow{"VmHWM after the flood", kib(hwm2)},
		memRow{"bytes pumped by the flood", fmt.Sprintf("%s (%.0f MB/s)", size(s.StdoutBytes), mbps(s.StdoutBytes, elapsed))})
	b.add(row{
		measure:  fmt.Sprintf("daemon peak RSS, %.0f s of `yes`, no reader", secs),
		value:    kib(peak),
		baseline: "idle " + kib(idle),
		ratio:    "+" + kib(peak-idle),
		goal:     "≤ idle + 8 MiB",
		result:   verdict(peak-idle <= 8<<10),
	})

	// Retained: every handle holding a full ring.
	R, per := b.o.retained, b.o.retainedBytes
	cmdline := b.streamShell(int64(per))
	smp = sampleRSS(d.pid, 50*time.Millisecond)
	sem := make(chan struct{}, 16)
	errs := make([]error, R)
	var wg sync.WaitGroup
	for i := range R {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var s status
			for {
				err := b.doJSON(ctx, "POST", d.url("/v1/commands"), map[string]any{"argv": []string{"sh", "-c", cmdline}, "timeout": 60}, &s, http.StatusCreated)
				var he *httpError
				if errors.As(err, &he) && he.code == http.StatusTooManyRequests {
					if errs[i] = sleep(ctx, 5*time.Millisecond); errs[i] != nil {
						return
					}
					continue
				}
				if err != nil {
					errs[i] = err
					return
				}
				break
			}
			s, err := b.waitFinished(ctx, d, s.CommandID)
			if err == nil && (s.StdoutBytes != int64(per) || s.NextCursor-s.RetainedFrom != min(int64(per), 1<<20)) {
				err = fmt.Errorf("retained command: %d bytes, window [%d, %d); want %d bytes and a full 1 MiB window", s.StdoutBytes, s.RetainedFrom, s.NextCursor, per)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		smp.Stop()
		return err
	}
	var list wire.CommandList
	if err := b.doJSON(ctx, "GET", d.url("/v1/commands"), nil, &list, http.StatusOK); err != nil {
		smp.Stop()
		return err
	}
	full := 0
	var retainedBytes int64
	for _, c := range list.Commands {
		retainedBytes += c.NextCursor - c.RetainedFrom
		if c.NextCursor-c.RetainedFrom >= 1<<20 {
			full++
		}
	}
	if err := sleep(ctx, time.Second); err != nil {
		smp.Stop()
		return err
	}
	peakR, _ := smp.Stop()
	steady, _, err := procStatus(d.pid)
	if err != nil {
		return err
	}
	b.mem = append(b.mem,
		memRow{fmt.Sprintf("VmRSS with %d retained handles, %d with a full 1 MiB ring (%s retained), 1 s after", len(list.Commands), full, size(retainedBytes)), kib(steady)},
		memRow{"peak VmRSS while they ran (16 at a time)", kib(peakR)})
	b.add(row{
		measure:  fmt.Sprintf("daemon RSS, %d retained full 1 MiB rings", full),
		value:    kib(steady),
		baseline: "idle " + kib(idle),
		ratio:    "+" + kib(steady-idle),
		goal:     "≤ idle + 80 MiB",
		result:   verdict(steady-idle <= 80<<10 && full >= R),
	})
	b.add(row{
		measure:  "daemon peak RSS while filling them",
		value:    kib(peakR),
		baseline: "idle " + kib(idle),
		ratio:    "+" + kib(peakR-idle),
		result:   "info",
	})
	return nil
}

// waitFinished polls GET /v1/commands/{id}?wait=20 until the command is no
// longer running.
func (b *bench) waitFinished(ctx context.Context, d *daemon, id string) (status, error) {
	for {
		var s status
		if err := b.doJSON(ctx, "GET", d.url("/v1/commands/"+id+"?wait=20"), nil, &s, http.StatusOK); err != nil {
			return s, err
		}
		if s.State != "running" {
			return s, nil
		}
	}
}

func kib(k int64) string { return fmt.Sprintf("%.1f MiB", float64(k)/1024) }

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
