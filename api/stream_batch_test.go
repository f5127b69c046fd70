package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// TestStreamBatchedCutExact: a follower that is behind gets several reads'
// events in one write (streamEvents flushes only once it has caught up).
// The client here cuts every connection after a random number of body
// bytes, inside a batch and inside a line, and re-opens at the next_cursor
// of its last complete line: the bytes must arrive exactly once, each
// event holding the bytes written at its cursor, live (the command still
// writing) and replayed from 0 after its exit (every read finds more
// retained: the batching path throughout).
func TestStreamBatchedCutExact(t *testing.T) {
	ts := newTestServer(t, func(c *runtime.Config, o *Options) {
		atQuietAPI(c, o)
		c.OutputLimit = 8 << 20 // the whole output stays retained: no gaps
	})
	rng := propRand(t)
	out := randomOutput(rng, 3<<20)
	var spec []byte
	for o := out; len(o) > 0; {
		n := min(len(o), 1+rng.IntN(200<<10))
		spec = appendSpecWrite(spec, 1, time.Duration(rng.IntN(2000))*time.Microsecond, o[:n])
		o = o[n:]
	}
	path := filepath.Join(t.TempDir(), "spec")
	if err := os.WriteFile(path, spec, 0o600); err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	st := atCreate(t, ts, string(marshal(map[string]any{"argv": []string{exe}, "envs": map[string]string{helperWriteSpec: path}})))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, mode := range []string{"live", "replayed"} {
		p := &propReader{t: t, model: out}
		cuts := 0
		for !p.done {
			if ctx.Err() != nil {
				t.Fatalf("%s: not done in 60 s (at %d of %d bytes, %d cuts)", mode, p.next, len(out), cuts)
			}
			// Cut after 1 B to 256 KiB of body: often several 64 KiB batches.
			limit := 1 + rng.Int64N(256<<10)
			url := fmt.Sprintf("%s/v1/commands/%s/output?cursor=%d&follow=true&max_wait=30", ts.URL, st.CommandID, p.next)
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("%s: output at %d: %d %s", mode, p.next, resp.StatusCode, b)
			}
			body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
			resp.Body.Close() // the cut: whatever the daemon wrote after is dropped
			if err != nil {
				t.Fatalf("%s: reading at %d: %v", mode, p.next, err)
			}
			for line := range bytes.Lines(body) {
				if !bytes.HasSuffix(line, []byte("\n")) {
					break // the line the cut went through: re-read from its cursor
				}
				if !p.event(bytes.TrimSuffix(line, []byte("\n"))) {
					break
				}
			}
			cuts++
		}
		if p.next != int64(len(out)) || p.gaps != 0 || !bytes.Equal(p.stdout, out) {
			t.Fatalf("%s: exit at %d, %d gaps, %d bytes received; want all %d bytes once, no gap", mode, p.next, p.gaps, len(p.stdout), len(out))
		}
		t.Logf("%s: %d bytes in %d events over %d connections", mode, len(out), p.events, cuts)
	}
}
