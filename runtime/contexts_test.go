package runtime

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// testPython is the interpreter of the context tests: SANDBOX_TEST_PYTHON,
// else Debian's /usr/bin/python3 (where .ci/run installs matplotlib and
// pandas), else python3 on the PATH.
func testPython(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("SANDBOX_TEST_PYTHON"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("machine precondition: no python3 on this machine")
	}
	return p
}

// pyHas reports whether the test interpreter imports mod.
func pyHas(t testing.TB, mod string) bool {
	return exec.Command(testPython(t), "-c", "import "+mod).Run() == nil
}

func newContexts(t testing.TB, mutate func(*Config)) (*Manager, *Contexts) {
	t.Helper()
	py := testPython(t)
	m := newManager(t, func(c *Config) {
		c.Python = py
		// The daemon's own settings must make the output live, whatever
		// the environment of the tests says.
		c.Env = slices.DeleteFunc(slices.Clone(c.Env), func(kv string) bool { return strings.HasPrefix(kv, "PYTHONUNBUFFERED=") })
		if mutate != nil {
			mutate(c)
		}
	})
	return m, m.Contexts()
}

func mustContext(t testing.TB, cs *Contexts) *CodeContext {
	t.Helper()
	st, created, err := cs.Create(ContextRequest{})
	if err != nil || !created {
		t.Fatalf("Create: %v (created %v)", err, created)
	}
	c, err := cs.Get(st.ContextID)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// collect reads x's events until its end event (bounded).
func collect(t testing.TB, x *Execution) []wire.ContextEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []wire.ContextEvent
	cursor := int64(0)
	for {
		evs, next, done, _ := x.Read(cursor)
		out = append(out, evs...)
		cursor = next
		if done {
			return out
		}
		if err := x.e.log.wait(ctx, cursor); err != nil {
			t.Fatalf("execution %d: no end within 30 s; events so far: %+v", x.N(), out)
		}
	}
}

func run(t testing.TB, c *CodeContext, code string, timeout float64) (evs []wire.ContextEvent, end wire.ContextEvent) {
	t.Helper()
	r := ExecuteRequest{Code: code}
	if timeout > 0 {
		r.Timeout = &timeout
	}
	x, _, err := c.Execute(r)
	if err != nil {
		t.Fatalf("Execute(%q): %v", code, err)
	}
	evs = collect(t, x)
	last := evs[len(evs)-1]
	if last.Type != wire.CtxEventEnd {
		t.Fatalf("last event %+v, want end", last)
	}
	return evs, last
}

func textOf(evs []wire.ContextEvent, typ string) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type == typ {
			b.WriteString(e.Text)
		}
	}
	return b.String()
}

func resultOf(t testing.TB, evs []wire.ContextEvent, typ string) map[string]json.RawMessage {
	t.Helper()
	for _, e := range evs {
		if e.Type == typ {
			return e.Data
		}
	}
	t.Fatalf("no %s event in %+v", typ, evs)
	return nil
}

func plain(t testing.TB, d map[string]json.RawMessage) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(d["text/plain"], &s); err != nil {
		t.Fatalf("text/plain of %v: %v", d, err)
	}
	return s
}

func TestContextStateAcrossExecutions(t *testing.T) {
	_, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	_, end := run(t, c, "x = 20", 0)
	if end.Status != wire.ExecOK {
		t.Fatalf("end %+v", end)
	}
	run(t, c, "x += 1\ndef f(v): return v * 2", 0)
	evs, end := run(t, c, "f(x)", 0)
	if got := plain(t, resultOf(t, evs, wire.CtxEventResult)); got != "42" || end.Status != wire.ExecOK {
		t.Fatalf("result %q, end %+v; want 42 ok", got, end)
	}
}

func TestContextOSLevelOutput(t *testing.T) {
	_, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	evs, _ := run(t, c, "import os, sys\nprint('py')\nos.system('echo hi; echo oops >&2')\nos.write(2, b'raw\\n')\n'last'", 0)
	if out := textOf(evs, wire.CtxEventStdout); out != "py\nhi\n" {
		t.Errorf("stdout %q, want py\\nhi\\n", out)
	}
	if errs := textOf(evs, wire.CtxEventStderr); errs != "oops\nraw\n" {
		t.Errorf("stderr %q", errs)
	}
	// Output written before the result comes before it.
	var order []string
	for _, e := range evs {
		order = append(order, e.Type)
	}
	if i, j := strings.Index(strings.Join(order, ","), "stdout"), strings.Index(strings.Join(order, ","), "result"); i < 0 || j < i {
		t.Errorf("event order %v: stdout must come before result", order)
	}
	// A large output: the pipe still holds its last part when the result
	// event arrives; that part must come before the result all the same.
	for i := range 20 {
		evs, _ = run(t, c, "import sys\nfor _ in range(50): sys.stdout.write('x' * 9999 + '\\n')\nos.system('echo tail')\nos.write(1, b'y' * 60000)\n'last'", 0)
		var out strings.Builder
		for _, e := range evs {
			if e.Type == wire.CtxEventResult {
				break
			}
			out.WriteString(e.Text)
		}
		if want := 50*10000 + 5 + 60000; out.Len() != want || !strings.HasSuffix(out.String(), "tail\n"+strings.Repeat("y", 60000)) {
			t.Fatalf("round %d: %d bytes of stdout before the result, want %d", i, out.Len(), want)
		}
	}
}

func TestContextPrintBeforeEnd(t *testing.T) {
	_, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	x, _, err := c.Execute(ExecuteRequest{Code: "import time\nfor i in range(3):\n    print('line', i)\n    time.sleep(1)"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Unbuffered, print writes "line", " 0" and "\n" apart: the first line
	// may come in several events, all before the end (2 s later).
	var text string
	cursor := int64(0)
	for !strings.Contains(text, "line 0\n") {
		if err := x.e.log.wait(ctx, cursor); err != nil {
			t.Fatalf("no first line within 10 s (%q so far)", text)
		}
		evs, next, done, _ := x.Read(cursor)
		for _, e := range evs {
			if e.Type != wire.CtxEventStdout {
				t.Fatalf("event %+v before the first line", e)
			}
			text += e.Text
		}
		if done {
			t.Fatalf("the execution ended before its first line was read: %q", text)
		}
		cursor = next
	}
	if text != "line 0\n" || x.Status().Status != wire.ExecRunning {
		t.Fatalf("first output %q, status %s: want line 0 while running", text, x.Status().Status)
	}
	collect(t, x)
}

func TestContextErrorKeepsState(t *testing.T) {
	_, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	run(t, c, "y = 7", 0)
	evs, end := run(t, c, "def g():\n    return 1/0\ng()", 0)
	if end.Status != wire.ExecError {
		t.Fatalf("end %+v", end)
	}
	var e wire.ContextEvent
	for _, ev := range evs {
		if ev.Type == wire.CtxEventError {
			e = ev
		}
	}
	tb := strings.Join(e.Traceback, "")
	if e.Name != "ZeroDivisionError" || e.Value != "division by zero" || !strings.Contains(tb, "in g") || strings.Contains(tb, "kernel") {
		t.Fatalf("error %+v", e)
	}
	evs, _ = run(t, c, "y", 0)
	if got := plain(t, resultOf(t, evs, wire.CtxEventResult)); got != "7" {
		t.Fatalf("y = %q after the error, want 7", got)
	}
}

func TestContextInputRefused(t *testing.T) {
	_, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	evs, end := run(t, c, "input('name? ')", 5)
	if end.Status != wire.ExecError {
		t.Fatalf("end %+v", end)
	}
	for _, e := range evs {
		if e.Type == wire.CtxEventError {
			if e.Name != "RuntimeError" || !strings.Contains(e.Value, "input() is not available") {
				t.Fatalf("error %+v", e)
			}
			return
		}
	}
	t.Fatalf("no error event: %+v", evs)
}

// waitRunning waits for the first stdout event of x (the code signals it
// is inside the part to interrupt).
func waitFirst(t testing.TB, x *Execution) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := x.e.log.wait(ctx, 0); err != nil {
		t.Fatal("no first event within 10 s")
	}
}

func TestContextInterruptKeepsState(t *testing.T) {
	_, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	run(t, c, "z = 5", 0)
	x, _, err := c.Execute(ExecuteRequest{Code: "import time\nprint('sleeping')\ntime.sleep(60)"})
	if err != nil {
		t.Fatal(err)
	}
	waitFirst(t, x)
	if _, err := c.Interrupt(); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, x)
	if end := evs[len(evs)-1]; end.Status != wire.ExecInterrupted {
		t.Fatalf("end %+v", end)
	}
	evs, _ = run(t, c, "z", 0)
	if got := plain(t, resultOf(t, evs, wire.CtxEventResult)); got != "5" {
		t.Fatalf("z = %q after interrupt, want 5", got)
	}
	if _, err := c.Interrupt(); !errors.Is(err, ErrConflict) {
		t.Fatalf("Interrupt of an idle context: %v, want ErrConflict", err)
	}
}

func TestContextTimeoutInterruptible(t *testing.T) {
	_, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	run(t, c, "w = 3", 0)
	_, end := run(t, c, "import time\ntime.sleep(60)", 0.5)
	if end.Status != wire.ExecTimedOut {
		t.Fatalf("end %+v", end)
	}
	if st := c.Status(); st.State != wire.ContextReady {
		t.Fatalf("context %+v: a code that returned after SIGINT keeps its state", st)
	}
	evs, _ := run(t, c, "w", 0)
	if got := plain(t, resultOf(t, evs, wire.CtxEventResult)); got != "3" {
		t.Fatalf("w = %q", got)
	}
}

func TestContextTimeoutStateLost(t *testing.T) {
	_, cs := newContexts(t, func(c *Config) { c.KillGrace = 300 * time.Millisecond })
	c := mustContext(t, cs)
	run(t, c, "v = 1", 0)
	pid := c.Status().Pid
	code := "import time\nprint('in', flush=True)\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass"
	evs, end := run(t, c, code, 0.5)
	if end.Status != wire.ExecTimedOut || !strings.Contains(end.Reason, "SIGINT") {
		t.Fatalf("end %+v", end)
	}
	if textOf(evs, wire.CtxEventStdout) != "in\n" {
		t.Errorf("stdout %q", textOf(evs, wire.CtxEventStdout))
	}
	st := c.Status()
	if st.State != wire.ContextStateLost || st.StateLost == nil || !strings.Contains(st.StateLost.Reason, "timeout") || st.Pid != 0 {
		t.Fatalf("context %+v", st)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("interpreter %d still alive", pid)
	}
	_, _, err := c.Execute(ExecuteRequest{Code: "v"})
	if !errors.Is(err, ErrStateLost) || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("Execute on a lost context: %v, want ErrStateLost", err)
	}
	if _, err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	evs, end = run(t, c, "v", 0)
	if end.Status != wire.ExecError || evs[0].Name != "NameError" {
		t.Fatalf("v after restart: %+v", evs)
	}
	if st := c.Status(); st.Restarts != 1 || st.State != wire.ContextReady {
		t.Fatalf("after restart %+v", st)
	}
}

func TestContextInterpreterDeath(t *testing.T) {
	_, cs := newContexts(t, nil)
	for _, tc := range []struct{ code, reason string }{
		{"import os\nos._exit(3)", "exited with code 3"},
		{"import ctypes\nctypes.string_at(0)", "killed by signal 11"},
		{"import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "killed by signal 9"},
	} {
		c := mustContext(t, cs)
		_, end := run(t, c, tc.code, 0)
		if end.Status != wire.ExecStateLost || !strings.Contains(end.Reason, tc.reason) {
			t.Errorf("%q: end %+v, want state_lost with %q", tc.code, end, tc.reason)
		}
		st := c.Status()
		if st.State != wire.ContextStateLost || !strings.Contains(st.StateLost.Reason, tc.reason) {
			t.Errorf("%q: context %+v", tc.code, st)
		}
		if _, _, err := c.Execute(ExecuteRequest{Code: "1"}); !errors.Is(err, ErrStateLost) {
			t.Errorf("%q: next Execute %v", tc.code, err)
		}
		if err := cs.Delete(c.ID()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestContextRichOutputs(t *testing.T) {
	_, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	evs, _ := run(t, c, "class H:\n    def _repr_html_(self): return '<b>h</b>'\n    def _repr_markdown_(self): return '**h**'\n    def __repr__(self): return 'H()'\nH()", 0)
	d := resultOf(t, evs, wire.CtxEventResult)
	if plain(t, d) != "H()" || string(d["text/html"]) != `"<b>h</b>"` || string(d["text/markdown"]) != `"**h**"` {
		t.Fatalf("bundle %v", d)
	}
	evs, _ = run(t, c, "class J:\n    def _repr_mimebundle_(self, include=None, exclude=None): return {'application/json': {'a': 1}}\ndisplay(J(), 'two')", 0)
	var n int
	for _, e := range evs {
		if e.Type == wire.CtxEventDisplay {
			n++
			if n == 1 && string(e.Data["application/json"]) != `{"a":1}` && string(e.Data["application/json"]) != `{"a": 1}` {
				t.Fatalf("display %v", e.Data)
			}
		}
	}
	if n != 2 {
		t.Fatalf("%d display events, want 2: %+v", n, evs)
	}
	if pyHas(t, "pandas") {
		evs, _ = run(t, c, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})", 0)
		d := resultOf(t, evs, wire.CtxEventResult)
		var html string
		json.Unmarshal(d["text/html"], &html)
		if !strings.Contains(html, "<table") || !strings.Contains(plain(t, d), "a  b") {
			t.Fatalf("DataFrame bundle %v", d)
		}
	} else if os.Getenv("CI") != "" {
		t.Error("CI: the test python has no pandas (.ci/run installs python3-pandas)")
	}
	if pyHas(t, "matplotlib") {
		evs, _ = run(t, c, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()", 0)
		var pngs int
		for _, e := range evs {
			if e.Type == wire.CtxEventDisplay && e.Data["image/png"] != nil {
				var b64 string
				json.Unmarshal(e.Data["image/png"], &b64)
				raw, err := base64.StdEncoding.DecodeString(b64)
				if err != nil {
					t.Fatal(err)
				}
				img, err := png.Decode(bytes.NewReader(raw))
				if err != nil || img.Bounds().Dx() < 100 {
					t.Fatalf("PNG: %v %v", err, img)
				}
				pngs++
			}
		}
		if pngs != 1 || textOf(evs, wire.CtxEventStderr) != "" {
			t.Fatalf("%d PNGs (want 1), stderr %q", pngs, textOf(evs, wire.CtxEventStderr))
		}
	} else if os.Getenv("CI") != "" {
		t.Error("CI: the test python has no matplotlib (.ci/run installs python3-matplotlib)")
	}
}

func TestContextLargeBundle(t *testing.T) {
	_, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	evs, _ := run(t, c, "class Big:\n    def _repr_png_(self): return b'\\x89PNG' + b'\\0' * 2000000\n    def __repr__(self): return 'Big()'\nBig()", 0)
	for _, e := range evs {
		if e.Type == wire.CtxEventResult {
			if e.Data["image/png"] != nil || e.Omitted["image/png"] < 2000000 || plain(t, e.Data) != "Big()" {
				t.Fatalf("bundle keys %v omitted %v", len(e.Data), e.Omitted)
			}
			return
		}
	}
	t.Fatalf("no result: %+v", evs)
}

func TestContextsIsolated(t *testing.T) {
	_, cs := newContexts(t, nil)
	a, b := mustContext(t, cs), mustContext(t, cs)
	run(t, a, "secret = 'a'", 0)
	evs, end := run(t, b, "secret", 0)
	if end.Status != wire.ExecError || evs[0].Name != "NameError" {
		t.Fatalf("b sees a's variable: %+v", evs)
	}
	if a.Status().Pid == b.Status().Pid {
		t.Fatal("two contexts share an interpreter")
	}
}

func TestContextExecutionIDOnce(t *testing.T) {
	_, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	run(t, c, "n = 0", 0)
	r := ExecuteRequest{Code: "n += 1\nn", ExecutionID: "retry-1"}
	x1, created, err := c.Execute(r)
	if err != nil || !created {
		t.Fatal(err)
	}
	x2, created, err := c.Execute(r) // while it runs or after: the same one
	if err != nil || created || x2.N() != x1.N() {
		t.Fatalf("retry: %v created %v n %d/%d", err, created, x2.N(), x1.N())
	}
	collect(t, x1)
	if _, created, _ := c.Execute(r); created {
		t.Fatal("a retry after the end ran again")
	}
	evs, _ := run(t, c, "n", 0)
	if got := plain(t, resultOf(t, evs, wire.CtxEventResult)); got != "1" {
		t.Fatalf("n = %s: the code ran twice", got)
	}
	if _, _, err := c.Execute(ExecuteRequest{Code: "other", ExecutionID: "retry-1"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("same id, other code: %v", err)
	}
}

func TestContextBusy(t *testing.T) {
	_, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	x, _, err := c.Execute(ExecuteRequest{Code: "import time\nprint(1)\ntime.sleep(30)"})
	if err != nil {
		t.Fatal(err)
	}
	waitFirst(t, x)
	if _, _, err := c.Execute(ExecuteRequest{Code: "1"}); !errors.Is(err, ErrBusy) {
		t.Fatalf("second execution: %v, want ErrBusy", err)
	}
	c.Interrupt()
	collect(t, x)
}

func TestContextLimitAndExpiry(t *testing.T) {
	clock := newFakeClock()
	_, cs := newContexts(t, func(c *Config) { c.MaxContexts = 2; c.Clock = clock; c.ContextIdle = time.Minute })
	a := mustContext(t, cs)
	b := mustContext(t, cs)
	if _, _, err := cs.Create(ContextRequest{}); !errors.Is(err, ErrTooManyContexts) {
		t.Fatalf("third context: %v, want ErrTooManyContexts", err)
	}
	pid := a.Status().Pid
	clock.Advance(30 * time.Second)
	run(t, b, "1", 0) // b is used: its idle time starts again
	clock.Advance(31 * time.Second)
	if _, err := cs.Get(a.ID()); !errors.Is(err, ErrGone) {
		t.Fatalf("expired context: %v, want ErrGone", err)
	}
	if _, err := cs.Get(b.ID()); err != nil {
		t.Fatalf("b expired too early: %v", err)
	}
	if !eventually(10*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }) {
		t.Fatalf("the expired context's interpreter %d is alive", pid)
	}
	if _, _, err := cs.Create(ContextRequest{ContextID: a.ID()}); !errors.Is(err, ErrGone) {
		t.Fatalf("re-create of an expired id: %v, want ErrGone (never a fresh context)", err)
	}
	if !eventually(10*time.Second, func() bool { return cs.Count() == 1 }) {
		t.Fatalf("%d places held after the expiry", cs.Count())
	}
	if _, _, err := cs.Create(ContextRequest{}); err != nil {
		t.Fatalf("a context after the expiry freed a place: %v", err)
	}
}

func TestContextIdempotentCreate(t *testing.T) {
	_, cs := newContexts(t, nil)
	id := "8a1f7c52-8a55-4c8e-9d57-8a8d6c8e0f01"
	st, created, err := cs.Create(ContextRequest{ContextID: id})
	if err != nil || !created {
		t.Fatal(err)
	}
	st2, created, err := cs.Create(ContextRequest{ContextID: id})
	if err != nil || created || st2.Pid != st.Pid {
		t.Fatalf("re-post: %v %v %+v", err, created, st2)
	}
	if _, _, err := cs.Create(ContextRequest{ContextID: id, Envs: map[string]string{"A": "1"}}); !errors.Is(err, ErrConflict) {
		t.Fatalf("same id, other request: %v", err)
	}
	if err := cs.Delete(id); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cs.Create(ContextRequest{ContextID: id}); !errors.Is(err, ErrGone) {
		t.Fatalf("re-create of a deleted id: %v", err)
	}
}

// children lists the live children of this process (not zombies).
func children(t testing.TB) []int {
	t.Helper()
	self := strconv.Itoa(os.Getpid())
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 1 && f[1] == self {
			pid, _ := strconv.Atoi(strings.Split(d, "/")[2])
			out = append(out, pid)
		}
	}
	return out
}

func TestContextCyclesLeaveNothing(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 20
	}
	_, cs := newContexts(t, nil)
	warm := mustContext(t, cs) // the first start's one-time costs
	run(t, warm, "1+1", 0)
	if err := cs.Delete(warm.ID()); err != nil {
		t.Fatal(err)
	}
	fds, gor, kids := fdCount(t), goruntime.NumGoroutine(), len(children(t))
	for i := range n {
		c := mustContext(t, cs)
		evs, _ := run(t, c, "import os\nos.system('true')\n1+1", 0)
		if got := plain(t, resultOf(t, evs, wire.CtxEventResult)); got != "2" {
			t.Fatalf("cycle %d: %q", i, got)
		}
		if err := cs.Delete(c.ID()); err != nil {
			t.Fatal(err)
		}
	}
	if !eventually(10*time.Second, func() bool {
		return fdCount(t) <= fds && goruntime.NumGoroutine() <= gor+2 && len(children(t)) <= kids
	}) {
		t.Fatalf("after %d cycles: fds %d (before %d), goroutines %d (before %d), children %v (before %d)",
			n, fdCount(t), fds, goruntime.NumGoroutine(), gor, children(t), kids)
	}
	if cs.Count() != 0 {
		t.Fatalf("%d context places still held", cs.Count())
	}
}

func TestContextShutdownKills(t *testing.T) {
	m, cs := newContexts(t, nil)
	c := mustContext(t, cs)
	x, _, err := c.Execute(ExecuteRequest{Code: "import time\nprint(1)\nwhile True:\n    try: time.sleep(10)\n    except KeyboardInterrupt: pass"})
	if err != nil {
		t.Fatal(err)
	}
	waitFirst(t, x)
	pid := c.Status().Pid
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Fatalf("interpreter %d alive after Shutdown (%s)", pid, time.Since(t0))
	}
	evs := collect(t, x)
	if end := evs[len(evs)-1]; end.Status != wire.ExecStateLost || !strings.Contains(end.Reason, "shut down") {
		t.Fatalf("end %+v", end)
	}
	if _, _, err := cs.Create(ContextRequest{}); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("create after shutdown: %v", err)
	}
}

func TestContextMemoryLimit(t *testing.T) {
	_, cs := newContexts(t, func(c *Config) { c.ContextMemory = 1 << 30 })
	c := mustContext(t, cs)
	run(t, c, "keep = 'me'", 0)
	evs, end := run(t, c, "big = bytearray(2 << 30)", 0)
	if end.Status != wire.ExecError || evs[0].Name != "MemoryError" {
		t.Fatalf("2 GiB under a 1 GiB limit: %+v", evs)
	}
	evs, _ = run(t, c, "import resource\nkeep, resource.getrlimit(resource.RLIMIT_AS)[0]", 0)
	if got := plain(t, resultOf(t, evs, wire.CtxEventResult)); got != "('me', 1073741824)" {
		t.Fatalf("after the MemoryError: %s", got)
	}
}

func TestContextBadPython(t *testing.T) {
	_, cs := newContexts(t, func(c *Config) { c.Python = "/bin/false" })
	fds := fdCount(t)
	if _, _, err := cs.Create(ContextRequest{}); !errors.Is(err, ErrSpawnFailed) {
		t.Fatalf("an interpreter that exits at once: %v, want ErrSpawnFailed", err)
	}
	if cs.Count() != 0 || len(cs.List()) != 0 || fdCount(t) > fds {
		t.Fatalf("a failed create left %d places, %d contexts, %d fds (before %d)", cs.Count(), len(cs.List()), fdCount(t), fds)
	}
}

// spareReady waits for the spare interpreter and returns its pid.
func spareReady(t testing.TB, cs *Contexts) int {
	t.Helper()
	pid := 0
	if !eventually(30*time.Second, func() bool {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		if cs.spare == nil {
			return false
		}
		cs.spare.mu.Lock()
		defer cs.spare.mu.Unlock()
		if cs.spare.in == nil {
			return false
		}
		pid = cs.spare.in.proc.Pid
		return true
	}) {
		t.Fatal("no spare interpreter within 30 s")
	}
	return pid
}

func TestContextSpare(t *testing.T) {
	m, cs := newContexts(t, func(c *Config) { c.ContextSpare = true })
	cs.Prestart()
	spare := spareReady(t, cs)
	c := mustContext(t, cs)
	if st := c.Status(); st.Pid != spare || st.ContextID == "" || cs.Count() != 1 {
		t.Fatalf("a create took %+v (places %d); the spare was %d", st, cs.Count(), spare)
	}
	run(t, c, "s = 1", 0)
	evs, _ := run(t, c, "s + 1", 0)
	if got := plain(t, resultOf(t, evs, wire.CtxEventResult)); got != "2" {
		t.Fatalf("on the spare: %q", got)
	}
	next := spareReady(t, cs) // replaced in the background
	if next == spare {
		t.Fatal("the spare was not replaced")
	}
	st, _, err := cs.Create(ContextRequest{Envs: map[string]string{"A": "1"}})
	if err != nil || st.Pid == next {
		t.Fatalf("a create with envs must not take the spare: %v %+v", err, st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(next, 0) == nil {
		t.Fatalf("the spare %d is alive after Shutdown", next)
	}
}
