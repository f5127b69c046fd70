//go:build reliability && linux

package reliability

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The bounds of issue 10 item 4, measured on the real daemon process
// (/proc/PID/status). idle is VmRSS after a warm-up; the peak is VmHWM, the
// kernel's own high-water mark of the daemon's RSS, so no peak can fall
// between two samples.

// vmKB is a "Vm…:" field of /proc/pid/status in KiB.
func vmKB(t testing.TB, pid int, field string) int64 {
	t.Helper()
	v := procStatusField(pid, field)
	n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(v, "kB")), 10, 64)
	if err != nil {
		t.Fatalf("/proc/%d/status %s: %q", pid, field, v)
	}
	return n
}

// resetHWM restarts the kernel's high-water mark of pid at its current RSS
// (writing 5 to clear_refs), so that the peak measured is the test's alone.
func resetHWM(t testing.TB, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("resetting VmHWM of %d: %v", pid, err)
	}
}

type execAnswer struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
}

// TestExecuteMemory: concurrent legacy /execute calls that each write far
// more than the per-stream cap of \x01 bytes (six bytes each as JSON) to
// stdout and to stderr. Peak RSS must stay within idle + 8 × 2 × cap +
// 32 MiB, with more calls than execution slots (the bound holds for any
// number of calls), at most 8 of them may run at once, and every answer must
// be whole and exact. Today's main peaked at 2.05 GiB for 8 calls of 100 MB.
func TestExecuteMemory(t *testing.T) {
	limit := scale(8<<20, 2<<20)
	size := scale(100_000_000, 16_000_000)
	const slots, calls = 8, 12
	d := startDaemon(t, daemonConfig{env: map[string]string{
		"SANDBOX_EXECUTE_OUTPUT_LIMIT_BYTES": strconv.Itoa(limit),
		"SANDBOX_MAX_EXECUTIONS":             strconv.Itoa(slots),
	}})
	run := func(command string) (execAnswer, error) {
		req, _ := http.NewRequest("POST", d.url+"/execute", strings.NewReader(`{"command":`+strconv.Quote(command)+`}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := d.client.Do(req)
		if err != nil {
			return execAnswer{}, err
		}
		defer resp.Body.Close()
		var a execAnswer
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return a, fmt.Errorf("status %d %s", resp.StatusCode, truncate(string(b), 200))
		}
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			return a, err
		}
		return a, nil
	}
	if a, err := run("echo warm"); err != nil || a.Stdout != "warm\n" {
		t.Fatalf("warm-up: %+v %v", a, err)
	}
	d.closeIdle()
	idle := vmKB(t, d.pid, "VmRSS")
	resetHWM(t, d.pid)

	// Children of the daemon, sampled while the calls run: each call is one sh.
	stopSampling := make(chan struct{})
	sampled := make(chan int)
	go func() {
		maxKids := 0
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			maxKids = max(maxKids, len(childrenOf(d.pid)))
			select {
			case <-stopSampling:
				sampled <- maxKids
				return
			case <-tick.C:
			}
		}
	}()
	gen := fmt.Sprintf(`head -c %d /dev/zero | tr '\0' '\1' & head -c %d /dev/zero | tr '\0' '\1' >&2; wait`, size, size)
	var wg sync.WaitGroup
	var errs errSet
	start := time.Now()
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := run("sh -c " + strconv.Quote(gen))
			if err != nil {
				errs.add("%v", err)
				return
			}
			dropped := size - limit
			wantErr := strings.Repeat("\x01", limit) + fmt.Sprintf("\n[stdout truncated: %d bytes dropped]\n[stderr truncated: %d bytes dropped]\n", dropped, dropped)
			if a.ExitCode != 0 || a.Stdout != strings.Repeat("\x01", limit) || a.Stderr != wantErr {
				errs.add("answer: exit %d, stdout %d bytes, stderr %d bytes ending %q", a.ExitCode, len(a.Stdout), len(a.Stderr), a.Stderr[max(0, len(a.Stderr)-90):])
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(stopSampling)
	maxKids := <-sampled
	peak := vmKB(t, d.pid, "VmHWM")
	bound := idle + int64(slots*2*limit)/1024 + 32<<10
	figure(t, "execute memory: %d concurrent /execute each writing %d bytes of \\x01 to stdout and to stderr (cap %d per stream, %d slots) in %v: VmHWM %d KiB = idle %d + %d KiB; bound idle + %d KiB; at most %d running at once",
		calls, size, limit, slots, took.Round(time.Millisecond), peak, idle, peak-idle, bound-idle, maxKids)
	errs.report(t, "wrong /execute answers")
	if peak > bound && !raceDaemon {
		t.Errorf("peak RSS %d KiB = idle %d + %d KiB; bound idle + 8 × 2 × %d + 32 MiB = %d KiB", peak, idle, peak-idle, limit, bound)
	}
	if maxKids > slots {
		t.Errorf("%d legacy executions ran at once; the bound is %d", maxKids, slots)
	}
	d.assertCleanLogs()
}

// TestRetainedEnvsMemory: 64 retained handles, each created with about
// 1 MiB of envs. A handle keeps a digest of its request for idempotent
// re-posts, not the request: peak RSS idle + 128 MiB. Re-posting the same
// request is still the same command, and a different envs is a conflict.
// Today's main held 968 MB for the 15 minutes of the handles' lifetime.
func TestRetainedEnvsMemory(t *testing.T) {
	const handles = 64
	d := startDaemon(t, daemonConfig{})
	envs := func(i int) map[string]string {
		m := map[string]string{}
		for k := range 7000 { // 7000 × ~140 bytes of JSON: just under the 1 MiB body limit
			m[fmt.Sprintf("VAR_%d_%04d", i, k)] = strings.Repeat(string(rune('a'+k%26)), 120)
		}
		return m
	}
	d.mustCreate(map[string]any{"argv": []string{"true"}})
	d.closeIdle()
	idle := vmKB(t, d.pid, "VmRSS")
	resetHWM(t, d.pid)
	ids := make([]string, handles)
	var wg sync.WaitGroup
	var errs errSet
	next := make(chan int)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				ids[i] = uuid.NewString()
				body, _ := json.Marshal(map[string]any{"argv": []string{"true"}, "envs": envs(i), "command_id": ids[i]})
				if len(body) >= 1<<20 {
					errs.add("body %d bytes: over the limit", len(body))
					continue
				}
				code, data, _, err := d.call("POST", "/v1/commands", body)
				if err != nil || code != http.StatusCreated {
					errs.add("create %d: %d %s %v", i, code, truncate(string(data), 200), err)
					continue
				}
				if _, err := d.waitFinished(ids[i], 30*time.Second); err != nil {
					errs.add("%v", err)
				}
			}
		}()
	}
	for i := range handles {
		next <- i
	}
	close(next)
	wg.Wait()
	errs.report(t, "failed creates")
	d.closeIdle()
	m := d.mustMetrics()
	peak, now := vmKB(t, d.pid, "VmHWM"), vmKB(t, d.pid, "VmRSS")
	figure(t, "retained envs: %d handles with ~1 MiB of envs each: VmHWM %d KiB = idle %d + %d KiB, VmRSS now idle + %d KiB, Go heap in use %.1f MiB, retained %v; bound idle + %d KiB",
		handles, peak, idle, peak-idle, now-idle, m["go_memstats_heap_inuse_bytes"]/(1<<20), m["sandbox_runtime_commands_retained"], 128<<10)
	if m["sandbox_runtime_commands_retained"] < handles {
		t.Errorf("retained %v handles; want >= %d", m["sandbox_runtime_commands_retained"], handles)
	}
	if peak-idle > 128<<10 && !raceDaemon {
		t.Errorf("peak RSS idle + %d KiB; bound idle + 128 MiB", peak-idle)
	}
	if h := m["go_memstats_heap_inuse_bytes"]; h > 64<<20 {
		t.Errorf("Go heap in use %.1f MiB with the handles retained; the envs are still held", h/(1<<20))
	}
	// Idempotency still works on the digest.
	same, _ := json.Marshal(map[string]any{"argv": []string{"true"}, "envs": envs(0), "command_id": ids[0]})
	if code, data, _, err := d.call("POST", "/v1/commands", same); err != nil || code != http.StatusOK {
		t.Errorf("re-post of the same request: %d %s %v; want 200 (the same command)", code, truncate(string(data), 200), err)
	}
	other := envs(0)
	other["VAR_0_0000"] += "x"
	diff, _ := json.Marshal(map[string]any{"argv": []string{"true"}, "envs": other, "command_id": ids[0]})
	if code, data, _, err := d.call("POST", "/v1/commands", diff); err != nil || code != http.StatusConflict {
		t.Errorf("re-post with one env changed: %d %s %v; want 409", code, truncate(string(data), 200), err)
	}
	d.assertCleanLogs()
}

// TestExecuteBodyMemory: concurrent /execute bodies of 1 MiB JSON arrays
// of empty arrays, the shape that costs most per byte to parse. All are
// refused with 422 (not a dict) and peak RSS stays within idle + 8 MiB per
// body + 32 MiB. Today's main peaked at 380 MiB for 8.
func TestExecuteBodyMemory(t *testing.T) {
	const bodies = 8
	d := startDaemon(t, daemonConfig{})
	var b bytes.Buffer
	b.WriteString("[[]")
	for b.Len() < 1<<20-4 {
		b.WriteString(",[]")
	}
	b.WriteString("]")
	body := b.Bytes()
	post := func(body []byte) (int, string, error) {
		req, _ := http.NewRequest("POST", d.url+"/execute", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := d.client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data), err
	}
	if code, data, err := post([]byte(`{"command":"true"}`)); err != nil || code != http.StatusOK {
		t.Fatalf("warm-up: %d %s %v", code, data, err)
	}
	d.closeIdle()
	idle := vmKB(t, d.pid, "VmRSS")
	resetHWM(t, d.pid)
	rounds := scale(5, 2)
	var errs errSet
	for range rounds {
		var wg sync.WaitGroup
		for range bodies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, data, err := post(body)
				if err != nil || code != http.StatusUnprocessableEntity || !strings.Contains(data, "type_error.dict") {
					errs.add("1 MiB [[],[],…]: %d %s %v; want 422 type_error.dict", code, truncate(data, 200), err)
				}
			}()
		}
		wg.Wait()
	}
	peak := vmKB(t, d.pid, "VmHWM")
	bound := int64(bodies*8<<10 + 32<<10)
	figure(t, "execute bodies: %d rounds of %d concurrent /execute bodies of %d bytes [[],[],…]: VmHWM %d KiB = idle %d + %d KiB; bound idle + %d KiB",
		rounds, bodies, len(body), peak, idle, peak-idle, bound)
	errs.report(t, "wrong answers")
	if peak-idle > bound && !raceDaemon {
		t.Errorf("peak RSS idle + %d KiB; bound idle + %d KiB (8 MiB per body + 32 MiB)", peak-idle, bound)
	}
	d.assertCleanLogs()
}

// TestExecuteNonReader: a client that never reads its /execute answer is
// cut once it falls behind the answer's minimum rate (256 KiB/s after
// 10 s), which frees its execution slot: with one slot, the next call
// completes, and the first connection ends without the whole answer.
// Today's main blocks in that write forever, holding the answer's memory.
func TestExecuteNonReader(t *testing.T) {
	const limit = 8 << 20
	d := startDaemon(t, daemonConfig{env: map[string]string{
		"SANDBOX_EXECUTE_OUTPUT_LIMIT_BYTES": strconv.Itoa(limit),
		"SANDBOX_MAX_EXECUTIONS":             "1",
	}})
	c, err := net.Dial("tcp", d.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"command":"sh -c \"head -c 8388608 /dev/zero | tr '\\\\0' '\\\\1'\""}`
	fmt.Fprintf(c, "POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// The answer is ~48 MiB of JSON (\u0001 per byte); this client reads
	// none of it past its first byte: wait until the answer has begun ("{"
	// after the headers and any heartbeat spaces), so that this call holds
	// the only slot. The next call needs it.
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	for {
		b, err := br.ReadByte()
		if err != nil {
			t.Fatalf("the first call's answer did not begin: %v", err)
		}
		if b == '{' {
			break
		}
	}
	start := time.Now()
	code, data, _, err := d.callTimeout("POST", "/execute", map[string]any{"command": "echo next"}, 90*time.Second)
	waited := time.Since(start)
	if err != nil || code != http.StatusOK || !strings.Contains(string(data), `"stdout":"next\n"`) {
		t.Fatalf("the call after a non-reader: %d %s %v after %v; want 200 with next", code, truncate(string(data), 200), err, waited)
	}
	// Now read what the non-reader was sent: not the whole answer.
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	n, rerr := io.Copy(io.Discard, br)
	figure(t, "execute non-reader: the next call (1 slot) waited %v; the non-reader's connection then gave %d bytes and ended with %v (whole answer ~%d bytes)",
		waited.Round(time.Millisecond), n, rerr, 6*limit)
	if n >= int64(6*limit) {
		t.Errorf("the non-reader got the whole answer (%d bytes): it was never cut", n)
	}
	if ne, ok := rerr.(net.Error); ok && ne.Timeout() {
		t.Errorf("the non-reader's connection stayed open")
	}
	d.assertCleanLogs()
}

// TestBodyDecodeMemory: many concurrent bodies of just under 1 MiB of the
// shapes that cost most to decode: a create with ~87,000 envs keys, and an
// /execute of "echo a a a …" (500,000 words once split). At most 4 bodies
// over 64 KiB are decoded at once, and an /execute waiting for a slot
// keeps its command, not its words, so the peak does not grow with the
// number of bodies beyond the 1 × (and the GC's slack) of each waiting
// body: VmHWM within idle + 256 MiB + 4 MiB per body (the 8 executions'
// words and their copies for execve, and the GC's slack, vary most).
// Today's main: 24 of the creates took 654 MiB, 60 of either 1.2–1.5 GB.
func TestBodyDecodeMemory(t *testing.T) {
	bodies := scale(60, 24)
	decodePeakMiB := 256 + 4*bodies
	var eb bytes.Buffer
	eb.WriteString(`{"argv":["true"],"envs":{`)
	for k := 0; k < 87000; k++ {
		if k > 0 {
			eb.WriteByte(',')
		}
		fmt.Fprintf(&eb, `"K%05d":""`, k)
	}
	eb.WriteString(`}}`)
	create := eb.Bytes()
	execute := []byte(`{"command":"echo` + strings.Repeat(" a", 500_000) + `"}`)
	if len(create) >= 1<<20 || len(execute) >= 1<<20 {
		t.Fatalf("bodies of %d and %d bytes: over the limit", len(create), len(execute))
	}
	post := func(d *daemon, path string, body []byte) (int, string, error) {
		req, _ := http.NewRequest("POST", d.url+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := d.client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data), err
	}
	for _, c := range []struct {
		name, path string
		body       []byte
		ok         func(code int, data string) bool
	}{
		{"create with 87,000 envs", "/v1/commands", create, func(code int, data string) bool {
			return code == http.StatusCreated || code == http.StatusTooManyRequests
		}},
		{"/execute of 500,000 words", "/execute", execute, func(code int, data string) bool {
			return code == http.StatusOK && strings.Contains(data, `"exit_code"`)
		}},
	} {
		d := startDaemon(t, daemonConfig{}) // each shape on a daemon of its own
		if code, data, err := post(d, "/execute", []byte(`{"command":"true"}`)); err != nil || code != http.StatusOK {
			t.Fatalf("warm-up: %d %s %v", code, data, err)
		}
		d.closeIdle()
		idle := vmKB(t, d.pid, "VmRSS")
		resetHWM(t, d.pid)
		var wg sync.WaitGroup
		var errs errSet
		counts := map[int]int{}
		var mu sync.Mutex
		start := time.Now()
		for range bodies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, data, err := post(d, c.path, c.body)
				mu.Lock()
				counts[code]++
				mu.Unlock()
				if err != nil || !c.ok(code, data) {
					errs.add("%s: %d %s %v", c.name, code, truncate(data, 200), err)
				}
			}()
		}
		wg.Wait()
		took := time.Since(start)
		peak := vmKB(t, d.pid, "VmHWM")
		figure(t, "decode memory: %d concurrent %s (%d bytes each) in %v, answers %v: VmHWM %d KiB = idle %d + %d KiB (%.1f × one body per body); bound idle + %d MiB",
			bodies, c.name, len(c.body), took.Round(time.Millisecond), counts, peak, idle, peak-idle, float64(peak-idle)*1024/float64(len(c.body))/float64(bodies), decodePeakMiB)
		errs.report(t, "wrong answers")
		if peak-idle > int64(decodePeakMiB)<<10 && !raceDaemon {
			t.Errorf("%s: peak RSS idle + %d KiB for %d bodies; bound idle + %d MiB", c.name, peak-idle, bodies, decodePeakMiB)
		}
		d.assertCleanLogs()
		d.stop(30 * time.Second)
	}
}

// TestAnnouncedBodies: connections that announce a 1 MiB body, send 12
// bytes of it and wait. A body's buffer grows as its bytes arrive, so they
// cost their sockets, not what they announce: VmHWM within idle + 32 MiB.
// Today's main grew the buffer to Content-Length up front: 200 such
// connections took 200 MiB, ~300 got PID 1 OOM-killed in a 256 MiB pod.
func TestAnnouncedBodies(t *testing.T) {
	conns := scale(200, 200)
	d := startDaemon(t, daemonConfig{})
	if code, _ := d.mustCall("POST", "/execute", map[string]any{"command": "true"}); code != http.StatusOK {
		t.Fatalf("warm-up: %d", code)
	}
	d.closeIdle()
	idle := vmKB(t, d.pid, "VmRSS")
	resetHWM(t, d.pid)
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for i := range conns {
		path := "/execute"
		if i%2 == 1 {
			path = "/v1/commands"
		}
		c, err := net.Dial("tcp", d.addr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{\"command\":\"", path)
	}
	// Let every handler start reading.
	poll(3*time.Second, 100*time.Millisecond, func() (bool, string) { return false, "" })
	peak := vmKB(t, d.pid, "VmHWM")
	figure(t, "announced bodies: %d connections announcing 1 MiB and sending 12 bytes: VmHWM %d KiB = idle %d + %d KiB; bound idle + 32 MiB",
		conns, peak, idle, peak-idle)
	if peak-idle > 32<<10 && !raceDaemon {
		t.Errorf("peak RSS idle + %d KiB for %d bodies of 12 bytes; bound idle + 32 MiB", peak-idle, conns)
	}
	if code, _ := d.mustCall("GET", "/v1/health", nil); code != http.StatusOK {
		t.Errorf("health: %d", code)
	}
}
