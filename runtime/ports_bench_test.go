//go:build linux

package runtime

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startServer starts python3 listening on 127.0.0.1:port that writes the
// time (unix ns) right after its listen() to file, and returns the command.
func startServer(tb testing.TB, m *Manager, py, file string, port int) *Command {
	tb.Helper()
	prog := "import socket,time,sys\n" +
		"s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n" +
		"s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); t=time.time_ns()\n" +
		"open(sys.argv[2]+'.tmp','w').write(str(t)); import os; os.rename(sys.argv[2]+'.tmp', sys.argv[2])\n" +
		"time.sleep(60)\n"
	return mustCreate(tb, m, CreateRequest{Argv: []string{py, "-c", prog, strconv.Itoa(port), file}})
}

// BenchmarkBindToWaitPort: from a server's listen() (the time it writes
// right after it) to WaitPort's answer. The poll is every PortPollInterval
// (100 ms): about half of it on average.
func BenchmarkBindToWaitPort(b *testing.B) {
	py, err := exec.LookPath("python3")
	if err != nil {
		b.Skip("python3 is not installed (a machine precondition)")
	}
	m := newManager(b, nil)
	dir := b.TempDir()
	var total, worst time.Duration
	n := 0
	for b.Loop() {
		port := freePort(b)
		file := filepath.Join(dir, "bound"+strconv.Itoa(n))
		c := startServer(b, m, py, file, port)
		st := c.WaitPort(context.Background(), port, 20*time.Second)
		back := time.Now()
		if st.WaitPortResult != "listening" {
			b.Fatalf("wait_port: %q", st.WaitPortResult)
		}
		data, err := os.ReadFile(file)
		for deadline := time.Now().Add(5 * time.Second); err != nil && time.Now().Before(deadline); data, err = os.ReadFile(file) {
			time.Sleep(5 * time.Millisecond) // polls for the file, bounded
		}
		ns, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		d := back.Sub(time.Unix(0, ns))
		total += d
		worst = max(worst, d)
		n++
		c.Kill(context.Background())
		<-c.Done()
	}
	b.ReportMetric(float64(total.Microseconds())/float64(n)/1000, "ms-bind-to-answer")
	b.ReportMetric(float64(worst.Microseconds())/1000, "ms-worst")
}

// BenchmarkListenersBusyHost: one listeners read of a running command (and
// one GET /v1/ports) with 3,000 more processes on the host, in a process
// group of their own that the benchmark kills.
func BenchmarkListenersBusyHost(b *testing.B) {
	py, err := exec.LookPath("python3")
	if err != nil {
		b.Skip("python3 is not installed (a machine precondition)")
	}
	defer startCrowd(b, 3000)()
	m := newManager(b, nil)
	port := freePort(b)
	c := startServer(b, m, py, filepath.Join(b.TempDir(), "bound"), port)
	if st := c.WaitPort(context.Background(), port, 20*time.Second); st.WaitPortResult != "listening" {
		b.Fatalf("wait_port: %q", st.WaitPortResult)
	}
	b.Logf("isolation %s; %d processes on the host", testReaper.Isolation().Mode, countProcs())
	b.Run("listeners", func(b *testing.B) {
		for b.Loop() {
			if len(c.Listeners()) == 0 {
				b.Fatal("no listener")
			}
		}
	})
	b.Run("ports", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.Ports(); err != nil {
				b.Fatal(err)
			}
		}
	})
	c.Kill(context.Background())
	<-c.Done()
}

// startCrowd starts n sleeping processes in a process group of their own
// (killed by the returned function, and with the benchmark by Pdeathsig).
func startCrowd(b *testing.B, n int) (stop func()) {
	crowd := exec.Command("sh", "-c", "i=0; while [ $i -lt "+strconv.Itoa(n)+" ]; do sleep 120 & i=$((i+1)); done; wait")
	crowd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := crowd.Start(); err != nil {
		b.Fatal(err)
	}
	stop = func() { syscall.Kill(-crowd.Process.Pid, syscall.SIGKILL); crowd.Wait() }
	for deadline := time.Now().Add(60 * time.Second); len(groupPids(crowd.Process.Pid)) < n; {
		if time.Now().After(deadline) {
			stop()
			b.Fatalf("the %d processes did not start", n)
		}
		time.Sleep(20 * time.Millisecond) // polls a condition, bounded
	}
	return stop
}

// BenchmarkWaitPortBusyHostCPU: the CPU time (user + system, this process)
// that wait_ports on a port nobody binds cost while they wait, with 3,000
// more processes on the host: one waiter, then five (they share the poll).
// Each iteration is a 2 s wait; -benchtime 3x.
func BenchmarkWaitPortBusyHostCPU(b *testing.B) {
	defer startCrowd(b, 3000)()
	m := newManager(b, nil)
	c := mustCreate(b, m, CreateRequest{Argv: []string{"sleep", "120"}})
	defer func() { c.Kill(context.Background()); <-c.Done() }()
	port := freePort(b)
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, waiters := range []int{1, 5} {
		b.Run(strconv.Itoa(waiters)+"-waiters", func(b *testing.B) {
			var used, wall time.Duration
			for b.Loop() {
				c0, t0 := cpu(), time.Now()
				done := make(chan struct{}, waiters)
				for range waiters {
					go func() { c.WaitPort(context.Background(), port, 2*time.Second); done <- struct{}{} }()
				}
				for range waiters {
					<-done
				}
				used, wall = used+cpu()-c0, wall+time.Since(t0)
			}
			b.ReportMetric(100*used.Seconds()/wall.Seconds(), "%core")
		})
	}
}

func countProcs() int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			n++
		}
	}
	return n
}

// groupPids lists the processes of process group pgid.
func groupPids(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid {
			out = append(out, pid)
		}
	}
	return out
}
