//go:build linux

package procgroup

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pid1Env tells the test binary that it runs as PID 1 of a fresh PID namespace.
const pid1Env = "PROCGROUP_PID1"

// pid1Marker is printed by TestPID1Helper when every check inside the namespace passed.
const pid1Marker = "PROCGROUP-PID1-OK"

// TestPID1 runs TestPID1Helper as PID 1 of a new PID namespace (the runtime may be PID
// 1 of its container): every orphan must be reaped and no zombie may remain.
func TestPID1(t *testing.T) {
	r := newReaper(t)
	spec := Spec{
		Argv: []string{"unshare", "--pid", "--fork", "--mount-proc",
			selfExe(), "-test.run=^TestPID1Helper$", "-test.v", "-test.count=1", "-test.timeout=3m"},
		Env: environWith(pid1Env + "=1"),
	}
	p, err := r.Start(spec)
	if err != nil {
		t.Skipf("cannot run unshare: %v", err)
	}
	outc := make(chan [2]string, 1)
	go func() {
		o, e := collect(p)
		outc <- [2]string{o, e}
	}()
	var out [2]string
	select {
	case out = <-outc:
	case <-time.After(4 * time.Minute):
		p.Terminate(context.Background(), time.Second)
		out = <-outc
		t.Fatalf("inner test did not finish; stdout:\n%s\nstderr:\n%s", out[0], out[1])
	}
	st := wait(t, p)
	if st.Code != 0 && strings.Contains(out[1], "unshare failed") &&
		strings.Contains(out[1], "Operation not permitted") {
		t.Skipf("creating a PID namespace is not permitted here: %s", strings.TrimSpace(out[1]))
	}
	if st.Code != 0 {
		t.Fatalf("inner test: Code %d\nstdout:\n%s\nstderr:\n%s", st.Code, out[0], out[1])
	}
	if !strings.Contains(out[0], pid1Marker) {
		t.Fatalf("inner test did not run (no %q marker)\nstdout:\n%s\nstderr:\n%s", pid1Marker, out[0], out[1])
	}
	t.Logf("inner test as PID 1:\n%s", out[0])
}

// TestPID1Helper is the inside of TestPID1; run on its own it skips.
func TestPID1Helper(t *testing.T) {
	if os.Getenv(pid1Env) != "1" {
		t.Skip("runs only inside the PID namespace created by TestPID1")
	}
	if pid := os.Getpid(); pid != 1 {
		t.Fatalf("Getpid() = %d; want 1", pid)
	}
	r, err := NewReaper(nil) // no debug log: the outer test shows this output
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })

	const n = 200
	const parallel = 20
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			p, err := r.Start(helper("orphan-grandchild"))
			if err != nil {
				errs <- err
				return
			}
			out, errOut := collect(p)
			select {
			case <-p.Done():
			case <-time.After(waitTimeout):
				errs <- fmt.Errorf("pid %d not reaped", p.Pid)
				return
			}
			if st := p.Exit(); st.Code != 0 {
				errs <- fmt.Errorf("pid %d: Code %d stderr %q", p.Pid, st.Code, errOut)
				return
			}
			if !strings.HasPrefix(out, "grandchild ") {
				errs <- fmt.Errorf("pid %d: stdout %q", p.Pid, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.WaitOrphans(ctx, n); err != nil {
		t.Fatalf("OrphansReaped = %d; want %d: %v", r.OrphansReaped(), n, err)
	}
	if got := r.OrphansReaped(); got != n {
		t.Errorf("OrphansReaped = %d; want exactly %d", got, n)
	}
	// Every process in the namespace is gone but us, and nothing is a zombie.
	for _, ps := range procs(t) {
		if ps.state == "Z" {
			t.Errorf("zombie: pid %d ppid %d", ps.pid, ps.ppid)
		} else if ps.pid != 1 {
			t.Errorf("left running: pid %d ppid %d state %s", ps.pid, ps.ppid, ps.state)
		}
	}
	if syscall.Getpid() == 1 && !t.Failed() {
		fmt.Println(pid1Marker, "orphans reaped:", r.OrphansReaped())
	}
}
