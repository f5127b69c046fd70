package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// TestInfoAnnouncesWhatIsMounted: /v1/info lists "metrics" only when
// /metrics is served and "legacy" only when the legacy routes are mounted,
// each time together with the route itself; the features of the server's
// own routes are always there.
func TestInfoAnnouncesWhatIsMounted(t *testing.T) {
	own := []string{wire.FeatureCommands, wire.FeatureStream, wire.FeatureStdin, wire.FeatureSignals, wire.FeatureWebSocket,
		wire.FeatureFiles, wire.FeatureWatch, wire.FeatureIdempotentCreate, wire.FeaturePTY, wire.FeatureContexts, wire.FeatureEvents, wire.FeaturePorts}
	check := func(name string, h http.Handler, wantLegacy, wantMetrics bool) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/info", nil))
		var info wire.Info
		if err := json.Unmarshal(rec.Body.Bytes(), &info); rec.Code != http.StatusOK || err != nil {
			t.Fatalf("%s: /v1/info %d %s (%v)", name, rec.Code, rec.Body, err)
		}
		for _, f := range own {
			if !info.HasFeature(f) {
				t.Errorf("%s: features %q lack %q", name, info.Features, f)
			}
		}
		for f, want := range map[string]bool{wire.FeatureLegacy: wantLegacy, wire.FeatureMetrics: wantMetrics} {
			if info.HasFeature(f) != want {
				t.Errorf("%s: features %q: %q announced %v; want %v", name, info.Features, f, !want, want)
			}
		}
		if n := len(info.Features); n != len(own)+len(slices.DeleteFunc([]bool{wantLegacy, wantMetrics}, func(b bool) bool { return !b })) {
			t.Errorf("%s: features %q: %d; want only the ones checked here", name, info.Features, n)
		}
		for path, mounted := range map[string]bool{"/metrics": wantMetrics, "/execute": wantLegacy} {
			method := map[string]string{"/metrics": "GET", "/execute": "POST"}[path]
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
			if got := rec.Code != http.StatusNotFound; got != mounted {
				t.Errorf("%s: %s %s answered %d; the route is mounted: %v", name, method, path, rec.Code, mounted)
			}
		}
	}

	// Everything mounted, as main does.
	ts := newTestServer(t, nil)
	check("main's server", ts.Handler(), true, true)

	// Neither metrics nor the legacy routes.
	cfg := runtime.DefaultConfig()
	cfg.BaseDir = t.TempDir()
	m, err := runtime.New(cfg, testReaper)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Shutdown(ctx)
		m.Close()
	})
	check("a bare server", New(m, Options{Version: "test", BaseDir: cfg.BaseDir}).Handler(), false, false)
}
