package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The naive baseline: cmd/sandbox-bench/naive, a ~50-line net/http + os/exec
// server, built and started as its own process like the daemon, measured in
// the same run. Every echo-hi row shows the daemon next to os/exec (the least
// any runtime can do) and next to that server (what a user writes by hand).

// buildNaive builds ./cmd/sandbox-bench/naive into dir.
func buildNaive(ctx context.Context, dir string) (string, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w (give -naive PATH or -naive off)", err)
	}
	mod := strings.TrimSpace(string(gomod))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the sandbox-runtime module: give -naive PATH or -naive off")
	}
	out := filepath.Join(dir, "naive")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/sandbox-bench/naive")
	cmd.Dir = filepath.Dir(mod)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sandbox-bench/naive: %w", err)
	}
	return out, nil
}

// side is one of the things an echo-hi row compares: os/exec in this
// process (pid 0), the daemon, or the naive server.
type side struct {
	name  string
	pid   int // the server's PID; 0 for os/exec
	run   func(context.Context) error
	times []time.Duration
	cpu   time.Duration // the server's CPU with its children (os/exec: this process with its children)
	cli   time.Duration // this client's CPU while the server ran
	known bool          // the server's CPU is known
	wall  time.Duration // throughput: wall time of all its runs
}

func (s *side) timed(ctx context.Context) error {
	m := startCPU(s.pid)
	t0 := time.Now()
	if err := s.run(ctx); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	s.times = append(s.times, time.Since(t0))
	self, dc := m.stop()
	if s.pid == 0 {
		s.cpu += self
	} else {
		s.cli += self
		s.cpu += dc
		s.known = s.known && dc >= 0
	}
	return nil
}

// sides returns os/exec, the daemon running f, and (when it runs) the naive
// server running nf.
func (b *bench) sides(d *daemon, f, nf func(context.Context, *daemon) error) []*side {
	ss := []*side{
		{name: "os/exec", run: rawEcho, known: true},
		{name: "daemon", pid: d.pid, run: func(ctx context.Context) error { return f(ctx, d) }, known: true},
	}
	if b.naive != nil {
		nd := b.naive
		ss = append(ss, &side{name: "naive", pid: nd.pid, run: func(ctx context.Context) error { return nf(ctx, nd) }, known: true})
	}
	return ss
}

func (b *bench) latency(ctx context.Context, d *daemon) error {
	return b.latencyOf(ctx, "echo hi: POST ?stream=true", b.sides(d, b.streamEcho, b.streamEcho))
}

func (b *bench) legacy(ctx context.Context, d *daemon) error {
	if err := b.legacyEcho(ctx, d); errors.Is(err, errNotAvailable) {
		fmt.Fprintln(b.log, "legacy: not available")
		b.add(row{measure: "echo hi: legacy /execute", value: "not available", result: "n/a", goal: latencyGoal})
		return nil
	}
	return b.latencyOf(ctx, "echo hi: legacy /execute", b.sides(d, b.legacyEcho, b.legacyEcho))
}

const latencyGoal = "≤ 1.15× os/exec, ≤ 1.00× naive"

// latencyOf times N runs of every side, one after the other, rotating which
// goes first, so that drift on a noisy machine hits all alike.
func (b *bench) latencyOf(ctx context.Context, label string, ss []*side) error {
	n := b.o.latencyN
	for range b.o.latencyWarmup {
		for _, s := range ss {
			if err := s.run(ctx); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
		}
	}
	for i := range n {
		for j := range ss {
			if err := ss[(i+j)%len(ss)].timed(ctx); err != nil {
				return err
			}
		}
	}
	for _, s := range ss {
		slices.Sort(s.times)
	}
	raw, dmn := ss[0], ss[1]
	for _, q := range []struct {
		name string
		p    float64
		goal bool
	}{{"p50", 0.50, true}, {"p90", 0.90, false}, {"p99", 0.99, false}} {
		rv, dv := pct(raw.times, q.p), pct(dmn.times, q.p)
		r := row{
			measure:  fmt.Sprintf("%s %s (n=%d)", label, q.name, n),
			value:    ms(dv),
			baseline: ms(rv) + " os/exec",
			ratio:    ratio(float64(dv) / float64(rv)),
			result:   "info",
		}
		ok := float64(dv)/float64(rv) <= 1.15
		if len(ss) > 2 {
			nv := pct(ss[2].times, q.p)
			r.naive, r.nratio = ms(nv)+" naive", ratio(float64(dv)/float64(nv))
			ok = ok && dv <= nv
		}
		if q.goal {
			r.goal, r.result = latencyGoal, verdict(ok)
		}
		b.add(r)
	}
	b.addCPU(label+" CPU per run", ss, n)
	return nil
}

// addCPU adds the CPU row: the daemon's CPU per run (with its commands) plus
// this client's, next to os/exec's (this process with its children) and to
// the naive server's. CPU time is much less disturbed by a busy machine than
// wall time. The goal compares the servers: daemon ≤ naive.
func (b *bench) addCPU(label string, ss []*side, n int) {
	per := func(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d.Microseconds())/float64(n)) }
	raw, dmn := ss[0], ss[1]
	r := row{measure: label, baseline: per(raw.cpu) + " os/exec", result: "info"}
	if !dmn.known {
		r.value = "client " + per(dmn.cli) + " (daemon PID unknown)"
		b.add(r)
		return
	}
	r.value = fmt.Sprintf("%s (daemon %s + client %s)", per(dmn.cpu+dmn.cli), per(dmn.cpu), per(dmn.cli))
	r.ratio = ratio(float64(dmn.cpu+dmn.cli) / float64(raw.cpu))
	if len(ss) > 2 && ss[2].known {
		nv := ss[2]
		r.naive = fmt.Sprintf("server %s (+ client %s) naive", per(nv.cpu), per(nv.cli))
		r.nratio = ratio(float64(dmn.cpu)/float64(nv.cpu)) + " server"
		r.goal, r.result = "server ≤ naive server", verdict(dmn.cpu <= nv.cpu)
	}
	b.add(r)
}

func (b *bench) throughput(ctx context.Context, d *daemon) error {
	c, n := b.o.clients, b.o.runs
	ss := b.sides(d, b.streamEcho, b.streamEcho)
	for _, s := range ss[1:] {
		if _, err := concurrently(ctx, c, 2*c, s.run); err != nil {
			return fmt.Errorf("%s: %w", s.name, err) // warm-up: connections open
		}
	}
	// Two halves per side, rotating: raw, daemon, naive, daemon, naive, raw.
	for half := range 2 {
		k := n / 2
		if half == 1 {
			k = n - n/2
		}
		for j := range ss {
			s := ss[(j+half)%len(ss)]
			m := startCPU(s.pid)
			t, err := concurrently(ctx, c, k, s.run)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			self, dc := m.stop()
			s.wall += t
			if s.pid == 0 {
				s.cpu += self
			} else {
				s.cli += self
				s.cpu += dc
				s.known = s.known && dc >= 0
			}
		}
	}
	rate := func(s *side) float64 { return float64(n) / s.wall.Seconds() }
	raw, dmn := ss[0], ss[1]
	r := row{
		measure:  fmt.Sprintf("echo hi: %d clients × %d runs, runs/s", c, n),
		value:    fmt.Sprintf("%.0f/s", rate(dmn)),
		baseline: fmt.Sprintf("%.0f/s os/exec", rate(raw)),
		ratio:    ratio(rate(dmn) / rate(raw)),
		goal:     "≥ 0.90× os/exec, ≥ 1.00× naive",
	}
	ok := rate(dmn)/rate(raw) >= 0.9
	if len(ss) > 2 {
		r.naive, r.nratio = fmt.Sprintf("%.0f/s naive", rate(ss[2])), ratio(rate(dmn)/rate(ss[2]))
		ok = ok && rate(dmn) >= rate(ss[2])
	}
	r.result = verdict(ok)
	b.add(r)
	b.addCPU(fmt.Sprintf("echo hi: %d clients, CPU per run", c), ss, n)
	return nil
}
