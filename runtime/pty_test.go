package runtime

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/ringbuf"
)

// ptyFDs counts this process's open terminal masters (/dev/ptmx) and slaves
// (/dev/pts/N).
func ptyFDs(t testing.TB) (masters, slaves int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		switch {
		case err != nil:
		case l == "/dev/ptmx" || strings.HasPrefix(l, "/dev/pts/ptmx"):
			masters++
		case strings.HasPrefix(l, "/dev/pts/"):
			slaves++
		}
	}
	return masters, slaves
}

func ptyReq(argv ...string) CreateRequest {
	return CreateRequest{Argv: argv, PTY: &PTYRequest{Cols: 80, Rows: 24}}
}

// TestPTYNoLeaksAfter500Commands: 500 terminal commands (most exit at once,
// every tenth is a cat that is asked for its status, written to, resized
// and killed) leave no terminal, descriptor or goroutine behind.
func TestPTYNoLeaksAfter500Commands(t *testing.T) {
	m := newManager(t, func(c *Config) { c.MaxRetained = 16; c.KillGrace = 100 * time.Millisecond })
	waitDone(t, mustCreate(t, m, ptyReq("true"))) // warm up pools and the reaper
	runtime.GC()
	fds, gor := fdCount(t), runtime.NumGoroutine()
	masters, slaves := ptyFDs(t)
	// The counter sees a live terminal: one master, and no slave (the
	// child's copies are closed in the daemon after the fork).
	live := mustCreate(t, m, ptyReq("cat"))
	if ms, ss := ptyFDs(t); ms != masters+1 || ss != slaves {
		t.Fatalf("with one terminal: ptmx %d, pts %d; want %d and %d", ms, ss, masters+1, slaves)
	}
	live.Kill(context.Background())
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := 0; i < 500; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			req := ptyReq("true")
			if i%10 == 0 {
				req = ptyReq("cat")
			}
			for {
				st, _, err := m.Create(req)
				if errors.Is(err, ErrTooManyRunning) {
					runtime.Gosched()
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				c, err := m.Get(st.CommandID)
				if err != nil {
					return // evicted already
				}
				if i%10 == 0 {
					c.Status()
					c.WriteStdin([]byte("x\n"), false)
					c.Resize(100, 30)
					c.Kill(context.Background())
				}
				<-c.Done()
				return
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		f, g := fdCount(t), runtime.NumGoroutine()
		ms, ss := ptyFDs(t)
		if f <= fds && g <= gor+2 && ms <= masters && ss <= slaves {
			t.Logf("fds %d→%d, ptmx %d→%d, pts %d→%d, goroutines %d→%d", fds, f, masters, ms, slaves, ss, gor, g)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leak: fds %d→%d, ptmx %d→%d, pts %d→%d, goroutines %d→%d", fds, f, masters, ms, slaves, ss, gor, g)
		}
		runtime.Gosched()
	}
}

// TestPTYRequestValidation: the limits of "pty", TERM, and idempotency.
func TestPTYRequestValidation(t *testing.T) {
	m := newManager(t, nil)
	for _, p := range []PTYRequest{{0, 24, ""}, {80, 0, ""}, {1001, 24, ""}, {80, 1001, ""}, {-5, 24, ""},
		{80, 24, "a b"}, {80, 24, "x=y"}, {80, 24, strings.Repeat("x", 65)}, {80, 24, "é"}} {
		if _, _, err := m.Create(CreateRequest{Argv: []string{"true"}, PTY: &p}); !errors.Is(err, ErrInvalid) {
			t.Errorf("pty %+v: err %v; want ErrInvalid", p, err)
		}
	}
	for _, p := range []PTYRequest{{1, 1, ""}, {1000, 1000, "vt100"}} {
		c := mustCreate(t, m, CreateRequest{Argv: []string{"true"}, PTY: &p})
		st := waitDone(t, c)
		if st.PTY == nil || st.PTY.Cols != p.Cols || st.PTY.Rows != p.Rows || !st.Stdin {
			t.Errorf("pty %+v: status pty %+v stdin %v", p, st.PTY, st.Stdin)
		}
	}

	// An idempotent re-post must match the terminal too.
	id := "6f0c5a52-3c1e-4c59-9a43-5e4c0d2b9a11"
	r := CreateRequest{Argv: []string{"cat"}, CommandID: id, PTY: &PTYRequest{Cols: 80, Rows: 24}}
	if _, created, err := m.Create(r); err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	if _, created, err := m.Create(r); err != nil || created {
		t.Errorf("same re-post: created %v err %v; want the existing command", created, err)
	}
	for _, o := range []CreateRequest{
		{Argv: []string{"cat"}, CommandID: id, PTY: &PTYRequest{Cols: 81, Rows: 24}},
		{Argv: []string{"cat"}, CommandID: id, PTY: &PTYRequest{Cols: 80, Rows: 24, Term: "vt100"}},
		{Argv: []string{"cat"}, CommandID: id, Stdin: true},
	} {
		if _, _, err := m.Create(o); !errors.Is(err, ErrConflict) {
			t.Errorf("re-post %+v: err %v; want ErrConflict", o.PTY, err)
		}
	}
	c, _ := m.Get(id)
	c.Kill(context.Background())
}

// TestPTYSignalAndStream: output is one stream (ringbuf.PTY) and signals reach
// the foreground job.
func TestPTYSignalAndStream(t *testing.T) {
	m := newManager(t, nil)
	c := mustCreate(t, m, ptyReq("sh", "-c", "echo out; echo err >&2"))
	st := waitDone(t, c)
	res, err := c.Read(0, 1<<20, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for _, r := range res.Records {
		if r.Stream != ringbuf.PTY {
			t.Errorf("record stream %v; want pty", r.Stream)
		}
		got += string(r.Data)
	}
	if got != "out\r\nerr\r\n" || st.PTYBytes != int64(len(got)) || st.StdoutBytes != 0 || st.StderrBytes != 0 {
		t.Errorf("output %q, pty_bytes %d, stdout %d, stderr %d; want out and err on the terminal, counted as pty_bytes",
			got, st.PTYBytes, st.StdoutBytes, st.StderrBytes)
	}

	c = mustCreate(t, m, ptyReq("sleep", "100"))
	if _, err := c.Signal(2); err != nil {
		t.Fatal(err)
	}
	if st := waitDone(t, c); st.State != StateExited || st.Signal == nil || *st.Signal != "SIGINT" {
		t.Errorf("after SIGINT: %s %v; want exited by SIGINT", st.State, st.Signal)
	}
}

// TestPTYConcurrentUse: status, stdin (with eof), resize and signal from
// many goroutines at once on one terminal neither deadlock nor race, and the
// last resize is what the status shows.
func TestPTYConcurrentUse(t *testing.T) {
	m := newManager(t, nil)
	c := mustCreate(t, m, ptyReq("sh", "-c", "while read x; do :; done"))
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				switch i % 4 {
				case 0:
					c.Status()
				case 1:
					if _, _, err := c.WriteStdin([]byte("x\n"), false); err != nil && !errors.Is(err, ErrStdinFull) {
						t.Error(err)
					}
				case 2:
					if _, err := c.Resize(50+g, 20+i%10); err != nil {
						t.Error(err)
					}
				case 3:
					c.Signal(28) // SIGWINCH: harmless
				}
			}
		}()
	}
	wg.Wait()
	if _, err := c.Resize(77, 33); err != nil {
		t.Fatal(err)
	}
	if st := c.Status(); st.PTY.Cols != 77 || st.PTY.Rows != 33 || st.State != StateRunning {
		t.Errorf("after the storm: %s pty %+v; want running 77x33", st.State, st.PTY)
	}
	c.WriteStdin(nil, true) // VEOF at the start of a line: read ends the loop
	if st := waitDone(t, c); st.State != StateExited || *st.ExitCode != 0 {
		t.Errorf("after eof: %s %v; want exited 0", st.State, *st.ExitCode)
	}
}
