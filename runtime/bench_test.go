package runtime

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
	"github.com/sandbox-runtime/sandbox-runtime/ringbuf"
)

// osExecNsPerOp is the ns/op of the last BenchmarkCreateTrue/os-exec run, so
// that the engine sub-benchmark can report its overhead as a ratio measured
// in the same run.
var osExecNsPerOp float64

// withoutReaper runs f with the test binary's reaper closed, so that
// exec.Cmd.Wait owns its child's exit status (a live reaper's wait4(-1) loop
// would steal it), and re-opens testReaper afterwards. No managed command may
// be running when it is called.
func withoutReaper(b *testing.B, f func()) {
	b.Helper()
	testReaper.Close()
	defer func() {
		r, err := procgroup.NewReaper(nil)
		if err != nil {
			b.Fatalf("re-opening the reaper: %v", err)
		}
		testReaper = r
	}()
	f()
}

// BenchmarkCreateTrue measures create→finish of /bin/true through the engine
// next to a plain exec.Command("/bin/true").Run() in the same run; the engine
// sub-benchmark reports its cost as a multiple of os-exec (x-os-exec).
func BenchmarkCreateTrue(b *testing.B) {
	if _, err := os.Stat("/bin/true"); err != nil {
		b.Skip("no /bin/true")
	}
	b.Run("os-exec", func(b *testing.B) {
		withoutReaper(b, func() {
			b.ReportAllocs()
			for b.Loop() {
				if err := exec.Command("/bin/true").Run(); err != nil {
					b.Fatal(err)
				}
			}
			osExecNsPerOp = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		})
	})
	b.Run("engine", func(b *testing.B) {
		m := newManager(b, nil) // after os-exec: uses the re-opened testReaper
		req := CreateRequest{Argv: []string{"/bin/true"}}
		b.ReportAllocs()
		for b.Loop() {
			st, _, err := m.Create(req)
			if err != nil {
				b.Fatal(err)
			}
			c, err := m.Get(st.CommandID)
			if err != nil {
				b.Fatal(err)
			}
			<-c.Done()
			if s := c.Status(); s.ExitCode == nil || *s.ExitCode != 0 {
				b.Fatalf("state %s exit %v; want exited 0", s.State, s.ExitCode)
			}
		}
		if osExecNsPerOp > 0 {
			per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(per/osExecNsPerOp, "x-os-exec")
		}
	})
}

// BenchmarkCreateTrueParallel is BenchmarkCreateTrue with GOMAXPROCS
// concurrent callers (b.RunParallel), engine next to os/exec.
func BenchmarkCreateTrueParallel(b *testing.B) {
	if _, err := os.Stat("/bin/true"); err != nil {
		b.Skip("no /bin/true")
	}
	var osNs float64
	b.Run("os-exec", func(b *testing.B) {
		withoutReaper(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := exec.Command("/bin/true").Run(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			osNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		})
	})
	b.Run("engine", func(b *testing.B) {
		m := newManager(b, nil)
		req := CreateRequest{Argv: []string{"/bin/true"}}
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				st, _, err := m.Create(req)
				if err != nil {
					b.Error(err)
					return
				}
				c, err := m.Get(st.CommandID)
				if err != nil {
					b.Error(err)
					return
				}
				<-c.Done()
			}
		})
		if osNs > 0 {
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/osNs, "x-os-exec")
		}
	})
}

// statusKB returns the value in KiB of a "Name:   N kB" line of
// /proc/self/status, or -1 if it cannot be read.
func statusKB(name string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// floodOnce runs the "flood" helper for d with no reader, sampling this
// process's VmRSS every 10 ms, and checks that the accounting is exact: the
// ring's stdout total equals the count the child reports, and
// output_truncated is set. It returns the bytes pumped and the RSS growth
// (peak sample minus the sample taken just before the start), in KiB.
func floodOnce(tb testing.TB, m *Manager, d time.Duration) (pumped int64, growthKB int64, elapsed time.Duration) {
	tb.Helper()
	runtime.GC()
	base := statusKB("VmRSS")
	if base < 0 {
		tb.Skip("no VmRSS in /proc/self/status")
	}
	peak := base
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if v := statusKB("VmRSS"); v > peak {
					peak = v
				}
			}
		}
	}()
	start := time.Now()
	c := mustCreate(tb, m, helper("flood", strconv.FormatFloat(d.Seconds(), 'f', -1, 64)))
	st := waitDone(tb, c)
	elapsed = time.Since(start)
	close(stop)
	wg.Wait()
	if v := statusKB("VmRSS"); v > peak {
		peak = v
	}
	if st.ExitCode == nil || *st.ExitCode != 0 {
		tb.Fatalf("flood: state %s exit %v; want exited 0", st.State, st.ExitCode)
	}
	_, stderr := output(tb, c)
	want, err := strconv.ParseInt(stderr, 10, 64)
	if err != nil {
		tb.Fatalf("flood child's count on stderr: %q: %v", stderr, err)
	}
	if st.StdoutBytes != want {
		tb.Fatalf("stdout_bytes = %d; want %d (the child's count)", st.StdoutBytes, want)
	}
	if st.StderrBytes != int64(len(stderr)) {
		tb.Fatalf("stderr_bytes = %d; want %d", st.StderrBytes, len(stderr))
	}
	if st.NextCursor != st.StdoutBytes+st.StderrBytes {
		tb.Fatalf("next_cursor = %d; want stdout+stderr = %d", st.NextCursor, st.StdoutBytes+st.StderrBytes)
	}
	if want > int64(m.cfg.OutputLimit) && !st.OutputTruncated {
		tb.Fatalf("output_truncated = false after %d bytes into a %d-byte ring", want, m.cfg.OutputLimit)
	}
	return want, peak - base, elapsed
}

// BenchmarkFlood runs a child that writes as fast as it can for 2 s with no
// reader (one op = one flood) and reports the pump rate (MB/s) and the peak
// growth of this process's VmRSS while it ran (rss-growth-KiB). The totals
// must be exact and output_truncated set.
func BenchmarkFlood(b *testing.B) {
	m := newManager(b, nil)
	// Warm up: the pump buffers and a full ring's worth of allocations are
	// part of the steady state, not of the flood.
	floodOnce(b, m, 200*time.Millisecond)
	var bytes, growth int64
	var busy time.Duration
	for b.Loop() {
		n, g, e := floodOnce(b, m, 2*time.Second)
		bytes += n
		busy += e
		growth = max(growth, g)
	}
	b.ReportMetric(float64(bytes)/busy.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(growth), "rss-growth-KiB")
}

// TestFloodAccountingExact is the short form of BenchmarkFlood that runs with
// the tests: totals exact and output_truncated set after a flood with no
// reader, and this process's RSS does not grow by more than a few rings.
func TestFloodAccountingExact(t *testing.T) {
	if testing.Short() {
		t.Skip("floods for 0.5 s")
	}
	m := newManager(t, nil)
	n, growth, _ := floodOnce(t, m, 500*time.Millisecond)
	t.Logf("flood: %d bytes pumped, RSS growth %d KiB", n, growth)
	if n <= 1<<20 { // a loaded machine: flood longer rather than skip
		n, growth, _ = floodOnce(t, m, 10*time.Second)
		t.Logf("second flood: %d bytes pumped, RSS growth %d KiB", n, growth)
	}
	if n <= 1<<20 {
		t.Fatalf("the child wrote only %d bytes in 10 s: the ring never overflowed", n)
	}
	// Generous bound: a leak proportional to the output (hundreds of MiB)
	// fails it, allocator noise does not.
	if growth > 64<<10 {
		t.Errorf("RSS grew by %d KiB while %d bytes were pumped with no reader; want ≤ 64 MiB", growth, n)
	}
}

// BenchmarkPumpToReader measures the engine's output path with one live
// reader following the ring by cursor (no HTTP): the "flood" child for 1 s,
// every byte read back and counted. MB/s of the bytes the reader received;
// gaps (the reader fell behind the 1 MiB ring) are reported as gaps/op.
func BenchmarkPumpToReader(b *testing.B) {
	m := newManager(b, nil)
	var total, gaps int64
	var busy time.Duration
	for b.Loop() {
		start := time.Now()
		c := mustCreate(b, m, helper("flood", "1"))
		var (
			cursor int64
			res    ringbuf.ReadResult
			got    int64
		)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for {
			ch := c.Notify()
			var err error
			res, err = c.Read(cursor, 256<<10, res.Buf[:0], res.Records[:0])
			if err != nil {
				cancel()
				b.Fatal(err)
			}
			if res.Gap {
				gaps++
			}
			for _, r := range res.Records {
				if r.Stream == ringbuf.Stdout {
					got += int64(len(r.Data))
				}
			}
			cursor = res.Next
			if res.Done {
				break
			}
			if len(res.Records) > 0 {
				continue
			}
			select {
			case <-ch:
			case <-ctx.Done():
				cancel()
				b.Fatal("reader timed out")
			}
		}
		cancel()
		busy += time.Since(start)
		total += got
	}
	b.ReportMetric(float64(total)/busy.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(gaps)/float64(b.N), "gaps/op")
}

// BenchmarkRawPipe is the baseline of BenchmarkPumpToReader: the same
// "flood" child for 1 s under os/exec, its stdout read with a 64 KiB buffer.
func BenchmarkRawPipe(b *testing.B) {
	argv, env := helperArgv("flood", "1")
	withoutReaper(b, func() {
		var total int64
		var busy time.Duration
		buf := make([]byte, 64<<10)
		for b.Loop() {
			start := time.Now()
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), helperEnv+"="+env[helperEnv])
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				b.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			for {
				n, err := out.Read(buf)
				total += int64(n)
				if err != nil {
					break
				}
			}
			if err := cmd.Wait(); err != nil {
				b.Fatal(err)
			}
			busy += time.Since(start)
		}
		b.ReportMetric(float64(total)/busy.Seconds()/1e6, "MB/s")
	})
}
