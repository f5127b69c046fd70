package client

// The daemon under test: the real binary, built once by TestMain, started
// per test on 127.0.0.1:0 with its own base directory. The commands it runs
// are this test binary re-executed as a named helper (TestMain dispatches
// on helperEnv), so their output is known exactly.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/internal/daemontest"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// helperEnv names the helper a re-executed test binary runs.
const helperEnv = "SANDBOX_CLIENT_TEST_HELPER"

var daemonBin string

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(runHelper(h, os.Args[1:]))
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandbox-client-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "client test:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// SANDBOX_CLIENT_TEST_DAEMON runs the tests against another build (say,
	// a branch with more features) instead of building ../cmd/sandbox-runtime.
	if bin := os.Getenv("SANDBOX_CLIENT_TEST_DAEMON"); bin != "" {
		daemonBin = bin
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	daemonBin, err = daemontest.Build(ctx, daemontest.BuildOptions{Dir: dir, Version: "client-test", Race: daemontest.RaceEnabled})
	if err != nil {
		fmt.Fprintln(os.Stderr, "client test: building the daemon:", err)
		return 1
	}
	return m.Run()
}

// runHelper is the body of a command the daemon runs.
func runHelper(name string, args []string) int {
	switch name {
	case "pattern": // pattern SEED STDOUT_BYTES STDERR_BYTES
		seed, _ := strconv.ParseUint(args[0], 10, 64)
		nout, _ := strconv.Atoi(args[1])
		nerr, _ := strconv.Atoi(args[2])
		writePattern(os.Stdout, os.Stderr, seed, nout, nerr)
		return 0
	case "exit":
		n, _ := strconv.Atoi(args[0])
		return n
	case "cat": // copy stdin to stdout
		io.Copy(os.Stdout, os.Stdin)
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown helper", name)
	return 2
}

// helperArgv is the argv of a helper command.
func helperArgv(name string, args ...string) []string {
	return append([]string{os.Args[0]}, args...)
}

func helperReq(name string, args ...string) wire.CreateRequest {
	return wire.CreateRequest{Argv: helperArgv(name, args...), Envs: map[string]string{helperEnv: name}}
}

// patternText returns the stdout and stderr of the pattern helper: lines of
// multi-byte text on stdout, and on stderr text mixed with bytes that are
// not UTF-8 (sent as base64).
func patternText(seed uint64, nout, nerr int) (stdout, stderr []byte) {
	words := []string{"ascii", "ünïcødé", "€uro", "日本語", "😀🎉", "\"quoted\"", "tab\there", "back\\slash", "\u2028sep"}
	rng := rand.New(rand.NewPCG(seed, 1))
	gen := func(n int, binary bool) []byte {
		var b []byte
		for line := 0; len(b) < n; line++ {
			b = fmt.Appendf(b, "%08d", line)
			for range 1 + rng.IntN(12) {
				b = append(b, ' ')
				b = append(b, words[rng.IntN(len(words))]...)
			}
			if binary && rng.IntN(4) == 0 {
				b = append(b, 0xff, 0xfe, 0xc3) // invalid, and a cut-off lead byte
			}
			b = append(b, '\n')
		}
		return b[:n]
	}
	return gen(nout, false), gen(nerr, true)
}

// writePattern writes patternText in writes of random sizes that split
// characters, alternating between the streams.
func writePattern(stdout, stderr io.Writer, seed uint64, nout, nerr int) {
	out, errb := patternText(seed, nout, nerr)
	rng := rand.New(rand.NewPCG(seed, 2))
	for len(out) > 0 || len(errb) > 0 {
		if len(out) > 0 {
			n := min(len(out), 1+rng.IntN(96<<10))
			stdout.Write(out[:n])
			out = out[n:]
		}
		if len(errb) > 0 {
			n := min(len(errb), 1+rng.IntN(24<<10))
			stderr.Write(errb[:n])
			errb = errb[n:]
		}
	}
}

type daemon struct {
	*daemontest.Daemon
	url  string
	base string
}

// startDaemon starts the daemon with env (KEY=VALUE) through the shared
// launcher (the test's environment without any SANDBOX_ variable), and
// stops it (SIGTERM, then SIGKILL) when the test ends.
func startDaemon(t testing.TB, env ...string) *daemon {
	t.Helper()
	d := &daemon{base: t.TempDir()}
	d.Daemon = daemontest.StartT(t, daemontest.Options{
		Bin:        daemonBin,
		BaseDir:    d.base,
		LogPath:    filepath.Join(t.TempDir(), "daemon.log"),
		Env:        env,
		CheckLeaks: true,
	})
	d.url = d.URL
	return d
}

func newClient(t *testing.T, url string, o Options) *Client {
	t.Helper()
	c, err := New(url, o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
