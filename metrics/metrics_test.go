package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// TestNewManagerIsTheOneConstructor: one call builds the Manager and the
// collectors that read it, twice in a process without a registration panic
// (each Metrics has its own registry); the gauges and build_info are there
// from the first scrape, and the runtime's events reach the counters.
func TestNewManagerIsTheOneConstructor(t *testing.T) {
	reaper, err := runtime.NewReaper(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer reaper.Close()
	for i := range 2 {
		rc := runtime.DefaultConfig()
		rc.BaseDir = t.TempDir()
		m, x, err := NewManager(rc, reaper, "v-test")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := m.Create(runtime.CreateRequest{Argv: []string{"no-such-command-metrics-test"}}); err == nil {
			t.Fatal("Create of a missing executable succeeded")
		}
		body := scrape(t, x)
		for _, want := range []string{
			"sandbox_runtime_commands_running 0",
			"sandbox_runtime_commands_retained 0",
			"sandbox_runtime_orphans_reaped_total ",
			`sandbox_runtime_build_info{go_version="`,
			`version="v-test"} 1`,
			`sandbox_runtime_spawn_failures_total{class="not_found"} 1`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("manager %d: /metrics lacks %q", i, want)
			}
		}
		m.Close()
	}
}

// TestNilMetrics: a transport without metrics may hold a nil *Metrics.
func TestNilMetrics(t *testing.T) {
	var x *Metrics
	x.ObserveRequest("/", "GET", 200, 0, "")
	x.StreamOpened()()
	x.WebSocketOpened()()
	rec := httptest.NewRecorder()
	x.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("nil Metrics: /metrics answered %d; want 404", rec.Code)
	}
}

func scrape(t *testing.T, x *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	x.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d", rec.Code)
	}
	return rec.Body.String()
}
