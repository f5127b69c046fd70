package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// obsWait is how long the tests below give the middleware to record a
// request: its log line and counters are written after the handler returns,
// which the client can observe before they are.
const obsWait = 10 * time.Second

// metWaitSample scrapes until sample has value want.
func metWaitSample(t *testing.T, ts *testServer, sample string, want float64) {
	t.Helper()
	deadline := time.Now().Add(obsWait)
	for {
		samples, _ := metScrape(t, ts)
		if samples[sample] == want {
			return
		}
		if time.Now().After(deadline) {
			var near []string
			name, _, _ := strings.Cut(sample, "{")
			for k, v := range samples {
				if strings.HasPrefix(k, name) {
					near = append(near, fmt.Sprintf("%s %v", k, v))
				}
			}
			t.Fatalf("%s = %v; want %v\nexposed:\n%s", sample, samples[sample], want, strings.Join(near, "\n"))
		}
	}
}

// TestMetricsForOperators: requests by route pattern, method and status with
// a duration histogram, refusals by reason, spawn failures by class, build
// info.
func TestMetricsForOperators(t *testing.T) {
	ts := newTestServer(t, nil)
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644)
	noMagic := filepath.Join(dir, "no-magic")
	os.WriteFile(noMagic, []byte("just text\n"), 0o755)

	steps := []struct {
		method, path, body string
		want               int
	}{
		{"GET", "/v1/health", "", 200},
		{"GET", "/v1/health", "", 200},
		{"POST", "/v1/commands", `{"argv":["/nonexistent/cmd"]}`, 422},
		{"POST", "/v1/commands", fmt.Sprintf(`{"argv":[%q]}`, notExec), 422},
		{"POST", "/v1/commands", fmt.Sprintf(`{"argv":[%q]}`, noMagic), 422},
		{"POST", "/v1/commands", `{"argv":["true"],"x":` + strings.Repeat(" ", 1<<20) + `1}`, 413},
		{"GET", "/v1/commands/9b2f6f0e-3f43-4c1e-9d49-0a8b9b0c6a11", "", 404},
		{"GET", "/no/such/route", "", 404},
		{"GET", "/download/missing.txt", "", 404},
		{"BREW", "/v1/health", "", 405},
	}
	for _, s := range steps {
		if code, body := atDo(t, s.method, ts.URL+s.path, s.body, nil); code != s.want {
			t.Fatalf("%s %s: %d %s; want %d", s.method, s.path, code, body, s.want)
		}
	}
	for sample, want := range map[string]float64{
		`sandbox_runtime_http_requests_total{method="GET",route="/v1/health",status="200"}`:                  2,
		`sandbox_runtime_http_requests_total{method="POST",route="/v1/commands",status="422"}`:               3,
		`sandbox_runtime_http_requests_total{method="POST",route="/v1/commands",status="413"}`:               1,
		`sandbox_runtime_http_requests_total{method="GET",route="/v1/commands/{id}",status="404"}`:           1,
		`sandbox_runtime_http_requests_total{method="GET",route="unmatched",status="404"}`:                   1,
		`sandbox_runtime_http_requests_total{method="GET",route="/download/{path...}",status="404"}`:         1,
		`sandbox_runtime_http_requests_total{method="other",route="/v1/health",status="405"}`:                1,
		`sandbox_runtime_http_request_duration_seconds_count{method="GET",route="/v1/health"}`:               2,
		`sandbox_runtime_http_request_duration_seconds_bucket{method="POST",route="/v1/commands",le="+Inf"}`: 4,
		`sandbox_runtime_refusals_total{reason="too_large"}`:                                                 1,
		`sandbox_runtime_refusals_total{reason="spawn_failed"}`:                                              3,
		`sandbox_runtime_refusals_total{reason="not_found"}`:                                                 3,
		`sandbox_runtime_refusals_total{reason="method_not_allowed"}`:                                        1,
		`sandbox_runtime_spawn_failures_total{class="not_found"}`:                                            1,
		`sandbox_runtime_spawn_failures_total{class="permission"}`:                                           1,
		`sandbox_runtime_spawn_failures_total{class="exec_format"}`:                                          1,
		`sandbox_runtime_build_info{go_version="` + goruntime.Version() + `",version="test"}`:                1,
	} {
		metWaitSample(t, ts, sample, want)
	}
	// Series an alert rule needs before the first event: present at 0.
	samples, _ := metScrape(t, ts)
	for _, sample := range []string{
		`sandbox_runtime_refusals_total{reason="too_many_running"}`,
		`sandbox_runtime_refusals_total{reason="stdin_full"}`,
		`sandbox_runtime_spawn_failures_total{class="resources"}`,
		`sandbox_runtime_spawn_failures_total{class="other"}`,
	} {
		if v, ok := samples[sample]; !ok || v != 0 {
			t.Errorf("%s = %v (exposed: %v); want 0, exposed", sample, v, ok)
		}
	}
	_, types := metScrape(t, ts)
	if types["sandbox_runtime_http_request_duration_seconds"] != "histogram" {
		t.Errorf("duration type %q; want histogram", types["sandbox_runtime_http_request_duration_seconds"])
	}
}

// obsLogs is a test server whose log is observed.
func obsLogs(t *testing.T, mutate func(*runtime.Config, *Options)) (*testServer, *observer.ObservedLogs) {
	core, logs := observer.New(zap.DebugLevel)
	ts := newTestServer(t, func(c *runtime.Config, o *Options) {
		o.Logger = zap.New(core)
		c.Logger = o.Logger
		if mutate != nil {
			mutate(c, o)
		}
	})
	return ts, logs
}

// obsWaitLog waits for a line with message msg and the given string fields.
func obsWaitLog(t *testing.T, logs *observer.ObservedLogs, msg string, fields map[string]string) observer.LoggedEntry {
	t.Helper()
	deadline := time.Now().Add(obsWait)
	for {
		for _, e := range logs.FilterMessage(msg).All() {
			m := e.ContextMap()
			ok := true
			for k, v := range fields {
				if fmt.Sprint(m[k]) != v {
					ok = false
				}
			}
			if ok {
				return e
			}
		}
		if time.Now().After(deadline) {
			var all []string
			for _, e := range logs.All() {
				b, _ := json.Marshal(e.ContextMap())
				all = append(all, e.Message+" "+string(b))
			}
			t.Fatalf("no %q line with %v in:\n%s", msg, fields, strings.Join(all, "\n"))
		}
		<-time.After(time.Millisecond) // the observer has no event: poll, without spinning
	}
}

// TestLogsExplainRefusals: every 4xx and 5xx request line carries the error
// code and message the client got, v1 and legacy alike; 2xx lines carry none.
func TestLogsExplainRefusals(t *testing.T) {
	ts, logs := obsLogs(t, func(c *runtime.Config, _ *Options) { c.MaxRunning, c.MaxRetained = 1, 4 })
	// One command holds the only running slot.
	code, body := atDo(t, "POST", ts.URL+"/v1/commands", `{"argv":["sleep","30"]}`, nil)
	if code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	var st struct {
		CommandID string `json:"command_id"`
	}
	json.Unmarshal(body, &st)
	t.Cleanup(func() { atDo(t, "POST", ts.URL+"/v1/commands/"+st.CommandID+"/kill", "", nil) })
	cases := []struct {
		method, path, body, rid string
		status                  int
		code, msg               string
	}{
		{"POST", "/v1/commands", `{"argv":["true"]}`, "rid-429", 429, "too_many_running", "1 managed commands are running (limit 1)"},
		{"POST", "/v1/commands", `{"argv":["true"],"bogus":1}`, "rid-400", 400, "invalid_request", "bogus"},
		{"GET", "/v1/nothing", "", "rid-404", 404, "not_found", "no route /v1/nothing"},
		{"GET", "/download/missing.txt", "", "rid-legacy-404", 404, "not_found", "File not found"},
		{"GET", "/nothing", "", "rid-legacy-route", 404, "not_found", "Not Found"},
		{"POST", "/execute", `{"nocommand":1}`, "rid-legacy-422", 422, "invalid_request", "command"},
		// Whoever writes the 416 (net/http's text or a JSON error), the line
		// has a code and a message: "" here means any non-empty value.
		{"GET", "/v1/files/f.txt", "", "rid-416", 416, "", ""},
	}
	if err := os.WriteFile(filepath.Join(ts.BaseDir, "f.txt"), []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		hdr := http.Header{"X-Request-Id": {c.rid}}
		if c.status == 416 {
			hdr.Set("Range", "bytes=100-200")
		}
		code, body := atDo(t, c.method, ts.URL+c.path, c.body, hdr)
		if code != c.status {
			t.Fatalf("%s %s: %d %s; want %d", c.method, c.path, code, body, c.status)
		}
		e := obsWaitLog(t, logs, "request", map[string]string{"request_id": c.rid})
		m := e.ContextMap()
		gotCode, gotMsg := fmt.Sprint(m["error_code"]), fmt.Sprint(m["error_message"])
		if (c.code == "" && (m["error_code"] == nil || gotCode == "" || m["error_message"] == nil || gotMsg == "")) ||
			(c.code != "" && (gotCode != c.code || !strings.Contains(gotMsg, c.msg))) {
			t.Errorf("%s %s: log line %v; want error_code %q and a message containing %q", c.method, c.path, m, c.code, c.msg)
		}
	}
	atDo(t, "GET", ts.URL+"/v1/health", "", http.Header{"X-Request-Id": {"rid-ok"}})
	if m := obsWaitLog(t, logs, "request", map[string]string{"request_id": "rid-ok"}).ContextMap(); m["error_code"] != nil || m["error_message"] != nil {
		t.Errorf("a 200 carries error fields: %v", m)
	}
}

// TestCommandLogsCarryRequestID: the start and end lines of a command carry
// the request_id of the request that created it (the caller's X-Request-ID).
func TestCommandLogsCarryRequestID(t *testing.T) {
	ts, logs := obsLogs(t, nil)
	code, body := atDo(t, "POST", ts.URL+"/v1/commands", `{"argv":["sh","-c","exit 3"]}`, http.Header{"X-Request-Id": {"create-42"}})
	if code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	var st struct {
		CommandID string `json:"command_id"`
	}
	json.Unmarshal(body, &st)
	// Another request for the same command must not relabel it.
	atDo(t, "GET", ts.URL+"/v1/commands/"+st.CommandID+"?wait=10", "", http.Header{"X-Request-Id": {"wait-43"}})
	e := obsWaitLog(t, logs, "command finished", map[string]string{"command_id": st.CommandID})
	if got := e.ContextMap()["request_id"]; got != "create-42" {
		t.Errorf("command finished line: request_id %v; want create-42 (%v)", got, e.ContextMap())
	}
	// Without an X-Request-ID the generated id is the one logged.
	resp, err := http.Post(ts.URL+"/v1/commands", "application/json", strings.NewReader(`{"argv":["true"]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	rid := resp.Header.Get("X-Request-ID")
	if rid == "" {
		t.Fatal("no X-Request-ID in the answer")
	}
	obsWaitLog(t, logs, "command finished", map[string]string{"request_id": rid})
}

// TestOneInfoLinePerCommand: at the info level a command logs one line, at
// its end, carrying the start's audit fields (argv0, pid, timeout, stdin,
// terminal) beside the end's; the start line is debug only (issue 26).
func TestOneInfoLinePerCommand(t *testing.T) {
	ts, logs := obsLogs(t, nil)
	code, body := atDo(t, "POST", ts.URL+"/v1/commands", `{"argv":["sh","-c","exit 3"],"timeout":7}`, http.Header{"X-Request-Id": {"rid-one-line"}})
	if code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	var st struct {
		CommandID string `json:"command_id"`
		PID       int    `json:"pid"`
	}
	json.Unmarshal(body, &st)
	e := obsWaitLog(t, logs, "command finished", map[string]string{"command_id": st.CommandID})
	f := e.ContextMap()
	if f["argv0"] != "sh" || fmt.Sprint(f["pid"]) != fmt.Sprint(st.PID) || f["timeout_seconds"] != 7.0 ||
		f["stdin"] != false || f["pty"] != false || fmt.Sprint(f["exit_code"]) != "3" || f["state"] != "exited" {
		t.Errorf("command finished line %v; want argv0 sh, pid %d, timeout_seconds 7, stdin and pty false, exit_code 3, state exited", f, st.PID)
	}
	// The create request's own line is debug: the command's line, with the
	// same request_id, is its record.
	obsWaitLog(t, logs, "request", map[string]string{"request_id": "rid-one-line"})
	var info []string
	for _, l := range logs.All() {
		m := l.ContextMap()
		if (m["command_id"] == st.CommandID || m["request_id"] == "rid-one-line") && l.Level >= zapcore.InfoLevel {
			info = append(info, l.Message)
		}
	}
	if len(info) != 1 {
		t.Errorf("info lines of the command: %q; want only \"command finished\"", info)
	}
	// A refused create has no command line: its request line stays info.
	if code, body := atDo(t, "POST", ts.URL+"/v1/commands", `{"argv":[]}`, http.Header{"X-Request-Id": {"rid-refused"}}); code != 400 {
		t.Fatalf("empty argv: %d %s", code, body)
	}
	if l := obsWaitLog(t, logs, "request", map[string]string{"request_id": "rid-refused"}); l.Level != zapcore.InfoLevel {
		t.Errorf("a refused create's request line is %v; want info", l.Level)
	}
}

// TestLegacyExecuteLogsOneLine: a legacy /execute logs one info line, the
// request's, carrying the execution's outcome (argv0, pid, exit code, how it
// ended); the runtime's own line for it is debug only (issue 26).
func TestLegacyExecuteLogsOneLine(t *testing.T) {
	ts, logs := obsLogs(t, nil)
	code, body := atDo(t, "POST", ts.URL+"/execute", `{"command":"sh -c 'exit 4'"}`, http.Header{"X-Request-Id": {"rid-exec-one"}})
	if code != 200 || !strings.Contains(string(body), `"exit_code":4`) {
		t.Fatalf("execute: %d %s", code, body)
	}
	e := obsWaitLog(t, logs, "request", map[string]string{"request_id": "rid-exec-one"})
	f := e.ContextMap()
	pid, _ := f["pid"].(int64)
	if f["argv0"] != "sh" || pid <= 0 || fmt.Sprint(f["exit_code"]) != "4" || f["timed_out"] != false || f["terminated"] != false {
		t.Errorf("request line %v; want argv0 sh, a pid, exit_code 4, timed_out and terminated false", f)
	}
	var info []string
	for _, l := range logs.All() {
		if l.Level >= zapcore.InfoLevel && (l.ContextMap()["request_id"] == "rid-exec-one" || l.ContextMap()["pid"] == f["pid"]) {
			info = append(info, l.Message)
		}
	}
	if len(info) != 1 {
		t.Errorf("info lines of the execution: %q; want only the request's", info)
	}
}
