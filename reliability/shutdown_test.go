//go:build reliability && linux

package reliability

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestShutdownUnderLoad sends SIGTERM while 16 commands run (half of them
// ignore SIGTERM, so the grace and SIGKILL are needed) and 50 clients
// stream their output: the daemon exits 0 within 25 s, every command ends
// `terminated`, every stream ends with a final line (exit or end).
func TestShutdownUnderLoad(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	const nCmds, nStreams = 16, 50
	var cmds []cmdStatus
	for i := range nCmds {
		script := `while :; do echo tick; sleep 0.1; done`
		if i%2 == 1 {
			script = `trap '' TERM; ` + script
		}
		cmds = append(cmds, d.mustCreate(map[string]any{"argv": []string{"sh", "-c", script}}))
	}

	type result struct {
		cmd    string
		last   event
		lines  int
		err    error
		states map[string]int // exit events' status.state
	}
	results := make([]result, nStreams)
	var ready, done sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: nStreams}}
	for i := range nStreams {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			r := &results[i]
			r.cmd = cmds[i%nCmds].CommandID
			r.states = map[string]int{}
			signalled := false
			defer func() {
				if !signalled {
					ready.Done()
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", d.url+"/v1/commands/"+r.cmd+"/output?max_wait=60", nil)
			resp, err := client.Do(req)
			if err != nil {
				r.err = err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				r.err = fmt.Errorf("status %d", resp.StatusCode)
				return
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 4<<20)
			for sc.Scan() {
				var e event
				if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
					r.err = err
					return
				}
				r.lines++
				r.last = e
				if e.Type == "exit" && e.Status != nil {
					r.states[string(e.Status.State)]++
				}
				if !signalled {
					signalled = true
					ready.Done()
				}
			}
			r.err = sc.Err()
		}()
	}
	ready.Wait() // every stream has its first line
	m := d.mustMetrics()
	figure(t, "shutdown: %v commands running, %v stream clients before SIGTERM", m["sandbox_runtime_commands_running"], m["sandbox_runtime_stream_clients"])

	// SIGTERM, and watch health answer 503 while draining.
	health := make(chan []int, 1)
	go func() {
		var seen []int
		c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		poll(5*time.Second, 20*time.Millisecond, func() (bool, string) {
			resp, err := c.Get(d.url + "/v1/health")
			if err != nil {
				return true, "" // the listener is closed
			}
			resp.Body.Close()
			if len(seen) == 0 || seen[len(seen)-1] != resp.StatusCode {
				seen = append(seen, resp.StatusCode)
			}
			return resp.StatusCode == http.StatusServiceUnavailable, ""
		})
		health <- seen
	}()
	code, took, err := d.stop(30 * time.Second)
	done.Wait()
	seen := <-health

	exits, ends, terminated := 0, 0, 0
	cmdTerminated := map[string]bool{}
	for i, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("stream %d (%s): %v after %d lines", i, r.cmd, r.err, r.lines)
		case r.last.Type == "exit":
			exits++
			if r.last.Status != nil && r.last.Status.State == "terminated" {
				terminated++
				cmdTerminated[r.cmd] = true
			} else {
				t.Errorf("stream %d: exit event with state %+v; want terminated", i, r.last.Status)
			}
		case r.last.Type == "end" && r.last.Reason == "shutting_down":
			ends++
		default:
			t.Errorf("stream %d ended with %+v; want exit or end(shutting_down)", i, r.last)
		}
	}
	figure(t, "shutdown: SIGTERM with %d commands and %d streams -> exit %d in %v; streams ended exit(terminated) %d, end(shutting_down) %d; commands seen terminated %d/%d; health during drain %v",
		nCmds, nStreams, code, took.Round(time.Millisecond), terminated, ends, len(cmdTerminated), nCmds, seen)
	if err != nil || code != 0 {
		t.Errorf("exit %d, %v; want 0", code, err)
	}
	if took > 25*time.Second {
		t.Errorf("shutdown took %v; want <= 25 s", took)
	}
	if len(cmdTerminated) != nCmds {
		t.Errorf("only %d of %d commands were seen terminated in an exit event", len(cmdTerminated), nCmds)
	}
	// Nothing the commands started may survive the daemon.
	for _, c := range cmds {
		if left := inGroup(c.PID); len(left) > 0 {
			t.Errorf("group %d outlived the daemon: %+v", c.PID, left)
			for _, p := range left {
				syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
	}
	d.assertCleanLogs()
}
