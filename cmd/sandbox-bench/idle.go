package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The idle scenario: how often an idle daemon wakes up. A Go process with
// nothing to do sleeps in the kernel until a timer or a descriptor wakes it;
// every wake-up costs a few context switches (the thread that runs the timer,
// the goroutine it readies, sysmon). The goal of issue 16 is that no timer
// wakes the daemon more often than once every 10 s. The figure is the number
// of wake-ups during -idle-window (10 s), from 3 s after it served a few
// requests: runs of 100 ms slots in which the context switches of its
// threads grew (one timer firing costs 20–60 switches, mostly sysmon backing
// off from 20 µs polls to its deep sleep, within a few ms).

// ctxSwitches sums voluntary and involuntary context switches over every
// thread of pid.
func ctxSwitches(pid int) (int64, error) {
	dirs, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/status")
	if err != nil || len(dirs) == 0 {
		return 0, fmt.Errorf("/proc/%d/task: %v", pid, err)
	}
	var n int64
	for _, f := range dirs {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that just ended
		}
		for _, line := range strings.Split(string(data), "\n") {
			if name, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(name, "ctxt_switches") {
				k, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += k
			}
		}
	}
	return n, nil
}

func (b *bench) idle(ctx context.Context, d *daemon) error {
	if d.pid == 0 {
		b.note("idle: skipped: the daemon's PID is unknown (give -pid with -addr)")
		return nil
	}
	if err := b.warmUp(ctx, d); err != nil {
		return err
	}
	b.client.CloseIdleConnections() // an idle daemon has no client
	// The Go runtime finishes its own work first (GC, returning memory to the
	// kernel): the first seconds after the requests are not idle yet.
	if err := sleep(ctx, 3*time.Second); err != nil {
		return err
	}
	w := b.o.idleWindow
	first, err := ctxSwitches(d.pid)
	if err != nil {
		return err
	}
	// A wake-up is a run of 100 ms slots in which the daemon switched.
	wakes, last, wasActive := 0, first, false
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for end := time.Now().Add(w); time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		n, err := ctxSwitches(d.pid)
		if err != nil {
			return err
		}
		active := n > last
		if active && !wasActive {
			wakes++
		}
		last, wasActive = n, active
	}
	per10 := float64(wakes) * float64(10*time.Second) / float64(w)
	b.add(row{
		measure:  fmt.Sprintf("daemon idle: wake-ups in %s with no request", w),
		value:    fmt.Sprintf("%d (%.1f per 10 s; %d context switches)", wakes, per10, last-first),
		baseline: "—",
		goal:     "≤ 1 per 10 s",
		result:   verdict(per10 <= 1),
	})
	return nil
}
