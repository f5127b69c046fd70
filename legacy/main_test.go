package legacy

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/sandbox-runtime/sandbox-runtime/api"
	"github.com/sandbox-runtime/sandbox-runtime/metrics"
	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// testReaper is the one reaper of this test binary (a process has at most one).
var testReaper *procgroup.Reaper

func TestMain(m *testing.M) {
	r, err := procgroup.NewReaper(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reaper:", err)
		os.Exit(2)
	}
	testReaper = r
	code := m.Run()
	r.Close()
	os.Exit(code)
}

// testServer is the daemon's server (api with the legacy routes mounted, as
// main wires it) on a real loopback listener.
type testServer struct {
	*api.Server
	Legacy  *Handlers
	M       *runtime.Manager
	URL     string // http://127.0.0.1:port
	BaseDir string
	HTTP    *httptest.Server
}

// newTestServer starts a Manager and a Server for one test. mutate may
// change the runtime config and the options before they are used; the
// legacy handlers get the options' base dir and heartbeat.
func newTestServer(t testing.TB, mutate func(*runtime.Config, *api.Options)) *testServer {
	t.Helper()
	base := t.TempDir()
	cfg := runtime.DefaultConfig()
	cfg.BaseDir = base
	cfg.Env = os.Environ()
	cfg.KillGrace = 500 * time.Millisecond
	opts := api.Options{Version: "test", BaseDir: base}
	if tt, ok := t.(*testing.T); ok {
		cfg.Logger = zaptest.NewLogger(tt)
		opts.Logger = cfg.Logger
	}
	if mutate != nil {
		mutate(&cfg, &opts)
	}
	met := metrics.New(opts.Version)
	cfg.Observer = met
	m, err := runtime.New(cfg, testReaper)
	if err != nil {
		t.Fatal(err)
	}
	met.Watch(m)
	opts.Metrics = met
	lh := New(m, Options{BaseDir: opts.BaseDir, HeartbeatInterval: opts.HeartbeatInterval, Logger: opts.Logger})
	opts.Routes, opts.Features, opts.Refuse = lh.Routes(), []string{Feature}, Refuse
	s := api.New(m, opts)
	hs := httptest.NewUnstartedServer(s.Handler())
	hs.Config.ConnContext = api.ConnContext // as main does
	hs.Config.ConnState = s.ConnState       // as main does: clears a finished answer's write deadline
	hs.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s.SetDraining()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("manager shutdown: %v", err)
		}
		s.EndStreams()
		hs.Close()
		m.Close()
	})
	return &testServer{Server: s, Legacy: lh, M: m, URL: hs.URL, BaseDir: base, HTTP: hs}
}
