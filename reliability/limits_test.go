//go:build reliability && linux

package reliability

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestLimitsAsContract checks the limits of protocol.md §2 against the real
// daemon: the 17th concurrent command gets 429 and starts nothing; at 64
// retained the oldest finished (earliest finished_at) is evicted, never a
// running one; an expired id answers 410 expired; unknown ids 404.
func TestLimitsAsContract(t *testing.T) {
	d := startDaemon(t, daemonConfig{env: map[string]string{
		"SANDBOX_KILL_GRACE_SECONDS": "0.2",
	}})

	// 16 running commands.
	var sleeps []cmdStatus
	for range 16 {
		sleeps = append(sleeps, d.mustCreate(map[string]any{"argv": []string{"sleep", "300"}}))
	}
	kids := len(childrenOf(d.pid))
	m0 := d.mustMetrics()

	// The 17th, plain, streaming and with a command_id, 50 times at once.
	var wg sync.WaitGroup
	var errs errSet
	ids := make([]string, 50)
	for i := range 50 {
		ids[i] = uuid.NewString()
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := map[string]any{"argv": []string{"sleep", "300"}}
			path := "/v1/commands"
			switch i % 3 {
			case 1:
				path += "?stream=true"
			case 2:
				body["command_id"] = ids[i]
			}
			code, data, h, err := d.call("POST", path, body)
			switch {
			case err != nil:
				errs.add("17th create: %v", err)
			case code != http.StatusTooManyRequests || errorCode(data) != "too_many_running":
				errs.add("17th create %s: got %d %s; want 429 too_many_running", path, code, data)
			case h.Get("Retry-After") == "":
				errs.add("17th create: 429 without Retry-After")
			case !strings.HasPrefix(h.Get("Content-Type"), "application/json"):
				errs.add("17th create %s: Content-Type %q; want a plain JSON error", path, h.Get("Content-Type"))
			}
		}()
	}
	wg.Wait()
	errs.report(t, "wrong answers to the 17th command")
	kidsAfter := len(childrenOf(d.pid))
	m1 := d.mustMetrics()
	figure(t, "limits: 50 refused 17th creates; daemon children before %d after %d; started_total before %v after %v",
		kids, kidsAfter, m0["sandbox_runtime_commands_started_total"], m1["sandbox_runtime_commands_started_total"])
	if kids != 16 || kidsAfter != kids {
		t.Errorf("daemon children: %d before, %d after the refused creates; want 16 and 16", kids, kidsAfter)
	}
	if m1["sandbox_runtime_commands_started_total"] != m0["sandbox_runtime_commands_started_total"] {
		t.Errorf("started_total moved on refused creates: %v -> %v", m0["sandbox_runtime_commands_started_total"], m1["sandbox_runtime_commands_started_total"])
	}
	for i := 2; i < 50; i += 3 {
		if code, _, _ := d.status(ids[i], 0); code != http.StatusNotFound {
			t.Errorf("refused command_id %s: GET answers %d; want 404 (nothing created)", ids[i], code)
		}
	}

	// Eviction. S16 ends first; then 48 short commands finish one by one;
	// then S1 (the oldest created) ends last.
	if code, st, err := d.kill(sleeps[15].CommandID); err != nil || code != 200 || st.State != "cancelled" {
		t.Fatalf("kill S16: %d %+v %v", code, st, err)
	}
	var trues []cmdStatus
	for range 48 {
		st := d.mustCreate(map[string]any{"argv": []string{"true"}})
		trues = append(trues, d.mustWaitFinished(st.CommandID, 10*time.Second))
	}
	if n := retained(t, d); n != 64 {
		t.Fatalf("retained %d; want 64", n)
	}
	if code, _, err := d.kill(sleeps[0].CommandID); err != nil || code != 200 {
		t.Fatalf("kill S1: %d %v", code, err)
	}
	// 65th handle: the earliest finished_at (S16) goes, not S1 (created first).
	d.mustWaitFinished(d.mustCreate(map[string]any{"argv": []string{"true"}}).CommandID, 10*time.Second)
	expectGone(t, d, sleeps[15].CommandID, "evicted")
	expectState(t, d, sleeps[0].CommandID, "cancelled")
	// Then the short ones, in finished order; running ones never.
	for i := range 12 {
		d.mustWaitFinished(d.mustCreate(map[string]any{"argv": []string{"true"}}).CommandID, 10*time.Second)
		expectGone(t, d, trues[i].CommandID, "evicted")
		if n := retained(t, d); n != 64 {
			t.Errorf("after eviction %d: retained %d; want 64", i, n)
		}
	}
	expectState(t, d, trues[12].CommandID, "exited")
	expectState(t, d, sleeps[0].CommandID, "cancelled")
	for _, s := range sleeps[1:15] {
		expectState(t, d, s.CommandID, "running")
	}
	m2 := d.mustMetrics()
	figure(t, "limits: retained 64 held; evicted_total %v (want 13); running never evicted (14 still running)",
		m2["sandbox_runtime_handles_evicted_total"])
	if m2["sandbox_runtime_handles_evicted_total"] != 13 {
		t.Errorf("handles_evicted_total %v; want 13", m2["sandbox_runtime_handles_evicted_total"])
	}
	if err := d.killAll(); err != nil {
		t.Error(err)
	}

	// Unknown ids.
	for _, id := range []string{uuid.NewString(), "not-a-uuid", strings.ToUpper(uuid.NewString())} {
		if code, _, _ := d.status(id, 0); code != http.StatusNotFound {
			t.Errorf("GET %s: %d; want 404", id, code)
		}
	}
	d.assertCleanLogs()

	// Expiry, on a daemon with a 1 s TTL.
	e := startDaemon(t, daemonConfig{env: map[string]string{"SANDBOX_RESULT_TTL_SECONDS": "1"}})
	st := e.mustCreate(map[string]any{"argv": []string{"true"}})
	fin := e.mustWaitFinished(st.CommandID, 10*time.Second)
	var gotAt time.Time
	ok, msg := poll(5*time.Second, 20*time.Millisecond, func() (bool, string) {
		code, data, _, err := e.call("GET", "/v1/commands/"+st.CommandID, nil)
		if err != nil {
			return false, err.Error()
		}
		if code == http.StatusOK {
			return false, "still 200"
		}
		gotAt = time.Now()
		var ae apiError
		json.Unmarshal(data, &ae)
		if code != http.StatusGone || ae.Error.Code != "gone" || ae.Error.Reason != "expired" {
			return true, "got " + string(data)
		}
		return true, ""
	})
	if !ok || msg != "" {
		t.Fatalf("expired id: %s", msg)
	}
	figure(t, "limits: expired id answered 410 expired %.2fs after finished_at (TTL 1 s)", gotAt.Sub(*fin.FinishedAt).Seconds())
	if code, data := e.mustCall("GET", "/v1/commands/"+strings.ToUpper(st.CommandID), nil); code != http.StatusGone {
		t.Errorf("upper-case expired id: %d %s; want 410", code, data)
	}
	for _, p := range []string{"/output", "/stdin", "/signal", "/kill"} {
		method, body := "GET", any(nil)
		switch p {
		case "/stdin":
			method, body = "POST", map[string]any{"data": "x"}
		case "/signal":
			method, body = "POST", map[string]any{"signal": "SIGINT"}
		case "/kill":
			method = "POST"
		}
		if code, data := e.mustCall(method, "/v1/commands/"+st.CommandID+p, body); code != http.StatusGone {
			t.Errorf("%s %s on an expired id: %d %s; want 410", method, p, code, data)
		}
	}
	e.assertCleanLogs()
}

func retained(t *testing.T, d *daemon) int {
	t.Helper()
	l, err := d.list("")
	if err != nil {
		t.Fatal(err)
	}
	return len(l)
}

func expectGone(t *testing.T, d *daemon, id, reason string) {
	t.Helper()
	code, data := d.mustCall("GET", "/v1/commands/"+id, nil)
	var ae apiError
	json.Unmarshal(data, &ae)
	if code != http.StatusGone || ae.Error.Reason != reason {
		t.Errorf("GET %s: %d %s; want 410 %s", id, code, data, reason)
	}
}

func expectState(t *testing.T, d *daemon, id, state string) {
	t.Helper()
	code, st, err := d.status(id, 0)
	if err != nil || code != http.StatusOK || string(st.State) != state {
		t.Errorf("GET %s: %d state %q err %v; want 200 %s", id, code, st.State, err, state)
	}
}
