package runtime

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// TestExecuteSlots: with one slot, a second execution waits until the first
// result is released; one whose context ends while it waits never runs;
// shutdown wakes the waiters.
func TestExecuteSlots(t *testing.T) {
	m := newManager(t, func(c *Config) { c.MaxExecutions = 1 })
	first, err := m.Execute(context.Background(), []string{"sh", "-c", "echo one"}, 10*time.Second)
	if err != nil || string(first.Stdout.Bytes()) != "one\n" {
		t.Fatalf("first: %q %v", first.Stdout.Bytes(), err)
	}
	// The slot is held until Release: a second call waits, and gives up
	// with its context, having run nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	marker := t.TempDir() + "/ran"
	if _, err := m.Execute(ctx, []string{"touch", marker}, 10*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second call with the slot held: %v; want context.DeadlineExceeded", err)
	}
	first.Release()
	first.Release() // idempotent: must not free a slot it no longer holds
	second, err := m.Execute(context.Background(), []string{"sh", "-c", "test ! -e " + marker + " && echo two"}, 10*time.Second)
	if err != nil || string(second.Stdout.Bytes()) != "two\n" {
		t.Fatalf("after release: %q %v (the abandoned call must not have run)", second.Stdout.Bytes(), err)
	}
	// Held again: a waiter is woken by shutdown.
	waited := make(chan error, 1)
	go func() {
		_, err := m.Execute(context.Background(), []string{"true"}, 10*time.Second)
		waited <- err
	}()
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := m.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if !errors.Is(err, ErrShuttingDown) {
			t.Fatalf("waiter at shutdown: %v; want ErrShuttingDown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting execution was not woken by shutdown")
	}
	second.Release()
}

// TestExecuteCaptureChunks: the capture keeps exactly the first
// LegacyOutputLimit bytes, in chunks of at most captureChunkMax, and counts
// the rest.
func TestExecuteCaptureChunks(t *testing.T) {
	const limit = 300 << 10
	m := newManager(t, func(c *Config) { c.LegacyOutputLimit = limit })
	res, err := m.Execute(context.Background(), []string{"sh", "-c", "head -c 1000000 /dev/zero | tr '\\0' a; printf e >&2"}, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	if res.Stdout.Len() != limit || res.StdoutDropped != 1000000-limit {
		t.Fatalf("kept %d, dropped %d; want %d and %d", res.Stdout.Len(), res.StdoutDropped, limit, 1000000-limit)
	}
	if !bytes.Equal(res.Stdout.Bytes(), bytes.Repeat([]byte("a"), limit)) || string(res.Stderr.Bytes()) != "e" {
		t.Fatalf("wrong bytes kept")
	}
	total := 0
	for _, c := range res.Stdout.Chunks() {
		if len(c) == 0 || len(c) > captureChunkMax {
			t.Fatalf("chunk of %d bytes", len(c))
		}
		total += len(c)
	}
	if total != limit {
		t.Fatalf("chunks hold %d bytes; want %d", total, limit)
	}
}

// TestExecutePipeGraceFloor: a legacy execution ended by shutdown reads its
// pipes for at least minPipeDrain after the leader's death, even with
// NoKillGrace (the supervisor's rule 4, the same as a managed command's).
// The command's leader holds a FIFO open; an escapee in its own session
// (process-group mode: out of the group's SIGKILL) prints "late" 30 ms after
// the leader's death closed that FIFO: inside the floor, after a pipe grace
// of zero had stopped reading. The floor is 2 s here, not minPipeDrain's
// 100 ms: on a loaded machine the escapee's 30 ms once became more than
// 100 ms, and the test is of the rule, not of the scheduler.
func TestExecutePipeGraceFloor(t *testing.T) {
	m := newManager(t, func(c *Config) { c.KillGrace = NoKillGrace })
	m.pipeFloor = 2 * time.Second // before any command: nothing reads it yet
	dir := t.TempDir()
	script := `cd "$1" && mkfifo f && { setsid sh -c 'cat f >/dev/null; sleep 0.03; echo late' & } && exec 3>f && touch ready && exec sleep 30`
	type result struct {
		res ExecResult
		err error
	}
	got := make(chan result, 1)
	go func() {
		res, err := m.Execute(context.Background(), []string{"sh", "-c", script, "sh", dir}, 60*time.Second)
		got <- result{res, err}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for _, err := os.Stat(dir + "/ready"); err != nil; _, err = os.Stat(dir + "/ready") {
		if time.Now().After(deadline) {
			t.Fatal("the command did not get ready within 20 s")
		}
		time.Sleep(5 * time.Millisecond) // polling a file the child makes, with a bound
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the execution did not end after shutdown")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.res.Release()
	if !r.res.Terminated || string(r.res.Stdout.Bytes()) != "late\n" {
		t.Fatalf("terminated %v, stdout %q; want true and the escapee's \"late\\n\" (read within the pipe grace's floor)", r.res.Terminated, r.res.Stdout.Bytes())
	}
}
