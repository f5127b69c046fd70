package runtime

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// TestShutdownDeadlineCutsExecuteRequestPipeGrace: ExecuteRequest (sandboxd's
// Execute) ends through the one supervisor, so Shutdown's kill deadline cuts
// its pipe grace to the floor as it does a managed command's and legacy
// /execute's (supervise.go rules 3-4). The leader ignores SIGTERM and a
// setsid child (out of the group's reach: no cgroups in these tests) holds
// the pipes; with a 20 s kill grace, a loop of its own that waits the full
// grace for the pipes after the SIGKILL makes Shutdown take 20 s.
func TestShutdownDeadlineCutsExecuteRequestPipeGrace(t *testing.T) {
	started := make(chan struct{}, 1)
	m := newManager(t, func(c *Config) {
		c.KillGrace = 20 * time.Second
		c.Observer = legacyObserver{started: started}
	})
	type result struct {
		res ExecOutcome
		err error
	}
	got := make(chan result, 1)
	go func() {
		res, err := m.ExecuteRequest(context.Background(), ExecRequest{
			Argv: []string{"sh", "-c", "trap '' TERM; setsid sleep 60.2468 & echo started; while :; do sleep 1; done"},
		})
		got <- result{res, err}
	}()
	<-started
	escapee := waitSessionLeader(t, "sleep\x0060.2468\x00")
	defer syscall.Kill(escapee, syscall.SIGKILL) // the setsid child we started
	shutdownWithin(t, m, 2*time.Second)
	var r result
	select {
	case r = <-got:
	case <-time.After(25 * time.Second):
		t.Fatal("the execution did not end after Shutdown")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.res.Release()
	if !r.res.Terminated || !r.res.Held || r.res.Cancelled || r.res.TimedOut {
		t.Errorf("outcome %+v; want terminated and held, not cancelled or timed out", r.res)
	}
	if out := string(r.res.Stdout.Bytes()); out != "started\n" {
		t.Errorf("stdout %q; want \"started\\n\"", out)
	}
	if r.res.ExitCode != -int(syscall.SIGKILL) {
		t.Errorf("exit code %d; want %d (SIGKILL after the deadline)", r.res.ExitCode, -int(syscall.SIGKILL))
	}
}
