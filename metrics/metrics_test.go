package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// TestObserverOfTheManager: New makes the collectors, runtime.New takes
// them as its Observer and Watch adds the gauges that read the Manager:
// twice in a process without a registration panic (each Metrics has its
// own registry); build_info is there from the first scrape, the gauges once
// the Manager is watched, and the runtime's events reach the counters.
func TestObserverOfTheManager(t *testing.T) {
	reaper, err := procgroup.NewReaper(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer reaper.Close()
	for i := range 2 {
		x := New("v-test")
		if body := scrape(t, x); !strings.Contains(body, `version="v-test"} 1`) || strings.Contains(body, "commands_running") {
			t.Errorf("metrics %d before Watch: want build_info and no gauge of a Manager yet:\n%s", i, body)
		}
		rc := runtime.DefaultConfig()
		rc.BaseDir = t.TempDir()
		rc.Observer = x
		m, err := runtime.New(rc, reaper)
		if err != nil {
			t.Fatal(err)
		}
		x.Watch(m)
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
