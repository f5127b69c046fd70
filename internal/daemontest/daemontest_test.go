package daemontest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

var bin string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "daemontest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if bin, err = Build(ctx, BuildOptions{Dir: dir, Version: "launcher-test", Race: RaceEnabled}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// TestStartPolicy: the caller's SANDBOX_* variables do not reach the
// daemon, the test's own settings do, the listening line is on loopback
// with the stamped version, the log goes to the file, and Stop ends the
// daemon by SIGTERM with exit code 0.
func TestStartPolicy(t *testing.T) {
	t.Setenv("SANDBOX_MAX_RUNNING", "1")      // the developer's shell: must not leak in
	t.Setenv("SANDBOX_RUNTIME_ADDR", ":8888") // nor this, which would listen on every interface
	base := t.TempDir()
	logPath := filepath.Join(t.TempDir(), "d.log")
	d, err := Start(context.Background(), Options{Bin: bin, BaseDir: base, LogPath: logPath,
		Env: []string{"SANDBOX_MAX_RETAINED=70"}, CheckLeaks: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d.Addr, "127.0.0.1:") || d.Listening["version"] != "launcher-test" || d.Listening["base_dir"] != base {
		t.Errorf("listening line %v", d.Listening)
	}
	resp, err := http.Get(d.URL + "/v1/info")
	if err != nil {
		t.Fatal(err)
	}
	var info wire.Info
	json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if info.Limits.MaxRunning == 1 || info.Limits.MaxRetained != 70 {
		t.Errorf("limits %+v: want the caller's SANDBOX_MAX_RUNNING=1 ignored and max_retained 70", info.Limits)
	}
	code, _, err := d.Stop()
	if err != nil || code != 0 {
		t.Errorf("Stop: exit %d, %v; want 0, nil", code, err)
	}
	if d.Alive() {
		t.Error("alive after Stop")
	}
	b, _ := os.ReadFile(logPath)
	if !strings.Contains(string(b), `"msg":"listening"`) || !strings.Contains(string(b), `"msg":"stopped"`) {
		t.Errorf("the log file lacks the listening and stopped lines:\n%s", b)
	}
	if code, _, err := d.Stop(); err != nil || code != 0 {
		t.Errorf("a second Stop: %d %v; want the same exit, no new error", code, err)
	}
}

// TestStartFailureShowsLog: a daemon that refuses its settings fails
// Start at once, with the end of its log in the error.
func TestStartFailureShowsLog(t *testing.T) {
	_, err := Start(context.Background(), Options{Bin: bin, BaseDir: t.TempDir(),
		Env: []string{"SANDBOX_MAX_RUNNING=many"}, StartTimeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "exited before listening") || !strings.Contains(err.Error(), "SANDBOX_MAX_RUNNING") {
		t.Fatalf("Start with a bad setting: %v; want it refused with the daemon's reason", err)
	}
}

// TestLeakChecks: a stand-in daemon that leaves a process group of its own
// behind and panics on SIGTERM fails Stop's leak checks on both counts, and
// the leftover group is killed.
func TestLeakChecks(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "fake-daemon")
	script := `#!/bin/sh
setsid sleep 1000 &
while [ "$(cut -d' ' -f5 /proc/$!/stat)" != "$!" ]; do :; done # until it leads its group
echo "$!" > "$SANDBOX_BASE_DIR/../leftover"
sleep 1000 &
trap 'kill $!; echo "panic: boom" >&2; exit 2' TERM
echo '{"level":"info","msg":"listening","addr":"127.0.0.1:1"}' >&2
wait
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := Start(context.Background(), Options{Bin: fake, BaseDir: filepath.Join(dir, "base"), CheckLeaks: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "leftover"))
	if err != nil {
		t.Fatal(err)
	}
	var leftover int
	fmt.Sscan(string(b), &leftover)
	code, _, err := d.Stop()
	if code != 2 || err == nil || !strings.Contains(err.Error(), "panicked:\npanic: boom") ||
		!strings.Contains(err.Error(), fmt.Sprintf("process group %d outlived the daemon", leftover)) {
		t.Fatalf("Stop: exit %d, %v; want 2 with the panic and group %d reported", code, err, leftover)
	}
	if left := groupMembers(leftover); len(left) != 0 {
		// The SIGKILL was sent; the kernel may take a moment to make it a zombie.
		ok := false
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if len(groupMembers(leftover)) == 0 {
				ok = true
				break
			}
		}
		if !ok {
			t.Errorf("group %d still has %v after the leak check", leftover, left)
		}
	}
}
