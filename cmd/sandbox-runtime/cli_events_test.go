//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// runDetached starts argv with run -d and returns its id.
func runDetached(t *testing.T, env []string, argv ...string) string {
	t.Helper()
	r := runClient(t, env, "", append([]string{"run", "-d", "--"}, argv...)...)
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || len(id) != 36 {
		t.Fatalf("run -d %v: %+v", argv, r)
	}
	return id
}

// TestCLIWait: wait --any returns with the first command to end and its
// exit code; wait of all exits with the first named failure's code;
// --timeout exits 124 naming what still runs; an unknown id is 125.
func TestCLIWait(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	env := d.env()
	slow := runDetached(t, env, "sleep", "60")
	fail := runDetached(t, env, "sh", "-c", "sleep 0.2; exit 3")
	r := runClient(t, env, "", "wait", "--any", slow, fail)
	if r.code != 3 || r.stdout != fail+" exited, exit code 3\n" {
		t.Errorf("wait --any: %+v", r)
	}
	ok := runDetached(t, env, "sh", "-c", "sleep 0.5")
	r = runClient(t, env, "", "wait", ok, fail)
	if r.code != 3 || !strings.Contains(r.stdout, ok+" exited, exit code 0\n") || !strings.Contains(r.stdout, fail+" exited, exit code 3\n") {
		t.Errorf("wait (all): %+v", r)
	}
	r = runClient(t, env, "", "wait", ok)
	if r.code != 0 {
		t.Errorf("wait of a finished command: %+v", r)
	}
	r = runClient(t, env, "", "wait", "--timeout", "0.3", slow, ok)
	if r.code != 124 || !strings.Contains(r.stderr, "timed out after 0.3s; still running: "+slow) {
		t.Errorf("wait --timeout: %+v", r)
	}
	r = runClient(t, env, "", "wait", "6f1d6a4e-0000-4000-8000-000000000000")
	if r.code != 125 || !strings.Contains(r.stderr, "there is no command") {
		t.Errorf("wait of an unknown id: %+v", r)
	}
	if r = runClient(t, env, "", "wait"); r.code != 2 {
		t.Errorf("wait without ids: %+v", r)
	}
	runClient(t, env, "", "kill", slow)
}

// TestCLIEvents: events lists each command's lifecycle in order (and as
// JSON), filtered by type and id; -f follows a command created after it
// started; a cursor of another daemon instance is refused.
func TestCLIEvents(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	env := d.env()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	follow := exec.CommandContext(ctx, binPath, "events", "-f", "--type", "started,exited")
	follow.Env = append(cliEnv(), env...)
	out, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { follow.Process.Kill(); follow.Wait() }()

	id := runDetached(t, env, "sh", "-c", "exit 3")
	br := bufio.NewReader(out)
	for _, want := range []string{`^\d+\t[\d:.]+\tstarted \t` + id + `\tpid \d+\n$`, `^\d+\t[\d:.]+\texited  \t` + id + `\texited, exit code 3, ran [\d.]+s\n$`} {
		line, err := br.ReadString('\n')
		if !regexp.MustCompile(want).MatchString(line) {
			t.Fatalf("events -f: %q (%v); want %s", line, err, want)
		}
	}

	r := runClient(t, env, "", "events", "--json", "--id", id)
	var types []string
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var ev wire.FeedEvent
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.CommandID != id {
			t.Fatalf("events --json line %q: %v", l, err)
		}
		types = append(types, ev.Type)
	}
	if r.code != 0 || strings.Join(types, ",") != "created,started,exited" {
		t.Errorf("events --json --id: %+v", r)
	}
	r = runClient(t, env, "", "events", "--type", "exited")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || !regexp.MustCompile(`^cursor [0-9a-f]{16}-\d+\n$`).MatchString(r.stderr) {
		t.Errorf("events --type exited: %+v", r)
	}
	r = runClient(t, env, "", "events", "--cursor", "0123456789abcdef-1")
	if r.code != 125 || !strings.Contains(r.stderr, "from before the daemon restarted") {
		t.Errorf("events with a stale cursor: %+v", r)
	}
	r = runClient(t, env, "", "events", "--type", "bogus")
	if r.code != 125 || !strings.Contains(r.stderr, `unknown event type "bogus"`) {
		t.Errorf("events --type bogus: %+v", r)
	}
}
