package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"
)

// The lossless-follow figure (issue 16): the highest producer rate at which
// one live follower receives every byte of the stream, with the default
// 1 MiB ring and no gap. The producer is this binary's -produce with -rate
// (paced 64 KiB writes); the rate is found by bisection on a log scale,
// within a time budget per transport. A probe stops at the first gap.

// producePaced writes n bytes like produce, at most rate bytes/s on
// average: after each 64 KiB write it sleeps when it is ahead of schedule
// (by more than 200 µs; Go's timers make a shorter sleep last ~1 ms, so
// bursts of ~1 ms of output at full speed remain). It never makes up for
// time it lost: when it is more than 5 ms late the schedule restarts, so a
// descheduled producer does not then write a long burst at pipe speed.
func producePaced(w io.Writer, n int64, rate float64) error {
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = 'a' + byte(i/64%26)
		if i%64 == 63 {
			buf[i] = '\n'
		}
	}
	t0 := time.Now()
	var sent int64 // since t0
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
		sent += k
		due := t0.Add(time.Duration(float64(sent) / rate * 1e9))
		switch ahead := time.Until(due); {
		case ahead > 200*time.Microsecond:
			time.Sleep(ahead)
		case ahead < -5*time.Millisecond:
			t0, sent = time.Now(), 0
		}
	}
	return nil
}

var errGapSeen = errors.New("gap: the follower fell out of the ring")

// gapStop ends a stream at its first gap event (the probe failed: no need
// to read the rest). The daemon writes "type" first in every event.
type gapStop struct{ lineSource }

var gapPrefix = []byte(`{"type":"gap"`)

func (g gapStop) next() ([]byte, error) {
	line, err := g.lineSource.next()
	if err == nil && bytes.HasPrefix(bytes.TrimLeft(line, " \t\r\n"), gapPrefix) {
		return nil, errGapSeen
	}
	return line, err
}

// losslessProbe streams n bytes produced at rate to one follower over
// transport ("NDJSON" or "WebSocket"); ok when every byte arrived with no
// gap. achieved is the bytes received / time from release to exit.
func (b *bench) losslessProbe(ctx context.Context, d *daemon, transport string, n int64, rate float64) (ok bool, achieved float64, err error) {
	exe, err := os.Executable()
	if err != nil {
		return false, 0, err
	}
	cmdline := fmt.Sprintf("exec %s -produce %d -rate %.0f", shellQuote(exe), n, rate)
	var st followStats
	var id string
	var src lineSource
	t0 := time.Now()
	open := func(cursor int64) error {
		if transport == "WebSocket" {
			s, err := b.dialAttach(ctx, d, id, cursor)
			src = gapStop{s}
			return err
		}
		resp, err := b.do(ctx, "GET", d.url(fmt.Sprintf("/v1/commands/%s/output?cursor=%d&follow=true&max_wait=60%s", id, cursor, b.holdQuery())), nil)
		if err != nil {
			return err
		}
		if resp.StatusCode != 200 {
			resp.Body.Close()
			return &httpError{resp.StatusCode, "re-open"}
		}
		src = gapStop{newNDJSONSource(resp.Body)}
		return nil
	}
	if id, err = b.createGated(ctx, d, cmdline); err != nil {
		return false, 0, err
	}
	defer b.kill(d, id) // a no-op once it finished
	if err := open(0); err != nil {
		return false, 0, err
	}
	t0 = time.Now()
	if err := b.release(ctx, d, id); err != nil {
		src.Close()
		return false, 0, err
	}
	for {
		err = consume(src, &st, false)
		src.Close()
		if !errors.Is(err, errWindowEnd) {
			break
		}
		if err = open(st.Next); err != nil {
			break
		}
	}
	elapsed := time.Since(t0)
	if errors.Is(err, errGapSeen) {
		return false, mbps(st.Bytes, elapsed), nil
	}
	if err != nil {
		return false, 0, err
	}
	if st.Gaps != 0 || st.Bytes != n {
		return false, mbps(st.Bytes, elapsed), nil
	}
	return true, mbps(st.Bytes, elapsed), nil
}

func (b *bench) lossless(ctx context.Context, d *daemon) error {
	for _, tr := range []string{"NDJSON", "WebSocket"} {
		if err := b.losslessOf(ctx, d, tr); err != nil {
			return fmt.Errorf("%s: %w", tr, err)
		}
	}
	return nil
}

// losslessOf bisects the producer rate (log scale) between 25 MB/s and the
// raw pipe's rate for one transport, within -lossless-budget.
func (b *bench) losslessOf(ctx context.Context, d *daemon, tr string) error {
	n := b.o.losslessBytes
	got, t, err := rawStream(ctx, b.streamShell(n))
	if err != nil {
		return err
	}
	pipe := mbps(got, t)
	// Bisection between lo (assumed lossless until a probe says so; a probe
	// at 25 MB/s of 256 MiB would take 11 s) and the pipe's rate.
	lo, hi := 25.0, math.Max(pipe, 50) // MB/s
	loOK := false
	best := 0.0 // achieved rate of the fastest lossless probe
	var probes []string
	deadline := time.Now().Add(b.o.losslessBudget)
	for step := 0; step < 10 && hi/lo > 1.08 && time.Now().Before(deadline) && ctx.Err() == nil; step++ {
		r := math.Sqrt(lo * hi)
		if want := time.Duration(float64(n) / (r * 1e6) * float64(time.Second)); want > time.Until(deadline) {
			probes = append(probes, fmt.Sprintf("%.0f: not probed (%.1f s of output, past the budget)", r, want.Seconds()))
			break // a slow probe would overrun the budget (and -deadline)
		}
		ok, ach, err := b.losslessProbe(ctx, d, tr, n, r*1e6)
		if err != nil {
			return err
		}
		probes = append(probes, fmt.Sprintf("%.0f→%s", r, map[bool]string{true: "ok", false: "gap"}[ok]))
		if ok {
			lo, loOK = r, true
			best = math.Max(best, ach)
		} else {
			hi = r
		}
	}
	r := row{
		measure:  fmt.Sprintf("lossless follow, %s of paced writes, 1 %s follower, 1 MiB ring%s", size(n), tr, b.holdLabel()),
		baseline: fmt.Sprintf("%.0f MB/s pipe", pipe),
		goal:     "≥ 1000 MB/s",
	}
	if loOK {
		r.value = fmt.Sprintf("%.0f MB/s (received %.0f MB/s; < %.0f MB/s lost)", lo, best, hi)
		r.ratio = ratio(lo / pipe)
		r.result = verdict(lo >= 1000)
	} else if hi < math.Max(pipe, 50) {
		r.value = fmt.Sprintf("< %.0f MB/s (no probe was lossless)", hi)
		r.result = "missed"
	} else {
		r.value, r.result = "not measured: -lossless-budget too short", "n/a"
	}
	b.add(r)
	b.note("lossless %s: probes (MB/s requested): %s", tr, strings.Join(probes, ", "))
	return nil
}
