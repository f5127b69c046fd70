package runtime

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
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
		// The setsid child holds the pipes past the leader (it is out of the
		// group's reach: no cgroups in these tests).
		res, err := m.Execute(context.Background(), []string{"sh", "-c", "trap '' TERM; setsid sleep 60.4321 & while :; do sleep 1; done"}, 0)
		if err == nil {
			res.Release()
		}
		legacy <- res
	}()
	<-legacyStarted
	// Wait until the legacy command's setsid child runs (its own session).
	escapee := waitSessionLeader(t, "sleep\x0060.4321\x00")
	defer syscall.Kill(escapee, syscall.SIGKILL) // the setsid child we started
	shutdownWithin(t, m, 2*time.Second)
	for _, c := range []*Command{stubborn, holder} {
		select {
		case <-c.Done():
		default:
			t.Fatalf("command %s still running after Shutdown", c.ID())
		}
		if st := c.Status(); st.State != StateTerminated.Wire() && !(c == holder && st.State == StateExited.Wire()) {
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

// waitSessionLeader waits (20 s at most) for a process with this cmdline
// that leads its own session and returns its pid.
func waitSessionLeader(t *testing.T, cmdline string) int {
	t.Helper()
	var pid int
	if !eventually(20*time.Second, func() bool {
		pid = findSessionLeader(cmdline)
		return pid != 0
	}) {
		t.Fatalf("no session leader %q started", cmdline)
	}
	return pid
}

// shutdownWithin shuts m down with budget and checks it returned nil in
// about that time (the tests that use it have a 20 s kill grace).
func shutdownWithin(t *testing.T, m *Manager, budget time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	err := m.Shutdown(ctx)
	took := time.Since(start)
	if err != nil {
		t.Errorf("Shutdown with a %v budget and a 20 s kill grace: %v (after %v); want nil", budget, err, took)
	}
	if took > budget+time.Second { // slack for a loaded machine; the grace is 20 s
		t.Errorf("Shutdown took %v; want about the %v budget", took, budget)
	}
}

// legacyObserver tells when a legacy execution has been admitted.
type legacyObserver struct {
	nopObserver
	started chan struct{}
}

func (o legacyObserver) LegacyExecuted() { o.started <- struct{}{} }

// findSessionLeader returns the pid of a process with exactly this
// /proc/PID/cmdline that leads its own session, or 0.
func findSessionLeader(cmdline string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || string(b) != cmdline {
			continue
		}
		// /proc/PID/stat: "pid (comm) state ppid pgrp session ..."
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(f) > 3 && f[3] == e.Name() {
			return pid
		}
	}
	return 0
}

// TestShutdownWaitsForStdinWriter: the goroutine that feeds a command's stdin
// counts in the Manager's wait group, so Shutdown cannot report "all done"
// while it still runs. The writer is held at its exit (a test hook); a
// Shutdown with a short budget must then time out instead of returning nil.
// Without the writer in the wait group it returns nil (the owner goroutine
// has finished), and this test fails.
func TestShutdownWaitsForStdinWriter(t *testing.T) {
	m := newManager(t, nil)
	held, release := make(chan struct{}), make(chan struct{})
	const marker = "exit 0 # TestShutdownWaitsForStdinWriter"
	hook := func(c *Command) {
		if len(c.spec.argv) == 3 && c.spec.argv[2] == marker {
			close(held)
			<-release
		}
	}
	testHookStdinWriterExit.Store(&hook)
	defer testHookStdinWriterExit.Store(nil)
	if _, _, err := m.Create(CreateRequest{Argv: []string{"sh", "-c", marker}, Stdin: true}); err != nil {
		t.Fatal(err)
	}
	<-held // the command finished and its writer is at its exit
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err := m.Shutdown(ctx)
	cancel()
	if err == nil {
		close(release)
		t.Fatal("Shutdown returned nil while the stdin writer of a command was still running")
	}
	close(release)
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown after the writer left: %v", err)
	}
}
