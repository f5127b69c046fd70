//go:build linux

package procgroup

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readAllPTY reads the master until EIO (every holder of the slave closed it).
func readAllPTY(t *testing.T, p *Process) string {
	t.Helper()
	p.PTY.SetReadDeadline(time.Now().Add(waitTimeout))
	var out bytes.Buffer
	_, err := io.Copy(&out, p.PTY)
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("reading the master: %v; want EIO at the end", err)
	}
	return out.String()
}

// TestStartPTY: the child is a session leader (sid == pgid == pid) whose
// controlling terminal has the requested size from its first instruction
// on; stdin, stdout and stderr are that terminal, and the parent keeps no
// slave descriptor.
func TestStartPTY(t *testing.T) {
	r := newReaper(t)
	before, ptsBefore := fdCount(t), ptsFDs(t)
	p := start(t, r, Spec{
		Argv: []string{"sh", "-c", `stty size; tty; ps -o sid= -o pgid= -o tpgid= -p $$; echo err >&2; [ -t 0 ] && echo stdin-is-a-tty`},
		Env:  []string{"PATH=" + os.Getenv("PATH")},
		PTY:  &Winsize{Cols: 123, Rows: 45},
	})
	defer p.PTY.Close()
	if p.Stdin != nil || p.Stdout != nil || p.Stderr != nil {
		t.Fatalf("pipes with a PTY: %v %v %v", p.Stdin, p.Stdout, p.Stderr)
	}
	// The master, and the leader's pidfd until the Reaper releases it (which
	// may have happened already); never the slave.
	if got := fdCount(t); got != before+1 && got != before+2 {
		t.Errorf("fds %d → %d; want one more (the master), or two with the leader's pidfd", before, got)
	}
	if got := ptsFDs(t); got > ptsBefore {
		t.Errorf("the parent holds the slave: %d fds on /dev/pts/*, %d before", got, ptsBefore)
	}
	out := readAllPTY(t, p)
	if st := wait(t, p); st.Code != 0 {
		t.Errorf("exit %+v; output %q", st, out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\r\n"), "\r\n")
	if len(lines) != 5 || lines[0] != "45 123" || !strings.HasPrefix(lines[1], "/dev/pts/") || lines[3] != "err" || lines[4] != "stdin-is-a-tty" {
		t.Fatalf("output %q; want size 45 123, a pts path, ids, err, stdin-is-a-tty", out)
	}
	ids := strings.Fields(lines[2])
	pid := strconv.Itoa(p.Pid)
	if len(ids) != 3 || ids[0] != pid || ids[1] != pid || ids[2] != pid {
		t.Errorf("sid pgid tpgid %q; want all %s (session leader, foreground on its terminal)", lines[2], pid)
	}
}

// TestPTYResizeAndEOF: Resize changes what the program sees; TerminalEOF
// reports Ctrl-D and canonical mode; both refuse a process without a PTY.
func TestPTYResizeAndEOF(t *testing.T) {
	r := newReaper(t)
	p := start(t, r, Spec{Argv: []string{"sh", "-c", "read x; stty size"}, Env: []string{"PATH=" + os.Getenv("PATH")}, PTY: &Winsize{Cols: 80, Rows: 24}})
	defer p.PTY.Close()
	if err := p.Resize(Winsize{Cols: 99, Rows: 11}); err != nil {
		t.Fatal(err)
	}
	veof, canonical, err := p.TerminalEOF()
	if err != nil || veof != 4 || !canonical {
		t.Errorf("TerminalEOF: %d %v %v; want 4 (Ctrl-D), canonical", veof, canonical, err)
	}
	p.PTY.Write([]byte("\n"))
	if out := readAllPTY(t, p); !strings.HasSuffix(out, "11 99\r\n") {
		t.Errorf("output %q; want the new size", out)
	}
	wait(t, p)
	p.PTY.Close()
	if err := p.Resize(Winsize{Cols: 1, Rows: 1}); err == nil {
		t.Errorf("Resize after Close: no error")
	}

	q := start(t, r, Spec{Argv: []string{"true"}, Env: []string{"PATH=" + os.Getenv("PATH")}})
	collect(q)
	if err := q.Resize(Winsize{Cols: 1, Rows: 1}); !errors.Is(err, ErrNotPTY) {
		t.Errorf("Resize without a PTY: %v; want ErrNotPTY", err)
	}
	if _, _, err := q.TerminalEOF(); !errors.Is(err, ErrNotPTY) {
		t.Errorf("TerminalEOF without a PTY: %v; want ErrNotPTY", err)
	}
	wait(t, q)
}

// TestReadStat: readStat agrees with what the kernel says of this process.
func TestReadStat(t *testing.T) {
	st, ok := readStat(os.Getpid())
	if !ok || st.pgrp != syscall.Getpgrp() || st.state == 0 {
		t.Fatalf("readStat(self) = %+v, %v; want pgrp %d", st, ok, syscall.Getpgrp())
	}
	sid, _, _ := syscall.RawSyscall(syscall.SYS_GETSID, 0, 0, 0)
	if st.sess != int(sid) {
		t.Errorf("session %d; want %d", st.sess, sid)
	}
	if _, ok := readStat(1 << 30); ok {
		t.Errorf("readStat of a pid that cannot exist: ok")
	}
}

// BenchmarkSessionScan is the /proc scan behind WaitingForInput and the
// session signals (one pass over every process of the host).
func BenchmarkSessionScan(b *testing.B) {
	n := 0
	for b.Loop() {
		eachProcess(func(int, ptyProcStat) bool { n++; return true })
	}
	b.ReportMetric(float64(n)/float64(b.N), "procs")
}

// ptsFDs counts this process's descriptors open on /dev/pts/* (a terminal
// the test runs in counts too, so compare with a count taken before).
func ptsFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "/dev/pts/") {
			n++
		}
	}
	return n
}

// TestWaitingForInputSharesOneScan (issue 20 item 5): without a cgroup of
// their own, the WaitingForInput looks of many terminals whose leader is
// not reading share one scan of /proc (the process index), and still find
// a reader that is not the leader.
func TestWaitingForInputSharesOneScan(t *testing.T) {
	r := newReaper(t) // no UseCgroups: process groups only
	env := []string{"PATH=" + os.Getenv("PATH")}
	var ps []*Process
	for i := 0; i < 15; i++ {
		argv := []string{"sh", "-c", "sleep 30; true"}
		if i == 0 {
			argv = []string{"sh", "-c", "cat; true"} // the reader is the leader's child
		}
		p := start(t, r, Spec{Argv: argv, Env: env, PTY: &Winsize{Cols: 80, Rows: 24}})
		ps = append(ps, p)
		defer func() { p.Signal(syscall.SIGKILL); wait(t, p); p.PTY.Close() }()
	}
	deadline := time.Now().Add(20 * time.Second)
	for !ps[0].WaitingForInput() {
		if time.Now().After(deadline) {
			t.Fatal("cat in a child of sh never read as waiting for input")
		}
		time.Sleep(10 * time.Millisecond)
	}
	processes.mu.Lock()
	processes.at = time.Time{} // the next look scans again
	before := processes.scans
	processes.mu.Unlock()
	t0 := time.Now()
	for _, p := range ps[1:] {
		if p.WaitingForInput() {
			t.Errorf("sleep read as waiting for input")
		}
	}
	processes.mu.Lock()
	scans := processes.scans - before
	processes.mu.Unlock()
	// One scan per indexMaxAge at most, however many looks.
	if want := 1 + int(time.Since(t0)/indexMaxAge); scans > want || scans == 0 {
		t.Errorf("14 looks in %v made %d scans of /proc; want 1 to %d", time.Since(t0), scans, want)
	}
}
