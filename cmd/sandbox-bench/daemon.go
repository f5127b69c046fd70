package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/internal/daemontest"
)

// daemon is a sandbox-runtime this tool started (or, with pid 0 and d nil,
// one it only targets).
type daemon struct {
	name    string
	addr    string // host:port, loopback
	grpc    string // sandboxd's gRPC host:port, "" when it serves none
	pid     int    // 0: unknown (a targeted daemon without -pid)
	d       *daemontest.Daemon
	baseDir string
	logPath string
}

// url returns the daemon's http URL for path.
func (d *daemon) url(path string) string { return "http://" + d.addr + path }

// buildDaemon builds ./cmd/sandbox-runtime of the module this tool runs in
// into dir (the shared launcher's build, stamped "bench") and returns the
// binary's path.
func buildDaemon(ctx context.Context, dir string) (string, error) {
	bin, err := daemontest.Build(ctx, daemontest.BuildOptions{Dir: dir, Version: "bench"})
	if err != nil {
		return "", fmt.Errorf("%w (give -daemon PATH)", err)
	}
	return bin, nil
}

// startDaemon starts bin through the shared launcher (127.0.0.1:0, an
// environment without the caller's SANDBOX_* variables) with its own base
// dir under tmp and the settings env and then extra ("K=V"), and waits for
// its "listening" log line. Its log is tmp/NAME.log.
func startDaemon(ctx context.Context, name, bin, tmp string, env map[string]string, extra []string) (*daemon, error) {
	d := &daemon{name: name, baseDir: filepath.Join(tmp, name+"-base"), logPath: filepath.Join(tmp, name+".log")}
	var kv []string
	for k, v := range env {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	dm, err := daemontest.Start(ctx, daemontest.Options{
		Bin:     bin,
		BaseDir: d.baseDir,
		LogPath: d.logPath,
		Env:     append(kv, extra...),
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	d.d, d.addr, d.pid = dm, dm.Addr, dm.PID
	d.grpc, _ = dm.Listening["sandboxd_grpc_addr"].(string)
	return d, nil
}

// checkLoopback refuses any address that is not on the loopback interface:
// this tool loads 127.0.0.1 only.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("address %q is not loopback: this tool only loads 127.0.0.1", addr)
	}
	return nil
}

// stop ends a daemon this tool started: SIGTERM to its PID, then SIGKILL to
// that PID if it has not exited within 30 s. A targeted daemon is left alone.
func (d *daemon) stop() error {
	if d == nil || d.d == nil {
		return nil
	}
	dm := d.d
	d.d = nil
	code, _, err := dm.Stop()
	if err != nil {
		return fmt.Errorf("%s: %w", d.name, err)
	}
	if code != 0 {
		return fmt.Errorf("%s exited with %v", d.name, dm.WaitErr())
	}
	return nil
}

// procStatus returns VmRSS and VmHWM of pid in KiB.
func procStatus(pid int) (rss, hwm int64, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	rss, hwm = -1, -1
	for _, line := range strings.Split(string(data), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status: %q: %w", pid, line, err)
		}
		if name == "VmRSS" {
			rss = n
		} else {
			hwm = n
		}
	}
	if rss < 0 || hwm < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status has no VmRSS/VmHWM", pid)
	}
	return rss, hwm, nil
}

// rssSampler samples a process's VmRSS every interval and keeps the peak.
type rssSampler struct {
	stop chan struct{}
	done chan struct{}
	peak int64
	n    int
}

func sampleRSS(pid int, every time.Duration) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	if rss, _, err := procStatus(pid); err == nil {
		s.peak, s.n = rss, 1
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				if rss, _, err := procStatus(pid); err == nil {
					s.peak = max(s.peak, rss)
					s.n++
				}
				return
			case <-t.C:
				if rss, _, err := procStatus(pid); err == nil {
					s.peak = max(s.peak, rss)
					s.n++
				}
			}
		}
	}()
	return s
}

// Stop ends sampling and returns the peak VmRSS in KiB and the sample count.
func (s *rssSampler) Stop() (int64, int) {
	close(s.stop)
	<-s.done
	return s.peak, s.n
}

// clockTick is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on
// every Linux this runs on).
const clockTick = 10 * time.Millisecond

// procCPU returns the CPU time pid has used, its reaped children's included
// (utime+stime+cutime+cstime): for the daemon, the commands it ran.
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields start after ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:15] { // fields 14-17: utime stime cutime cstime
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

// selfCPU returns the CPU time of this process plus that of its reaped
// children (the raw baselines' processes).
func selfCPU() time.Duration {
	var self, kids syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// cpuMeter measures the CPU used during a phase by this process (with its
// children) and by the daemon (with its children).
type cpuMeter struct {
	pid        int
	self, dmn  time.Duration
	dmnUnknown bool
}

func startCPU(pid int) cpuMeter {
	m := cpuMeter{pid: pid, self: selfCPU()}
	if d, err := procCPU(pid); pid > 0 && err == nil {
		m.dmn = d
	} else {
		m.dmnUnknown = true
	}
	return m
}

// stop returns the CPU used since start by this process and by the daemon
// (-1 when unknown).
func (m cpuMeter) stop() (self, dmn time.Duration) {
	self = selfCPU() - m.self
	dmn = -1
	if !m.dmnUnknown {
		if d, err := procCPU(m.pid); err == nil {
			dmn = d - m.dmn
		}
	}
	return self, dmn
}

// loadInfo describes how busy the machine is: the load averages and, where
// the kernel has PSI, the share of time some task waited for a CPU.
func loadInfo() string {
	s := "load average ?"
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(data)); len(f) >= 3 {
			s = "load average " + strings.Join(f[:3], " ")
		}
	}
	if data, err := os.ReadFile("/proc/pressure/cpu"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "some "); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					s += ", cpu pressure " + strings.TrimPrefix(f[0], "avg10=") + "% (10 s)"
				}
			}
		}
	}
	return s
}
