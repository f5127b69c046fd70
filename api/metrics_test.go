package api

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// metClock is a runtime.Clock the test moves by hand, so that expiry needs
// no waiting.
type metClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *metClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *metClock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// metScrape fetches /metrics and returns every sample by its name with
// labels as exposed (`name{label="v"}`), plus the metric types.
func metScrape(t testing.TB, ts *testServer) (samples map[string]float64, types map[string]string) {
	t.Helper()
	code, body := atDo(t, "GET", ts.URL+"/metrics", "", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	samples, types = map[string]float64{}, map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			if name, typ, ok := strings.Cut(f, " "); ok {
				types[name] = typ
			}
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("bad exposition line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad value in %q: %v", line, err)
		}
		samples[line[:i]] = v
	}
	return samples, types
}

// metWant checks samples against want (names without the namespace prefix).
func metWant(t testing.TB, samples map[string]float64, want map[string]float64) {
	t.Helper()
	for name, v := range want {
		full := "sandbox_runtime_" + name
		got, ok := samples[full]
		if !ok {
			t.Errorf("%s: missing", full)
		} else if got != v {
			t.Errorf("%s = %v; want %v", full, got, v)
		}
	}
}

// metWaitGauge polls /metrics until the gauge reaches v: the clients'
// gauges move just after the client sees its connection open or close.
func metWaitGauge(t testing.TB, ts *testServer, name string, v float64) {
	t.Helper()
	atWaitFor(t, name+" = "+strconv.FormatFloat(v, 'g', -1, 64), func() bool {
		s, _ := metScrape(t, ts)
		return s["sandbox_runtime_"+name] == v
	})
}

func TestMetrics(t *testing.T) {
	clock := &metClock{t: time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)}
	ts := newTestServer(t, func(c *runtime.Config, o *Options) {
		atQuietAPI(c, o)
		c.Clock = clock
		c.OutputLimit = 64 << 10 // the 100000-byte command is truncated
		c.MaxRunning = 2
		c.MaxRetained = 3
	})

	s, types := metScrape(t, ts)
	metWant(t, s, map[string]float64{
		"commands_started_total": 0, `commands_finished_total{state="exited"}`: 0,
		"commands_running": 0, "commands_retained": 0, "stream_clients": 0, "websocket_clients": 0,
		"handles_evicted_total": 0, "handles_expired_total": 0, "orphans_reaped_total": s["sandbox_runtime_orphans_reaped_total"],
		"legacy_executions_total": 0, "spawn_seconds_count": 0,
	})
	for name, typ := range map[string]string{
		"commands_started_total": "counter", "commands_finished_total": "counter", "commands_running": "gauge",
		"commands_retained": "gauge", "output_bytes_total": "counter", "output_truncated_total": "counter",
		"handles_evicted_total": "counter", "handles_expired_total": "counter", "orphans_reaped_total": "counter",
		"spawn_seconds": "histogram", "stream_clients": "gauge", "websocket_clients": "gauge", "legacy_executions_total": "counter",
	} {
		if got := types["sandbox_runtime_"+name]; got != typ {
			t.Errorf("sandbox_runtime_%s has type %q; want %q", name, got, typ)
		}
	}

	hello := atCreate(t, ts, `{"argv":["echo","hello"]}`)
	if st := atGet(t, ts, hello.CommandID, 20); st.State != "exited" {
		t.Fatalf("echo: %s", st.State)
	}
	clock.advance(time.Second) // distinct finished_at: eviction order is by it
	big := atCreate(t, ts, `{"argv":["head","-c","100000","/dev/zero"]}`)
	if st := atGet(t, ts, big.CommandID, 20); st.State != "exited" || !st.OutputTruncated {
		t.Fatalf("head: %s truncated %v; want exited and truncated", st.State, st.OutputTruncated)
	}
	clock.advance(time.Second)
	sleep := atCreate(t, ts, `{"argv":["sleep","30"]}`)

	// One client of each kind on the running command.
	ctx, cancel := context.WithTimeout(context.Background(), atTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/commands/"+sleep.CommandID+"/output", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	ws := atDial(t, ts, sleep.CommandID, "")
	metWaitGauge(t, ts, "stream_clients", 1)
	metWaitGauge(t, ts, "websocket_clients", 1)
	s, _ = metScrape(t, ts)
	metWant(t, s, map[string]float64{"commands_running": 1, "commands_retained": 3, "commands_started_total": 3})
	resp.Body.Close()
	ws.ws.Close()
	metWaitGauge(t, ts, "stream_clients", 0)
	metWaitGauge(t, ts, "websocket_clients", 0)

	if code, body := atDo(t, "POST", ts.URL+"/v1/commands/"+sleep.CommandID+"/kill", "", nil); code != http.StatusOK || !strings.Contains(string(body), `"cancelled"`) {
		t.Fatalf("kill: %d %s", code, body)
	}
	// A fourth handle evicts the oldest finished one (echo).
	last := atCreate(t, ts, `{"argv":["true"]}`)
	atGet(t, ts, last.CommandID, 20)
	if code, body := atDo(t, "GET", ts.URL+"/v1/commands/"+hello.CommandID, "", nil); code != http.StatusGone || !strings.Contains(string(body), `"evicted"`) {
		t.Errorf("the oldest handle: got %d %s; want 410 evicted", code, body)
	}
	s, _ = metScrape(t, ts)
	metWant(t, s, map[string]float64{
		"commands_started_total":                  4,
		`commands_finished_total{state="exited"}`: 3, `commands_finished_total{state="cancelled"}`: 1,
		`commands_finished_total{state="timed_out"}`: 0, `commands_finished_total{state="terminated"}`: 0,
		"commands_running": 0, "commands_retained": 3,
		`output_bytes_total{stream="stdout"}`: 6 + 100000, `output_bytes_total{stream="stderr"}`: 0,
		"output_truncated_total": 1,
		"spawn_seconds_count":    4,
		"handles_evicted_total":  1, "handles_expired_total": 0,
		"stream_clients": 0, "websocket_clients": 0,
	})
	if _, ok := s["sandbox_runtime_orphans_reaped_total"]; !ok {
		t.Error("sandbox_runtime_orphans_reaped_total: missing")
	}
	if s["sandbox_runtime_spawn_seconds_sum"] <= 0 {
		t.Errorf("sandbox_runtime_spawn_seconds_sum = %v; want > 0", s["sandbox_runtime_spawn_seconds_sum"])
	}

	// Past the TTL, the three remaining handles expire.
	clock.advance(ts.M.Config().ResultTTL + time.Second)
	if code, body := atDo(t, "GET", ts.URL+"/v1/commands/"+big.CommandID, "", nil); code != http.StatusGone || !strings.Contains(string(body), `"expired"`) {
		t.Errorf("after the TTL: got %d %s; want 410 expired", code, body)
	}
	s, _ = metScrape(t, ts)
	metWant(t, s, map[string]float64{"handles_expired_total": 3, "handles_evicted_total": 1, "commands_retained": 0})
}

// TestNoMetricsIsAnyOther404: a server built without metrics (library use)
// answers /metrics exactly as it answers any path it does not serve.
func TestNoMetricsIsAnyOther404(t *testing.T) {
	ts := newTestServer(t, nil)
	srv := httptest.NewServer(New(ts.M, Options{Version: "test", BaseDir: ts.BaseDir}).Handler()) // no Metrics
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type") + " " + string(b)
	}
	mc, mb := get("/metrics")
	oc, ob := get("/no-such-page")
	if mc != http.StatusNotFound || mc != oc || strings.ReplaceAll(ob, "/no-such-page", "/metrics") != mb {
		t.Errorf("/metrics without metrics: %d %s; want what /no-such-page answers: %d %s", mc, mb, oc, ob)
	}
}
