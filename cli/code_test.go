//go:build linux

package cli

import (
	"bytes"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/internal/daemontest"
)

// runOut is runIn with the client's stdout too.
func runOut(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	return runOutIn(t, url, os.DevNull, args...)
}

// runOutIn is runOut with stdin read from the file named in.
func runOutIn(t *testing.T, url, in string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	getenv := func(k string) string {
		if k == "SANDBOX_RUNTIME_URL" {
			return url
		}
		return ""
	}
	null, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	done := make(chan int, 1)
	go func() { done <- Run(args, Env{Getenv: getenv, Stdin: null, Stdout: &stdout, Stderr: &stderr}) }()
	select {
	case code := <-done:
		return code, stdout.String(), stderr.String()
	case <-time.After(60 * time.Second):
		t.Fatalf("%v still running after 60 s", args)
		return 0, "", ""
	}
}

// TestCodeCLI: `sandbox-runtime code` against the real daemon binary with
// Debian's python3 (SANDBOX_PYTHON): text on stdout, a matplotlib figure
// saved as a PNG that decodes, exit codes by the end status, and a kept
// context's state across runs.
func TestCodeCLI(t *testing.T) {
	py := "/usr/bin/python3"
	if exec.Command(py, "-c", "import matplotlib").Run() != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI: /usr/bin/python3 has no matplotlib (.ci/run installs python3-matplotlib)")
		}
		t.Skip("machine precondition: /usr/bin/python3 with matplotlib")
	}
	d := daemontest.StartT(t, daemontest.Options{
		Bin: daemonBin, BaseDir: t.TempDir(), LogPath: filepath.Join(t.TempDir(), "daemon.log"), CheckLeaks: true,
		Env: []string{"SANDBOX_PYTHON=" + py},
	})
	out := t.TempDir()
	code, stdout, stderr := runOut(t, d.URL, "code", "--out", out,
		"import matplotlib.pyplot as plt, os\nprint('hi')\nos.system('echo sub')\nplt.plot([1, 2], [3, 4])\n6*7")
	if code != 0 || stdout != "hi\nsub\n42\n" || !strings.Contains(stderr, "image/png saved to") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	f, err := os.Open(filepath.Join(out, "out-1.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatalf("the saved figure: %v", err)
	}
	if code, _, stderr := runOut(t, d.URL, "code", "1/0"); code != 1 || !strings.Contains(stderr, "ZeroDivisionError: division by zero") {
		t.Fatalf("1/0: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runOut(t, d.URL, "code", "--timeout", "0.5", "while True:\n    try: __import__('time').sleep(5)\n    except KeyboardInterrupt: pass"); code != 124 || !strings.Contains(stderr, "timed_out") {
		t.Fatalf("timeout: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runOut(t, d.URL, "code", "--keep", "k = 'kept'")
	id := strings.TrimSpace(strings.TrimPrefix(stderr, "sandbox-runtime code: context "))
	if code != 0 || len(id) != 36 {
		t.Fatalf("--keep: exit %d, stderr %q", code, stderr)
	}
	if code, stdout, _ := runOut(t, d.URL, "code", "--context", id, "k"); code != 0 || stdout != "'kept'\n" {
		t.Fatalf("--context: exit %d, stdout %q", code, stdout)
	}
	// The REPL: a line, a block ended by an empty line, an error that keeps
	// the state, then the value; the exit code is the last execution's.
	in := filepath.Join(t.TempDir(), "in.py")
	os.WriteFile(in, []byte("x = 2\nfor i in range(2):\n    x += i\n\n1/0\nx * 14\n"), 0o600)
	code, stdout, stderr = runOutIn(t, d.URL, in, "code", "-i", "--context", id)
	if code != 0 || stdout != "42\n" || !strings.Contains(stderr, "ZeroDivisionError") || !strings.Contains(stderr, ">>> ") {
		t.Fatalf("-i: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
