//go:build linux

package runtime

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// pidGone reports whether pid is no more (or a zombie).
func pidGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// killLater kills pid at the test's end if it is still the process it is
// now (pinned with a pidfd: a reused pid is never hit).
func killLater(t *testing.T, pid int) {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // already gone
	}
	t.Cleanup(func() {
		unix.PidfdSendSignal(pfd, unix.SIGKILL, nil, 0)
		unix.Close(pfd)
	})
}

// F2: a subprocess that left the session holds fd 1/2 after the
// interpreter exits: the execution still ends, the escapee is killed, and
// restart and delete answer at once.
func TestContextEscapeeEnds(t *testing.T) {
	_, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	x, _, err := c.Execute(ExecuteRequest{Code: "import subprocess,os\np=subprocess.Popen(['sleep','77.7'], start_new_session=True)\nprint(p.pid, flush=True)\nos._exit(0)"})
	if err != nil {
		t.Fatal(err)
	}
	var evs []wire.ContextEvent
	within(t, 8*time.Second, "the execution whose interpreter exited", func() { evs = collect(t, x) })
	if end := evs[len(evs)-1]; end.Status != wire.ExecStateLost {
		t.Fatalf("end %+v, want state_lost", end)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(textOf(evs, wire.CtxEventStdout)))
	if err != nil {
		t.Fatalf("no escapee pid in %+v", evs)
	}
	killLater(t, pid)
	deadline := time.Now().Add(3 * time.Second)
	for !pidGone(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !pidGone(pid) {
		t.Fatalf("the escapee %d outlived its context's interpreter", pid)
	}
	// Restart and delete with an escapee alive at the time.
	within(t, 5*time.Second, "restart", func() {
		if _, err := c.Restart(); err != nil {
			t.Errorf("restart: %v", err)
		}
	})
	_, end := run(t, c, "import subprocess\nprint(subprocess.Popen(['sleep','77.8'], start_new_session=True).pid)", 10)
	_ = end
	x2, _ := c.Execution(2)
	pid2, _ := strconv.Atoi(strings.TrimSpace(textOf(collect(t, x2), wire.CtxEventStdout)))
	if pid2 > 0 {
		killLater(t, pid2)
	}
	t0 := time.Now()
	if err := cs.Delete(c.ID()); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Fatalf("delete took %s", d)
	}
	deadline = time.Now().Add(3 * time.Second)
	for pid2 > 0 && !pidGone(pid2) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if pid2 <= 0 || !pidGone(pid2) {
		t.Fatalf("the escapee %d survived DELETE", pid2)
	}
}

// resultText is the text/plain of the result event of evs ("" when none).
func resultText(t *testing.T, evs []wire.ContextEvent) string {
	t.Helper()
	for _, e := range evs {
		if e.Type == "result" {
			var s string
			json.Unmarshal(e.Data["text/plain"], &s)
			return s
		}
	}
	return ""
}

// stateKept runs `state` in c and checks it is still 42.
func stateKept(t *testing.T, c *CodeContext, what string) {
	t.Helper()
	evs, end := run(t, c, "state", 10)
	if end.Status != wire.ExecOK || resultText(t, evs) != "42" {
		t.Fatalf("%s: the state is gone: %+v", what, evs)
	}
}

// F3: an interrupt while large display frames are written keeps the
// framing, so the execution ends interrupted and the state is kept.
func TestContextInterruptMidFrame(t *testing.T) {
	_, cs := newContexts(t, nil)
	for trial := 1; trial <= 4; trial++ {
		c := mustContext(t, cs)
		run(t, c, "state=42\nclass B:\n def _repr_mimebundle_(self, include=None, exclude=None): return {'text/html': 'h'*450000}\nb=B()", 10)
		x, _, err := c.Execute(ExecuteRequest{Code: "while True: display(b)"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := x.e.log.wait(ctx, int64(trial)); err != nil {
			t.Fatal("no display events")
		}
		cancel()
		if _, err := c.Interrupt(); err != nil {
			t.Fatal(err)
		}
		evs := collect(t, x)
		if end := evs[len(evs)-1]; end.Status != wire.ExecInterrupted {
			t.Fatalf("trial %d: end %+v, want interrupted", trial, end)
		}
		stateKept(t, c, "after an interrupt mid-display")
		cs.Delete(c.ID())
	}
}

// F4, F5: an exception with a huge message, a bundle of huge keys: the
// event is bounded, the interpreter lives.
func TestContextHugeErrorAndKeys(t *testing.T) {
	_, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	run(t, c, "state=42", 10)
	evs, end := run(t, c, "raise ValueError('é'*100_000)", 10)
	if end.Status != wire.ExecError {
		t.Fatalf("huge exception: %+v", end)
	}
	var errEv *wire.ContextEvent
	for i := range evs {
		if evs[i].Type == wire.CtxEventError {
			errEv = &evs[i]
		}
	}
	if errEv == nil || errEv.Name != "ValueError" || !strings.Contains(errEv.Value, "truncated") {
		t.Fatalf("huge exception: no bounded error event in %d events", len(evs))
	}
	if n := eventSize(errEv); n > ContextMaxEvent {
		t.Fatalf("error event of %d bytes", n)
	}
	stateKept(t, c, "after a huge exception")
	evs, end = run(t, c, "class K:\n def _repr_mimebundle_(self, include=None, exclude=None): return {('k'*200000)+str(i): 'v' for i in range(8)}\nK()", 10)
	if end.Status != wire.ExecOK || !strings.Contains(resultText(t, evs), "K object") {
		t.Fatalf("bundle of huge keys: %+v", end)
	}
	stateKept(t, c, "after a bundle of huge keys")
}

// F6: NaN in application/json leaves that entry out (named), keeps the
// event; an undecodable frame is never dropped silently.
func TestContextNaNJSON(t *testing.T) {
	_, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	run(t, c, "state=42\nclass J:\n def _repr_json_(self): return {'v': float('nan')}", 10)
	evs, _ := run(t, c, "J()", 10)
	var res *wire.ContextEvent
	for i := range evs {
		if evs[i].Type == "result" {
			res = &evs[i]
		}
	}
	if res == nil || res.Data["text/plain"] == nil {
		t.Fatalf("NaN json: no result with text/plain: %+v", evs)
	}
	if _, ok := res.Omitted["application/json"]; !ok {
		t.Fatalf("NaN json: application/json not named omitted: %+v", res)
	}
	evs, _ = run(t, c, "print('before'); display(J()); print('after')", 10)
	if !slices.ContainsFunc(evs, func(e wire.ContextEvent) bool { return e.Type == "display" }) {
		t.Fatalf("NaN display dropped: %+v", evs)
	}
	// A frame that is no JSON (forged by the code) is reported, not dropped.
	evs, _ = run(t, c, "import os,struct\nos.write(4, struct.pack('>I',3)+b'{x}')", 10)
	if !slices.ContainsFunc(evs, func(e wire.ContextEvent) bool {
		return e.Type == wire.CtxEventStderr && strings.Contains(e.Text, "undecodable")
	}) {
		t.Fatalf("an undecodable frame left no trace: %+v", evs)
	}
}

// F7: a fork in the code does not split the context: the child never
// answers a request.
func TestContextForkDoesNotSplit(t *testing.T) {
	_, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	pid := c.Status().Pid
	run(t, c, "import os, time\nif os.fork() == 0:\n    time.sleep(0.2)", 10)
	for i := 0; i < 6; i++ {
		evs, end := run(t, c, "time.sleep(0.1); os.getpid()", 10)
		if end.Status != wire.ExecOK || resultText(t, evs) != strconv.Itoa(pid) {
			t.Fatalf("execution answered by %q (%+v), want the interpreter %d", resultText(t, evs), end, pid)
		}
	}
}

// F8: an incomplete UTF-8 tail at the end of an execution is its own (as
// U+FFFD), never the next one's.
func TestContextUTF8TailFlushed(t *testing.T) {
	_, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	evs, _ := run(t, c, "import sys; sys.stdout.buffer.write(b'ab\\xc3'); sys.stdout.flush()", 10)
	if got := textOf(evs, wire.CtxEventStdout); got != "ab\uFFFD" {
		t.Fatalf("first stdout %q, want %q", got, "ab\uFFFD")
	}
	evs, _ = run(t, c, "print('x')", 10)
	if got := textOf(evs, wire.CtxEventStdout); got != "x\n" {
		t.Fatalf("second stdout %q, want %q", got, "x\n")
	}
}
