package runtime

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAdmissionRules pins each class's rule (admission.go) and that the
// classes do not take each other's places: with every managed command
// place taken, an execution still runs; with every execution place taken,
// a command still starts; the refusal of a command beyond its limit is
// exactly ErrTooManyRunning with the message the 429 carries, and an
// idempotent re-post at the limit is not refused.
func TestAdmissionRules(t *testing.T) {
	m := newManager(t, func(c *Config) { c.MaxRunning = 2; c.MaxRetained = 3; c.MaxExecutions = 1 })
	a := mustCreate(t, m, helper("hang", ""))
	mustCreate(t, m, helper("hang", ""))

	_, _, err := m.Create(helper("exit", "0"))
	if !errors.Is(err, ErrTooManyRunning) || err.Error() != "2 managed commands are running (limit 2)" {
		t.Fatalf("third create: %v; want ErrTooManyRunning %q", err, "2 managed commands are running (limit 2)")
	}
	if running, retained := m.Counts(); running != 2 || retained != 2 {
		t.Fatalf("after a refusal: running %d, retained %d; want 2, 2", running, retained)
	}
	// An idempotent re-post at the limit answers the command it names.
	r := helper("hang", "")
	r.CommandID = "7d8c1a52-3a7e-4f1e-9d6b-0c1f2e3a4b5c"
	a.Kill(context.Background())
	<-a.Done()
	if st, created, err := m.Create(r); err != nil || !created {
		t.Fatalf("create with a freed place: %v %v", err, created)
	} else if st2, created, err := m.Create(r); err != nil || created || st2.CommandID != st.CommandID {
		t.Fatalf("re-post at the limit: %v created=%v; want the same command", err, created)
	}

	// Every command place is taken: an execution still runs.
	res, err := m.Execute(context.Background(), []string{"sh", "-c", "echo ran"}, 10*time.Second)
	if err != nil || string(res.Stdout.Bytes()) != "ran\n" {
		t.Fatalf("execution with every command place taken: %q %v", res.Stdout.Bytes(), err)
	}
	// Its place is held until Release: a second execution waits, until
	// its context ends, having run nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := m.AdmitExecution(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second execution with the only place held: %v; want context.DeadlineExceeded", err)
	}
	res.Release()

	// Every execution place is taken: a command still starts.
	slot, err := m.AdmitExecution(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if running, _ := m.Counts(); running != 2 {
		t.Fatalf("running %d; want 2", running)
	}
	// …and once the running commands end, creates are admitted again.
	for _, c := range m.List(nil) {
		if cmd, err := m.Get(c.CommandID); err == nil {
			cmd.Kill(context.Background())
			<-cmd.Done()
		}
	}
	if _, _, err := m.Create(helper("exit", "0")); err != nil {
		t.Fatalf("create with every execution place taken: %v", err)
	}
	// A used or released slot runs nothing.
	if _, err := m.ExecuteIn(slot, []string{"true"}, time.Second); err != nil {
		t.Fatal(err)
	} else if _, err := m.ExecuteIn(slot, []string{"true"}, time.Second); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a used slot: %v; want ErrInvalid", err)
	}
}

// TestExecuteInGivesThePlaceBack: an execution that cannot start (empty
// argv, a missing program) gives its place back; so does an ExecSlot
// released unused.
func TestExecuteInGivesThePlaceBack(t *testing.T) {
	m := newManager(t, func(c *Config) { c.MaxExecutions = 1 })
	for _, argv := range [][]string{nil, {"/no/such/program"}} {
		slot, err := m.AdmitExecution(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.ExecuteIn(slot, argv, time.Second); err == nil {
			t.Fatalf("ExecuteIn(%q) succeeded", argv)
		}
		if n := m.adm.held(ClassExecution); n != 0 {
			t.Fatalf("after a failed ExecuteIn(%q): %d places held", argv, n)
		}
	}
	slot, err := m.AdmitExecution(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slot.Release()
	slot.Release()
	if n := m.adm.held(ClassExecution); n != 0 {
		t.Fatalf("after Release: %d places held", n)
	}
}

// TestDecodeTurns: at most maxLargeDecodes bodies over LargeBody hold a
// turn; the next waits until one is given back or its context ends
// (ErrClientGone); bodies of LargeBody bytes or less never wait. The turns
// are the Manager's: another Manager's decodes do not count (before, one
// process-wide gate, httpx.bigDecodes, was shared by every server, and
// one test's decodes held another's).
func TestDecodeTurns(t *testing.T) {
	m := newManager(t, nil)
	other := newManager(t, nil)
	ctx := context.Background()
	var leaves []func()
	for range maxLargeDecodes {
		leave, err := m.EnterDecode(ctx, LargeBody+1)
		if err != nil {
			t.Fatal(err)
		}
		leaves = append(leaves, leave)
	}
	small, err := m.EnterDecode(ctx, LargeBody)
	if err != nil {
		t.Fatalf("a body of %d bytes waited: %v", LargeBody, err)
	}
	small()
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := m.EnterDecode(tctx, LargeBody+1); !errors.Is(err, ErrClientGone) {
		t.Fatalf("a %d-th large decode: %v; want ErrClientGone", maxLargeDecodes+1, err)
	}
	// Another Manager's turns are its own: free while m's are all held.
	octx, ocancel := context.WithTimeout(ctx, 10*time.Second)
	defer ocancel()
	oleave, err := other.EnterDecode(octx, 1<<20)
	if err != nil {
		t.Fatalf("another Manager's large decode waited for this one's turns: %v", err)
	}
	oleave()
	// Shutdown does not end a decode's wait (it starts no work; its
	// client decides), and a given-back turn wakes the waiter.
	got := make(chan error, 1)
	go func() {
		leave, err := m.EnterDecode(ctx, 1<<20)
		if err == nil {
			leave()
		}
		got <- err
	}()
	leaves[0]()
	leaves[0]() // idempotent: must not free a turn it no longer holds
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a given-back turn did not wake the waiter")
	}
	if n := m.adm.held(ClassDecode); n != maxLargeDecodes-1 {
		t.Fatalf("%d turns held; want %d (a double leave freed one)", n, maxLargeDecodes-1)
	}
	for _, l := range leaves[1:] {
		l()
	}
}

// TestExecutionWaitEndsAtShutdown: an execution waiting for a place is
// ended by Shutdown with ErrShuttingDown, and one admitted after shutdown
// began is refused at once.
func TestExecutionWaitEndsAtShutdown(t *testing.T) {
	m := newManager(t, func(c *Config) { c.MaxExecutions = 1 })
	slot, err := m.AdmitExecution(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer slot.Release()
	waited := make(chan error, 1)
	go func() {
		_, err := m.AdmitExecution(context.Background())
		waited <- err
	}()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if !errors.Is(err, ErrShuttingDown) {
			t.Fatalf("waiter at shutdown: %v; want ErrShuttingDown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown did not end the wait")
	}
	slot.Release()
	if _, err := m.AdmitExecution(context.Background()); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("admission after shutdown with a free place: %v; want ErrShuttingDown", err)
	}
}

// TestAdmissionTableIsComplete: every class has a row that can be
// followed (a name, a limit of at least one place with the default
// configuration, a refusal exactly when it refuses), so that a class added
// without its rule fails here rather than at its first full moment.
func TestAdmissionTableIsComplete(t *testing.T) {
	cfg := DefaultConfig().withDefaults()
	names := map[string]bool{}
	for c := range numClasses {
		r := rules[c]
		switch {
		case r.name == "" || names[r.name]:
			t.Errorf("class %d: name %q is empty or not unique", c, r.name)
		case r.limit == nil || r.limit(cfg) < 1:
			t.Errorf("%s: no limit of at least 1 place", r.name)
		case (r.full == refuse) != (r.refusal != nil):
			t.Errorf("%s: a refusal must be given exactly when a full class refuses", r.name)
		case r.full == refuse && (r.shutdownEnds || r.gone != nil):
			t.Errorf("%s: a refusing class never waits; shutdownEnds and gone are for waits", r.name)
		}
		names[r.name] = true
		if c.String() != r.name {
			t.Errorf("class %d: String %q; want %q", c, c.String(), r.name)
		}
	}
	// Create takes its place while it holds the table's lock: a managed
	// command must be refused, never wait.
	if rules[ClassCommand].full != refuse {
		t.Errorf("%s: must refuse when full (Create holds Manager.mu while it admits)", ClassCommand)
	}
	// The documented numbers (protocol.md §2 Admission of work).
	for c, want := range map[Class]int{ClassCommand: 16, ClassExecution: 8, ClassDecode: 4, ClassContext: 8} {
		if got := rules[c].limit(cfg); got != want {
			t.Errorf("%s: %d places by default; protocol.md says %d", c, got, want)
		}
	}
}
