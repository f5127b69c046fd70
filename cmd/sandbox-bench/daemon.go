package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// daemon is a sandbox-runtime this tool started (or, with pid 0 and cmd nil,
// one it only targets).
type daemon struct {
	name    string
	addr    string // host:port, loopback
	pid     int    // 0: unknown (a targeted daemon without -pid)
	cmd     *exec.Cmd
	baseDir string
	logPath string
	logDone chan struct{}
}

// url returns the daemon's http URL for path.
func (d *daemon) url(path string) string { return "http://" + d.addr + path }

// buildDaemon builds ./cmd/sandbox-runtime of the module this tool runs in
// into dir and returns the binary's path.
func buildDaemon(ctx context.Context, dir string) (string, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w (give -daemon PATH)", err)
	}
	mod := strings.TrimSpace(string(gomod))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the sandbox-runtime module: run from the repository or give -daemon PATH")
	}
	out := filepath.Join(dir, "sandbox-runtime")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/sandbox-runtime")
	cmd.Dir = filepath.Dir(mod)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sandbox-runtime: %w", err)
	}
	return out, nil
}

// startDaemon starts bin on 127.0.0.1:0 with its own base dir under tmp and
// the environment env and then extra ("K=V"), and waits for its "listening"
// log line.
func startDaemon(ctx context.Context, name, bin, tmp string, env map[string]string, extra []string) (*daemon, error) {
	d := &daemon{name: name, baseDir: filepath.Join(tmp, name+"-base"), logPath: filepath.Join(tmp, name+".log"), logDone: make(chan struct{})}
	if err := os.MkdirAll(d.baseDir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(d.logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"SANDBOX_RUNTIME_ADDR=127.0.0.1:0",
		"SANDBOX_BASE_DIR="+d.baseDir,
		"SANDBOX_RUNTIME_TOKEN_FILE=",
	)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, extra...)
	cmd.Dir = d.baseDir
	// Our own pipe rather than StderrPipe, so that Wait may run while the
	// log is still being read.
	stderr, w, err := os.Pipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		stderr.Close()
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	d.cmd, d.pid = cmd, cmd.Process.Pid
	addrCh := make(chan string, 1)
	go func() {
		defer close(d.logDone)
		defer logf.Close()
		defer stderr.Close()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		found := false
		for sc.Scan() {
			line := sc.Bytes()
			logf.Write(line)
			logf.Write([]byte{'\n'})
			if found {
				continue
			}
			var l struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(line, &l) == nil && l.Msg == "listening" && l.Addr != "" {
				found = true
				addrCh <- l.Addr
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case a := <-addrCh:
		d.addr = a
	case <-d.logDone:
		d.stop()
		return nil, fmt.Errorf("%s exited before listening; its log: %s", name, d.logPath)
	case <-t.C:
		d.stop()
		return nil, fmt.Errorf("%s did not log \"listening\" within 30 s; its log: %s", name, d.logPath)
	case <-ctx.Done():
		d.stop()
		return nil, ctx.Err()
	}
	if err := checkLoopback(d.addr); err != nil {
		d.stop()
		return nil, err
	}
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
	if d == nil || d.cmd == nil {
		return nil
	}
	cmd := d.cmd
	d.cmd = nil
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		<-d.logDone
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("%s exited with %v", d.name, ee)
		}
		return err
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s did not exit within 30 s of SIGTERM: killed", d.name)
	}
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
