//go:build reliability && linux

package reliability

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/internal/daemontest"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// binPath is the daemon built once by TestMain.
var binPath string

// raceDaemon is set by RELIABILITY_RACE=1, or when the suite itself runs
// under the race detector: the daemon is built with -race, which
// multiplies its memory and slows it, so RSS and throughput bounds are
// logged but not asserted.
var raceDaemon = os.Getenv("RELIABILITY_RACE") == "1" || daemontest.RaceEnabled

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "sandbox-runtime-reliability-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "reliability:", err)
		os.Exit(2)
	}
	binPath, err = daemontest.Build(context.Background(), daemontest.BuildOptions{Dir: dir, Version: "reliability", Race: raceDaemon})
	if err != nil {
		fmt.Fprintln(os.Stderr, "reliability: building the daemon:", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ---------------------------------------------------------------- figures

var figureMu sync.Mutex

// figure logs one measured number with the "FIGURE:" prefix the lead
// collects, and appends it to $RELIABILITY_FIGURES when set.
func figure(t testing.TB, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Logf("FIGURE: %s", line)
	if path := os.Getenv("RELIABILITY_FIGURES"); path != "" {
		figureMu.Lock()
		defer figureMu.Unlock()
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintf(f, "%s: %s\n", t.Name(), line)
			f.Close()
		}
	}
}

// scale picks the full or the -short figure.
func scale(full, short int) int {
	if testing.Short() {
		return short
	}
	return full
}

// newRand returns a seeded generator; the seed is logged so a failure can be
// replayed with RELIABILITY_SEED.
func newRand(t testing.TB) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("RELIABILITY_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("RELIABILITY_SEED: %v", err)
		}
		seed = n
	}
	t.Logf("seed %d (replay with RELIABILITY_SEED=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// ---------------------------------------------------------------- polling

// poll calls cond every interval until it reports true or timeout passes,
// and returns the last result and message. It is the only waiting primitive
// of the suite: bounded, and driven by a ticker rather than sleeps.
func poll(timeout, interval time.Duration, cond func() (bool, string)) (bool, string) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		ok, msg := cond()
		if ok {
			return true, msg
		}
		select {
		case <-deadline.C:
			ok, msg = cond()
			return ok, msg
		case <-tick.C:
		}
	}
}

// ---------------------------------------------------------------- the daemon

// daemon is one sandbox-runtime process started by a test, through the
// shared launcher (internal/daemontest).
type daemon struct {
	t      testing.TB
	d      *daemontest.Daemon
	pid    int    // host pid of the daemon itself (under unshare: unshare's child)
	addr   string // 127.0.0.1:port
	url    string // http://addr
	base   string // SANDBOX_BASE_DIR
	logs   *logWatch
	client *http.Client
}

type daemonConfig struct {
	env   map[string]string // SANDBOX_* settings; SANDBOX_RUNTIME_ADDR and SANDBOX_BASE_DIR are set unless given
	pidNS bool              // run under `unshare --pid --fork --mount-proc` (PID 1 of a new namespace)
	// pidMax, with pidNS, sets the namespace's pid_max first (Linux 6.14+).
	pidMax int
	// prefix runs the daemon under a command that execs it in place (e.g.
	// prlimit --nofile=N:N, setpriv), so that its pid stays the daemon's.
	prefix []string
}

// startDaemon starts the daemon on 127.0.0.1:0 (the caller's SANDBOX_*
// variables stripped, log level info) and waits for its "listening" log
// line. The daemon is stopped (SIGTERM, then SIGKILL after 30 s) when the
// test ends, if the test did not stop it.
func startDaemon(t testing.TB, cfg daemonConfig) *daemon {
	t.Helper()
	base := cfg.env["SANDBOX_BASE_DIR"]
	if base == "" {
		base = t.TempDir()
	}
	var env []string
	for k, v := range cfg.env {
		if k != "SANDBOX_BASE_DIR" {
			env = append(env, k+"="+v)
		}
	}
	slices.Sort(env)
	var prefix []string
	if cfg.pidNS && cfg.pidMax > 0 {
		prefix = []string{"unshare", "--pid", "--fork", "--mount-proc", "sh", "-c",
			fmt.Sprintf(`echo %d > /proc/sys/kernel/pid_max && exec "$0"`, cfg.pidMax)}
	} else if cfg.pidNS {
		prefix = []string{"unshare", "--pid", "--fork", "--mount-proc"}
	}
	prefix = append(slices.Clone(cfg.prefix), prefix...)
	d := &daemon{t: t, base: base, logs: newLogWatch()}
	dm, err := daemontest.Start(context.Background(), daemontest.Options{
		Bin:           binPath,
		BaseDir:       base,
		LogPath:       filepath.Join(t.TempDir(), "daemon.log"),
		Env:           env,
		OnLine:        d.logs.add,
		Prefix:        prefix,
		ChildIsDaemon: cfg.pidNS,
		StartTimeout:  20 * time.Second,
		StopTimeout:   30 * time.Second,
	})
	if err != nil {
		t.Fatalf("%v", err)
	}
	d.d, d.pid, d.addr, d.url = dm, dm.PID, dm.Addr, dm.URL
	t.Cleanup(d.cleanup)
	d.client = &http.Client{Transport: &http.Transport{
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		DisableCompression:  true,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}}
	return d
}

// alive reports whether the daemon process is still running.
func (d *daemon) alive() bool { return d.d.Alive() }

// exitErr says how the daemon ended, without waiting.
func (d *daemon) exitErr() any {
	if d.alive() {
		return "still running"
	}
	return d.d.WaitErr()
}

// stop sends SIGTERM and waits (at most budget) for the process to exit. It
// returns the exit code and the time from the signal to the exit; a daemon
// that misses the budget is killed (with its commands' process groups).
func (d *daemon) stop(budget time.Duration) (code int, took time.Duration, err error) {
	d.closeIdle()
	return d.d.StopWithin(budget)
}

func (d *daemon) cleanup() {
	if d.t.Failed() {
		n, bad := d.logs.badLines()
		d.t.Logf("daemon %d: %d error/panic log lines %q; last log lines:\n%s", d.pid, n, bad, d.logs.tailText())
	}
	if !d.alive() {
		return
	}
	// A test that already asked it to stop gives it the rest of its budget;
	// a daemon that misses it is SIGKILLed with the process groups it
	// started (every managed command leads its own), so nothing outlives us.
	if _, _, err := d.d.StopWithin(30 * time.Second); err != nil {
		d.t.Logf("cleanup: %v", err)
	}
}

// closeIdle closes the suite's idle keep-alive connections, so that the
// daemon's goroutine and fd counts reflect only what it holds itself.
func (d *daemon) closeIdle() {
	if d.client != nil {
		d.client.CloseIdleConnections()
	}
}

// ---------------------------------------------------------------- HTTP

// call sends one request and reads the whole answer. in may be nil, a
// []byte, a string, or a value to encode as JSON.
func (d *daemon) call(method, path string, in any) (int, []byte, http.Header, error) {
	return d.callTimeout(method, path, in, 60*time.Second)
}

func (d *daemon) callTimeout(method, path string, in any, timeout time.Duration) (int, []byte, http.Header, error) {
	var body io.Reader
	switch v := in.(type) {
	case nil:
	case []byte:
		body = bytes.NewReader(v)
	case string:
		body = strings.NewReader(v)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return 0, nil, nil, err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, d.url+path, body)
	if err != nil {
		return 0, nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, resp.Header, err
}

// mustCall is call for the test goroutine: any transport error is fatal.
func (d *daemon) mustCall(method, path string, in any) (int, []byte) {
	d.t.Helper()
	code, data, _, err := d.call(method, path, in)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	return code, data
}

// cmdStatus is the status object of protocol.md §2 (the wire type, with
// the suite's helpers).
type cmdStatus struct{ wire.Status }

func (s cmdStatus) exitCode() int {
	if s.ExitCode == nil {
		return -1000
	}
	return *s.ExitCode
}

// apiError is the v1 error body.
type apiError = wire.ErrorBody

func errorCode(body []byte) string {
	var e apiError
	json.Unmarshal(body, &e)
	return e.Error.Code
}

// event is one line of the event stream (protocol.md §4): the wire event,
// and whether the line had a next_cursor at all.
type event struct {
	wire.Event
	hasNext bool
}

func (e *event) UnmarshalJSON(b []byte) error {
	var present struct {
		NextCursor *int64 `json:"next_cursor"`
	}
	if err := json.Unmarshal(b, &e.Event); err != nil {
		return err
	}
	json.Unmarshal(b, &present)
	e.hasNext = present.NextCursor != nil
	return nil
}

// create starts a command and returns its status; any answer but 201 is an error.
func (d *daemon) create(body any) (cmdStatus, error) {
	code, data, _, err := d.call("POST", "/v1/commands", body)
	if err != nil {
		return cmdStatus{}, err
	}
	if code != http.StatusCreated {
		return cmdStatus{}, fmt.Errorf("create: %d %s", code, data)
	}
	var st cmdStatus
	if err := json.Unmarshal(data, &st); err != nil {
		return cmdStatus{}, fmt.Errorf("create: %v in %s", err, data)
	}
	return st, nil
}

func (d *daemon) mustCreate(body any) cmdStatus {
	d.t.Helper()
	st, err := d.create(body)
	if err != nil {
		d.t.Fatal(err)
	}
	return st
}

// status returns GET /v1/commands/{id}[?wait=S].
func (d *daemon) status(id string, wait float64) (int, cmdStatus, error) {
	path := "/v1/commands/" + id
	if wait > 0 {
		path += "?wait=" + strconv.FormatFloat(wait, 'f', -1, 64)
	}
	code, data, _, err := d.call("GET", path, nil)
	if err != nil {
		return 0, cmdStatus{}, err
	}
	var st cmdStatus
	if code == http.StatusOK {
		if err := json.Unmarshal(data, &st); err != nil {
			return code, st, fmt.Errorf("status: %v in %s", err, data)
		}
	}
	return code, st, nil
}

// waitFinished holds GET ?wait until the command finishes (at most timeout).
func (d *daemon) waitFinished(id string, timeout time.Duration) (cmdStatus, error) {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline).Seconds()
		if left <= 0 {
			return cmdStatus{}, fmt.Errorf("command %s did not finish within %v", id, timeout)
		}
		code, st, err := d.status(id, min(left, 20))
		if err != nil {
			return st, err
		}
		if code != http.StatusOK {
			return st, fmt.Errorf("GET %s: %d", id, code)
		}
		if st.State != "running" {
			return st, nil
		}
	}
}

func (d *daemon) mustWaitFinished(id string, timeout time.Duration) cmdStatus {
	d.t.Helper()
	st, err := d.waitFinished(id, timeout)
	if err != nil {
		d.t.Fatal(err)
	}
	return st
}

func (d *daemon) kill(id string) (int, cmdStatus, error) {
	code, data, _, err := d.call("POST", "/v1/commands/"+id+"/kill", nil)
	if err != nil {
		return 0, cmdStatus{}, err
	}
	var st cmdStatus
	if code == http.StatusOK {
		err = json.Unmarshal(data, &st)
	}
	return code, st, err
}

// list returns GET /v1/commands[?state=…].
func (d *daemon) list(state string) ([]cmdStatus, error) {
	path := "/v1/commands"
	if state != "" {
		path += "?state=" + state
	}
	code, data, _, err := d.call("GET", path, nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %s", path, code, data)
	}
	var out struct {
		Commands []cmdStatus `json:"commands"`
	}
	err = json.Unmarshal(data, &out)
	return out.Commands, err
}

// killAll kills every running command through the API.
func (d *daemon) killAll() error {
	running, err := d.list("running")
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range running {
		if code, _, err := d.kill(c.CommandID); err != nil || code != http.StatusOK {
			errs = append(errs, fmt.Errorf("kill %s: %d %v", c.CommandID, code, err))
		}
	}
	return errors.Join(errs...)
}

// readStream reads an NDJSON stream to its end (or until max lines) and
// returns its events.
func readStream(r io.Reader) ([]event, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	var evs []event
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return evs, fmt.Errorf("bad line %q: %v", truncate(sc.Text(), 200), err)
		}
		evs = append(evs, e)
	}
	return evs, sc.Err()
}

// output reads the retained output of a command with follow=false.
func (d *daemon) output(id string, cursor int64) ([]event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/commands/%s/output?follow=false&cursor=%d", d.url, id, cursor), nil)
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("output: %d %s", resp.StatusCode, b)
	}
	return readStream(resp.Body)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ---------------------------------------------------------------- metrics and /proc

// metrics scrapes /metrics over a fresh connection (closed afterwards, so it
// does not linger in the goroutine and fd counts).
func (d *daemon) metrics() (map[string]float64, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(d.url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %d", resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

func (d *daemon) mustMetrics() map[string]float64 {
	d.t.Helper()
	m, err := d.metrics()
	if err != nil {
		d.t.Fatal(err)
	}
	return m
}

// finishedTotal sums sandbox_runtime_commands_finished_total over states.
func finishedTotal(m map[string]float64) float64 {
	var sum float64
	for k, v := range m {
		if strings.HasPrefix(k, "sandbox_runtime_commands_finished_total{") {
			sum += v
		}
	}
	return sum
}

// rssKB is VmRSS of pid in KiB.
func rssKB(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return -1
}

// fdCount counts the open file descriptors of pid.
func fdCount(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// childrenOf lists the children of every thread of pid.
func childrenOf(pid int) []int { return daemontest.Children(pid) }

// procInfo is what /proc/PID/stat says about one process.
type procInfo struct {
	pid, ppid, pgid, sid int
	state                byte
	comm                 string
}

func readProc(pid int) (procInfo, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procInfo{}, false
	}
	s := string(data)
	open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || close < 0 || close+2 >= len(s) {
		return procInfo{}, false
	}
	f := strings.Fields(s[close+2:])
	if len(f) < 4 {
		return procInfo{}, false
	}
	p := procInfo{pid: pid, state: f[0][0], comm: s[open+1 : close]}
	p.ppid, _ = strconv.Atoi(f[1])
	p.pgid, _ = strconv.Atoi(f[2])
	p.sid, _ = strconv.Atoi(f[3])
	return p, true
}

// allProcs reads every process of /proc.
func allProcs() []procInfo {
	ents, _ := os.ReadDir("/proc")
	var out []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

// inGroup lists the processes whose process group is pgid.
func inGroup(pgid int) []procInfo {
	var out []procInfo
	for _, p := range allProcs() {
		if p.pgid == pgid {
			out = append(out, p)
		}
	}
	return out
}

// descendants lists every process below pid (through the children files).
func descendants(pid int) []procInfo {
	var out []procInfo
	queue := childrenOf(pid)
	seen := map[int]bool{}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		if info, ok := readProc(p); ok {
			out = append(out, info)
		}
		queue = append(queue, childrenOf(p)...)
	}
	return out
}

func zombies(ps []procInfo) []procInfo {
	var out []procInfo
	for _, p := range ps {
		if p.state == 'Z' {
			out = append(out, p)
		}
	}
	return out
}

// resources is the daemon's goroutines (go_goroutines from /metrics) and fds.
type resources struct {
	goroutines int
	fds        int
}

func (d *daemon) resources() (resources, error) {
	m, err := d.metrics()
	if err != nil {
		return resources{}, err
	}
	g, ok := m["go_goroutines"]
	if !ok {
		return resources{}, errors.New("/metrics has no go_goroutines")
	}
	return resources{goroutines: int(g), fds: fdCount(d.pid)}, nil
}

// settle closes idle client connections and polls until the daemon's
// goroutines and fds are back to base, or timeout passes; it reports the
// last reading and whether that is within slack of base.
func (d *daemon) settle(base resources, slack int, timeout time.Duration) (resources, bool) {
	d.closeIdle()
	var last resources
	poll(timeout, 50*time.Millisecond, func() (bool, string) {
		r, err := d.resources()
		if err != nil {
			return false, err.Error()
		}
		last = r
		return r.goroutines <= base.goroutines && r.fds <= base.fds, ""
	})
	return last, last.goroutines <= base.goroutines+slack && last.fds <= base.fds+slack
}

// baseline measures resources once the daemon is idle and steady: two
// equal readings in a row.
func (d *daemon) baseline() resources {
	d.t.Helper()
	d.closeIdle()
	var prev, cur resources
	ok, _ := poll(10*time.Second, 100*time.Millisecond, func() (bool, string) {
		r, err := d.resources()
		if err != nil {
			return false, err.Error()
		}
		prev, cur = cur, r
		return prev == cur, ""
	})
	if !ok {
		d.t.Logf("baseline not steady: %+v then %+v", prev, cur)
	}
	return cur
}

// ---------------------------------------------------------------- logs

// logWatch sees the daemon's stderr line by line (the launcher's OnLine): it
// keeps a tail for failure messages, and collects lines that show a bug
// (error level, panics, crashes) and net/http's own complaints.
type logWatch struct {
	mu       sync.Mutex
	tail     []string
	bad      []string
	nbad     int
	trace    int      // lines of a race report or crash still to capture
	traces   []string // the first such reports, whole
	httpLogs []string
	nhttp    int
	lines    int
}

func newLogWatch() *logWatch { return &logWatch{} }

func (w *logWatch) add(line string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines++
	if w.trace > 0 {
		w.trace--
		w.traces = append(w.traces, line)
		if strings.HasPrefix(line, "==================") {
			w.trace = 0
		}
	}
	if (strings.HasPrefix(line, "WARNING: DATA RACE") || strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:")) && len(w.traces) < 400 {
		w.trace = 120
		w.traces = append(w.traces, line)
	}
	w.tail = append(w.tail, truncate(line, 2000))
	if len(w.tail) > 200 {
		w.tail = w.tail[len(w.tail)-200:]
	}
	switch {
	case strings.Contains(line, `"level":"error"`), strings.Contains(line, `"level":"dpanic"`),
		strings.Contains(line, `"level":"panic"`), strings.Contains(line, `"level":"fatal"`),
		strings.HasPrefix(line, "panic:"), strings.HasPrefix(line, "fatal error:"),
		strings.Contains(line, "handler panic"), strings.HasPrefix(line, "goroutine "),
		strings.Contains(line, "http: panic serving"),
		strings.HasPrefix(line, "WARNING: DATA RACE"):
		w.nbad++
		if len(w.bad) < 20 {
			w.bad = append(w.bad, truncate(line, 2000))
		}
	case strings.Contains(line, `"logger":"http"`):
		w.nhttp++
		if len(w.httpLogs) < 10 {
			w.httpLogs = append(w.httpLogs, truncate(line, 500))
		}
	}
}

func (w *logWatch) tailText() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := max(0, len(w.tail)-40)
	return strings.Join(w.tail[n:], "\n")
}

// badLines returns the number of bug-looking lines and the first few.
func (w *logWatch) badLines() (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nbad, append([]string(nil), w.bad...)
}

// assertCleanLogs fails the test if the daemon logged an error or a panic.
// knownRaces counts the race reports in traces that are the reported race
// between Manager.Create and Manager.finished.
func knownRaces(traces string) int {
	n := 0
	for _, r := range strings.Split(traces, "WARNING: DATA RACE")[1:] {
		if strings.Contains(r, "runtime.(*Manager).finished()") && strings.Contains(r, "runtime.(*Manager).Create()") {
			n++
		}
	}
	return n
}

func (d *daemon) assertCleanLogs() {
	d.t.Helper()
	n, lines := d.logs.badLines()
	d.logs.mu.Lock()
	traces := strings.Join(d.logs.traces, "\n")
	d.logs.mu.Unlock()
	if n > 0 && n == knownRaces(traces) {
		d.t.Errorf("%d data race report(s) on Manager.running (Create's 429 message reads it after the unlock; see TestRegressions/running-count-race)", n)
	} else if n > 0 {
		d.t.Errorf("the daemon logged %d error/panic lines; first:\n%s\n%s", n, strings.Join(lines, "\n"), traces)
	}
	d.logs.mu.Lock()
	nh, hl := d.logs.nhttp, append([]string(nil), d.logs.httpLogs...)
	d.logs.mu.Unlock()
	if nh > 0 {
		d.t.Logf("net/http logged %d lines (not failures by themselves); first:\n%s", nh, strings.Join(hl, "\n"))
	}
}

// ---------------------------------------------------------------- samplers

// rssSampler samples VmRSS of pid every 100 ms until stopped.
type rssSampler struct {
	pid  int
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	max  int64
	n    int
}

func sampleRSS(pid int) *rssSampler {
	s := &rssSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				s.sample()
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) sample() {
	v := rssKB(s.pid)
	s.mu.Lock()
	if v > s.max {
		s.max = v
	}
	s.n++
	s.mu.Unlock()
}

// reset starts a new maximum (for per-phase figures).
func (s *rssSampler) reset() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.max
	s.max = 0
	return m
}

func (s *rssSampler) peak() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max
}

func (s *rssSampler) finish() (maxKB int64, samples int) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max, s.n
}

// ---------------------------------------------------------------- errors from goroutines

// errSet collects errors from worker goroutines (which must not call t.Fatal).
type errSet struct {
	mu    sync.Mutex
	n     int
	first []string
}

func (e *errSet) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if len(e.first) < 15 {
		e.first = append(e.first, fmt.Sprintf(format, args...))
	}
}

func (e *errSet) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n
}

func (e *errSet) report(t testing.TB, what string) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n > 0 {
		t.Errorf("%d %s; first:\n%s", e.n, what, strings.Join(e.first, "\n"))
	}
}
