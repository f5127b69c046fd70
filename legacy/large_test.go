package legacy

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/api"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// TestLegacyExecuteLargeCommand: a command over runtime.LargeBody, split again once
// it has an execution slot, runs exactly as a small one would, also when
// it had to wait for the only slot.
func TestLegacyExecuteLargeCommand(t *testing.T) {
	ts := newTestServer(t, func(c *runtime.Config, _ *api.Options) { c.MaxExecutions = 1 })
	words := strings.Repeat(" ab", 30000) // 90,000 bytes
	type res struct {
		code int
		out  legacyExecResponse
	}
	first := make(chan res, 1)
	started := filepath.Join(ts.BaseDir, "first-started")
	go func() {
		code, out := legacyExec(t, ts.URL, "sh -c 'touch "+started+"; sleep 0.5; echo first'", nil)
		first <- res{code, out}
	}()
	// The second call should find the only slot taken: wait until the
	// first call's command runs (it holds the slot for its 0.5 s).
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first call's command never ran")
		}
		time.Sleep(5 * time.Millisecond) // polling a file a child writes
	}
	code, out := legacyExec(t, ts.URL, "echo"+words, nil)
	if code != 200 || out.ExitCode != 0 || out.Stdout != strings.TrimPrefix(words, " ")+"\n" {
		t.Errorf("large command: %d exit %d stdout %d bytes %q…; want the words back", code, out.ExitCode, len(out.Stdout), out.Stdout[:min(40, len(out.Stdout))])
	}
	if f := <-first; f.code != 200 || f.out.Stdout != "first\n" {
		t.Errorf("first call: %d %+v", f.code, f.out)
	}
	// A large command that does not split is refused like a small one.
	code, out = legacyExec(t, ts.URL, "echo"+words+" 'unterminated", nil)
	if code != 200 || out.ExitCode != 1 || !strings.Contains(out.Stderr, "Failed to execute command: ") {
		t.Errorf("large unsplittable command: %d %+v", code, out)
	}
	// The only place is free again (given back once each answer was out).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slot, err := ts.M.AdmitExecution(ctx)
	if err != nil {
		t.Fatalf("an execution place was not given back: %v", err)
	}
	slot.Release()
}

// TestLegacyExecuteSpawnFailureCounted: a legacy /execute whose program
// cannot start is a failed start in spawn_failures_total, as a v1 create is.
func TestLegacyExecuteSpawnFailureCounted(t *testing.T) {
	ts := newTestServer(t, nil)
	code, out := legacyExec(t, ts.URL, "no-such-program-for-the-metric", nil)
	if code != 200 || out.ExitCode != 1 {
		t.Fatalf("/execute of a missing program: %d %+v; want 200, exit 1", code, out)
	}
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if want := `sandbox_runtime_spawn_failures_total{class="not_found"} 1`; !strings.Contains(string(body), want) {
		t.Errorf("/metrics after a failed legacy start lacks %s", want)
	}
}
