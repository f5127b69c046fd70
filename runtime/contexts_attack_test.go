package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// within fails the test when f does not return within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %s", what, d)
	}
}

// F1: code that forges a done frame and then blocks leaves its kernel not
// reading fd 3; a large code frame to it must not freeze the other
// contexts nor the table.
func TestContextForgedDoneNoFreeze(t *testing.T) {
	_, cs := newContexts(t, nil)
	a := mustContext(t, cs)
	b := mustContext(t, cs)
	forge := "import os,struct,json,time\nd=json.dumps({'type':'done','status':'ok'}).encode()\nos.write(4, struct.pack('>I',len(d))+d)\ntime.sleep(30)"
	_, end := run(t, a, forge, 60)
	if end.Status != wire.ExecOK {
		t.Fatalf("forged done: %+v", end)
	}
	big := "x = '" + strings.Repeat("a", 200<<10) + "'"
	xc := make(chan *Execution, 1)
	go func() {
		x, _, err := a.Execute(ExecuteRequest{Code: big})
		if err != nil {
			t.Errorf("big Execute: %v", err)
		}
		xc <- x
	}()
	// The big write is under way (or blocked) now; wait until the context
	// says busy, bounded.
	deadline := time.Now().Add(5 * time.Second)
	for cs.statusOf(a) != wire.ContextBusy && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	within(t, 2*time.Second, "List", func() { cs.List() })
	within(t, 2*time.Second, "Get", func() { cs.Get(b.ID()) })
	within(t, 5*time.Second, "an execution on another context", func() { run(t, b, "1+1", 10) })
	within(t, 5*time.Second, "a create", func() { mustContext(t, cs) })
	var x *Execution
	within(t, 15*time.Second, "the big Execute", func() { x = <-xc })
	if x != nil {
		evs := collect(t, x)
		if end := evs[len(evs)-1]; end.Status != wire.ExecStateLost {
			t.Fatalf("big execution on a kernel that does not read: %+v, want state_lost", end)
		}
	}
}

// statusOf is c's state, read without waiting for its lock forever.
func (cs *Contexts) statusOf(c *CodeContext) string {
	if !c.mu.TryLock() {
		return wire.ContextBusy
	}
	defer c.mu.Unlock()
	return c.state
}

// F1: a slow interpreter start holds nobody else's lock.
func TestContextSlowStartNoFreeze(t *testing.T) {
	_, cs := newContexts(t, nil)
	dir := t.TempDir()
	mark := filepath.Join(dir, "started")
	site := "import time\nopen(" + pyQuote(mark) + ",'w').close()\ntime.sleep(4)\n"
	if err := os.WriteFile(filepath.Join(dir, "sitecustomize.py"), []byte(site), 0o644); err != nil {
		t.Fatal(err)
	}
	mustContext(t, cs)
	errc := make(chan error, 1)
	go func() {
		_, _, err := cs.Create(ContextRequest{Envs: map[string]string{"PYTHONPATH": dir}})
		errc <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(mark); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow interpreter never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	within(t, time.Second, "List during a slow start", func() { cs.List() })
	within(t, 2*time.Second, "a create during a slow start", func() { mustContext(t, cs) })
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func pyQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "\\'") + "'" }
