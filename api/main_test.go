package api

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/legacy"
	"github.com/sandbox-runtime/sandbox-runtime/metrics"
	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// testReaper is the one reaper of this test binary (a process has at most one).
var testReaper *procgroup.Reaper

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperWriteSpec); spec != "" { // a child of a test: see runWriteSpec
		os.Exit(runWriteSpec(spec))
	}
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

// testServer is a Server on a real loopback listener.
type testServer struct {
	*Server
	M       *runtime.Manager
	URL     string // http://127.0.0.1:port
	BaseDir string
	HTTP    *httptest.Server
}

// newTestServer starts a Manager and Server for one test. mutate may change
// the runtime config and the options before they are used.
func newTestServer(t testing.TB, mutate func(*runtime.Config, *Options)) *testServer {
	t.Helper()
	base := t.TempDir()
	cfg := runtime.DefaultConfig()
	cfg.BaseDir = base
	cfg.Env = os.Environ()
	cfg.KillGrace = 500 * time.Millisecond
	opts := Options{Version: "test", BaseDir: base}
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
	// The legacy routes, mounted as main does: the spec and middleware
	// tests cover the whole server.
	lh := legacy.New(m, legacy.Options{BaseDir: opts.BaseDir, HeartbeatInterval: opts.HeartbeatInterval, Logger: opts.Logger})
	opts.Routes, opts.Features, opts.Refuse = lh.Routes(), []string{legacy.Feature}, legacy.Refuse
	s := New(m, opts)
	hs := httptest.NewUnstartedServer(s.Handler())
	hs.Listener = httpx.BoundWrites(hs.Listener) // as main does
	hs.Config.ConnContext = ConnContext          // as main does
	hs.Config.ConnState = s.ConnState            // as main does (clears a finished stream's write deadline)
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
	return &testServer{Server: s, M: m, URL: hs.URL, BaseDir: base, HTTP: hs}
}
