package runtime

import (
	"context"
	"testing"
	"time"
)

// TestZeroConfigGetsDefaults: a Config with only BaseDir set is the documented
// defaults, kill grace included (issue 10 item 7: it used to mean no grace).
func TestZeroConfigGetsDefaults(t *testing.T) {
	m, err := New(Config{BaseDir: t.TempDir()}, testReaper)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	got, want := m.Config(), DefaultConfig()
	if got.KillGrace != want.KillGrace {
		t.Errorf("zero Config: KillGrace %v; want the default %v", got.KillGrace, want.KillGrace)
	}
	if got.MaxRunning != want.MaxRunning || got.MaxRetained != want.MaxRetained || got.OutputLimit != want.OutputLimit ||
		got.OutputRecords != want.OutputRecords || got.ResultTTL != want.ResultTTL || got.DefaultTimeout != want.DefaultTimeout ||
		got.MaxTimeout != want.MaxTimeout || got.StdinLimit != want.StdinLimit || got.Tombstones != want.Tombstones ||
		got.LegacyOutputLimit != want.LegacyOutputLimit {
		t.Errorf("zero Config:\n got %+v\nwant %+v", got, want)
	}
	m2, err := New(Config{BaseDir: t.TempDir(), KillGrace: NoKillGrace}, testReaper)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if g := m2.Config().KillGrace; g != 0 {
		t.Errorf("NoKillGrace: Config().KillGrace %v; want 0", g)
	}
	if _, err := New(Config{BaseDir: t.TempDir(), KillGrace: -time.Second}, testReaper); err == nil {
		t.Error("KillGrace -1s: New succeeded; want a validation error")
	}
}

// TestShutdownDeadlineCutsKillGrace: with a kill grace (20 s) far longer than
// the shutdown budget (2 s), commands that ignore SIGTERM, hold the pipes
// through a background child, or run a legacy execution are still ended as
// terminated inside the budget, and Shutdown returns nil (issue 10 item 7).
func TestShutdownDeadlineCutsKillGrace(t *testing.T) {
	legacyStarted := make(chan struct{}, 1)
	m := newManager(t, func(c *Config) {
		c.KillGrace = 20 * time.Second
		c.Observer = legacyObserver{started: legacyStarted}
	})
	argv, env := helperArgv("ignore-sigterm", "")
	stubborn := mustCreate(t, m, CreateRequest{Argv: argv, Envs: env})
	if l := readLine(t, stubborn); l != "ready" {
		t.Fatalf("helper said %q", l)
	}
	argv, env = helperArgv("background-holds-pipe", "")
	holder := mustCreate(t, m, CreateRequest{Argv: argv, Envs: env})
	if l := readLine(t, holder); l != "parent done" {
		t.Fatalf("helper said %q", l)
	}
	legacy := make(chan ExecResult, 1)
	go func() {
		res, _ := m.Execute([]string{"sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"}, 0)
		legacy <- res
	}()
	<-legacyStarted

	const budget = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	err := m.Shutdown(ctx)
	took := time.Since(start)
	if err != nil {
		t.Errorf("Shutdown with a %v budget and a 20 s kill grace: %v (after %v); want nil", budget, err, took)
	}
	if took > budget {
		t.Errorf("Shutdown took %v; want at most the %v budget", took, budget)
	}
	for _, c := range []*Command{stubborn, holder} {
		select {
		case <-c.Done():
		default:
			t.Fatalf("command %s still running after Shutdown", c.ID())
		}
		if st := c.Status(); st.State != StateTerminated && !(c == holder && st.State == StateExited) {
			t.Errorf("command %s: state %s; want terminated", c.ID(), st.State)
		}
	}
	select {
	case res := <-legacy:
		if !res.Terminated {
			t.Errorf("legacy execution: %+v; want terminated", res)
		}
	case <-time.After(5 * time.Second):
		t.Error("legacy execution did not end after Shutdown")
	}
}

// legacyObserver tells when a legacy execution has been admitted.
type legacyObserver struct {
	nopObserver
	started chan struct{}
}

func (o legacyObserver) LegacyExecuted() { o.started <- struct{}{} }
