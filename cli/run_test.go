//go:build linux

package cli

// Runs of the client in this process, against the real daemon (built once
// by TestMain, started per test on 127.0.0.1:0).

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goruntime "runtime"

	"github.com/sandbox-runtime/sandbox-runtime/internal/daemontest"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

var daemonBin string

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandbox-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cli test:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	daemonBin, err = daemontest.Build(ctx, daemontest.BuildOptions{Dir: dir, Version: "cli-test", Race: daemontest.RaceEnabled})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cli test: building the daemon:", err)
		return 1
	}
	return m.Run()
}

// startDaemon starts the daemon for one test and returns its URL.
func startDaemon(t *testing.T) string {
	t.Helper()
	d := daemontest.StartT(t, daemontest.Options{
		Bin:        daemonBin,
		BaseDir:    t.TempDir(),
		LogPath:    filepath.Join(t.TempDir(), "daemon.log"),
		CheckLeaks: true,
	})
	return d.URL
}

// runIn runs the client in this process with stdin and the daemon at url,
// and returns its exit code and stderr.
func runIn(t *testing.T, url string, stdin *os.File, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	getenv := func(k string) string {
		if k == "SANDBOX_RUNTIME_URL" {
			return url
		}
		return ""
	}
	done := make(chan int, 1)
	go func() { done <- Run(args, Env{Getenv: getenv, Stdin: stdin, Stdout: &stdout, Stderr: &stderr}) }()
	select {
	case code := <-done:
		return code, stderr.String()
	case <-time.After(60 * time.Second):
		t.Fatalf("%v still running after 60 s", args)
		return 0, ""
	}
}

// TestRunsShareNoState (issue 21 item 7): two runs in one process see
// nothing of each other. The first one's local stdin fails to read (a
// directory: EISDIR), which makes it exit 125 although its command
// succeeded; the second, with a stdin that reads fine and a command that
// succeeds, exits 0. (When that failure was a package variable, the second
// exited 125 too.)
func TestRunsShareNoState(t *testing.T) {
	url := startDaemon(t)
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	// cat ends at the stdin's end, which the client sends only after the
	// failed read: the failure is known before the command exits.
	code, stderr := runIn(t, url, dir, "exec", "-i", "--", "cat")
	if code != ExitFailed || !strings.Contains(stderr, "reading the local stdin failed") {
		t.Fatalf("exec -i with a stdin that cannot be read: exit %d, stderr %q; want %d saying the read failed", code, stderr, ExitFailed)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for _, args := range [][]string{{"exec", "--", "true"}, {"exec", "-i", "--", "cat"}} {
		if code, stderr := runIn(t, url, null, args...); code != 0 || stderr != "" {
			t.Errorf("%v after a run whose stdin failed: exit %d, stderr %q; want 0 and nothing said", args, code, stderr)
		}
	}
}

// TestTerminalLimitIsTheDaemons: the client clamps a window to the limit
// the daemon applies: wire.MaxTerminalSize, the one definition (runtime's
// TestPTYClampsToTheWireLimit holds the daemon to it).
func TestTerminalLimitIsTheDaemons(t *testing.T) {
	var stderr bytes.Buffer
	c := &cli{name: "attach", stderr: &stderr}
	if cols, rows := c.clampWindow(5000, 30, false); cols != wire.MaxTerminalSize || rows != 30 || !strings.Contains(stderr.String(), "5000x30") {
		t.Errorf("clampWindow(5000, 30) = %d, %d, said %q; want %d, 30 and a note", cols, rows, stderr.String(), wire.MaxTerminalSize)
	}
}

// TestCommandsAreTheSubcommands: Commands lists exactly what IsCommand
// takes, and Run refuses another name as a usage error.
func TestCommandsAreTheSubcommands(t *testing.T) {
	names := Commands()
	if len(names) != 11 {
		t.Fatalf("Commands() = %v; want the 11 subcommands", names)
	}
	for _, n := range names {
		if !IsCommand(n) {
			t.Errorf("IsCommand(%q) = false; Commands lists it", n)
		}
	}
	for _, n := range []string{"", "help", "EXEC", "--url"} {
		if IsCommand(n) {
			t.Errorf("IsCommand(%q) = true", n)
		}
	}
	var stderr bytes.Buffer
	if code := Run([]string{"frob"}, Env{Getenv: func(string) string { return "" }, Stdin: os.Stdin, Stdout: &stderr, Stderr: &stderr}); code != ExitUsage || !strings.Contains(stderr.String(), `"frob" is not a subcommand`) {
		t.Errorf("Run(frob): exit %d, %q; want %d saying it is no subcommand", code, stderr.String(), ExitUsage)
	}
}

// TestRunLeavesNothingRunning: what a run starts (the signal relay, the
// stdin pump, the window watch) ends with it: a process that runs the
// client twice does not relay the second run's signals to the first one's
// command, nor keep goroutines per run. (The relay used to live on after
// exec and attach returned.)
func TestRunLeavesNothingRunning(t *testing.T) {
	url := startDaemon(t)
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	var id bytes.Buffer
	getenv := func(k string) string {
		if k == "SANDBOX_RUNTIME_URL" {
			return url
		}
		return ""
	}
	if code := Run([]string{"run", "-d", "--", "echo", "hi"}, Env{Getenv: getenv, Stdin: null, Stdout: &id, Stderr: os.Stderr}); code != 0 {
		t.Fatalf("run -d: exit %d", code)
	}
	for _, args := range [][]string{
		{"exec", "--", "true"},
		{"exec", "-i", "--", "cat"},
		{"attach", strings.TrimSpace(id.String())},
		{"logs", "-f", strings.TrimSpace(id.String())},
		{"ps"},
	} {
		if code, stderr := runIn(t, url, null, args...); code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; {
		left = runGoroutines()
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // polls a condition, bounded
	}
	if len(left) > 0 {
		t.Fatalf("%d goroutines of finished runs are still there:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// runGoroutines returns the stacks of the goroutines running this
// package's code or started by it, but the tests'.
func runGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:goruntime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "sandbox-runtime/cli.") && !strings.Contains(g, "sandbox-runtime/cli.Test") && !strings.Contains(g, "sandbox-runtime/cli.runIn") {
			out = append(out, g)
		}
	}
	return out
}
