//go:build linux

package main

// Tests of the command-line client: the built binary (binPath, built by
// TestMain) run as a client against the same binary run as the daemon, both
// real processes on 127.0.0.1.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/internal/daemontest"
	"github.com/sandbox-runtime/sandbox-runtime/wire"

	"github.com/sandbox-runtime/sandbox-runtime/cli"
)

// cliDaemon is a daemon for the client tests.
type cliDaemon struct {
	url  string
	base string
}

// startCLIDaemon starts the daemon on 127.0.0.1:0 with env on top of an
// environment without SANDBOX_ variables, and stops it at the end.
func startCLIDaemon(t *testing.T, env ...string) *cliDaemon {
	t.Helper()
	return startCLIDaemonBin(t, binPath, env...)
}

func startCLIDaemonBin(t *testing.T, bin string, env ...string) *cliDaemon {
	t.Helper()
	d := &cliDaemon{base: t.TempDir()}
	dm := daemontest.StartT(t, daemontest.Options{
		Bin:        bin,
		BaseDir:    d.base,
		LogPath:    filepath.Join(t.TempDir(), "daemon.log"),
		Env:        env,
		CheckLeaks: true,
	})
	d.url = dm.URL
	return d
}

// cliEnv is the test's environment without SANDBOX_ variables.
func cliEnv() []string { return daemontest.CleanEnv() }

type cliResult struct {
	stdout, stderr string
	code           int
}

// runClient runs the binary as a client with env (KEY=VALUE) and stdin.
func runClient(t *testing.T, env []string, stdin string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(cliEnv(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running %v: %v", args, err)
	}
	return cliResult{out.String(), errb.String(), code}
}

// runClientFile is runClient with stdin opened from file.
func runClientFile(t *testing.T, env []string, file string, args ...string) cliResult {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(cliEnv(), env...)
	cmd.Stdin = f
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	return cliResult{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

func (d *cliDaemon) env() []string { return []string{"SANDBOX_RUNTIME_URL=" + d.url} }

func TestCLIExec(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	sub := filepath.Join(d.base, "sub dir")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("ünïcødé line €😀\n", 20000) // 400 KB through stdin and back
	for _, tc := range []struct {
		name       string
		stdin      string
		stdinFile  string // instead of stdin
		args       []string
		wantOut    string
		wantErr    string // a regexp the stderr must match
		wantCode   int
		exactError bool
	}{
		{name: "echo", args: []string{"exec", "--", "echo", "hi"}, wantOut: "hi\n"},
		{name: "streams", args: []string{"exec", "--", "sh", "-c", "echo out; echo err >&2; exit 7"}, wantOut: "out\n", wantErr: "^err\n$", wantCode: 7},
		{name: "signal death is 128+N", args: []string{"exec", "--", "sh", "-c", "kill -TERM $$"}, wantCode: 143},
		{name: "env and cwd", args: []string{"exec", "-e", "K=v=1", "-e", "L=", "-w", sub, "--", "sh", "-c", `echo "$K|$L"; pwd`}, wantOut: "v=1|\n" + sub + "\n"},
		{name: "stdin", stdin: big, args: []string{"exec", "-i", "--", "cat"}, wantOut: big},
		{name: "grouped flags", stdin: "x\n", args: []string{"exec", "-ie", "K=v", "--", "cat"}, wantErr: `flag provided but not defined: -ie`, wantCode: 2},
		{name: "-w takes a value that looks like a flag", args: []string{"exec", "-w", "-it", "--", "true"}, wantErr: `cwd`, wantCode: 125},
		{name: "no stdin without -i", stdin: "ignored", args: []string{"exec", "--", "cat"}, wantOut: ""},
		{name: "timeout", args: []string{"exec", "--timeout", "0.5", "--", "sleep", "30"}, wantErr: `timed out after 0.5s and was killed \(SIGTERM\)`, wantCode: 143},
		{name: "not found", args: []string{"exec", "--", "/no/such/program"}, wantErr: `/no/such/program.*no such file`, wantCode: 127},
		{name: "no argv", args: []string{"exec"}, wantErr: `name the command to run`, wantCode: 2},
		{name: "bad -e", args: []string{"exec", "-e", "NOEQUALS", "--", "true"}, wantErr: `"NOEQUALS" is not K=V`, wantCode: 2},
		{name: "bad cwd", args: []string{"exec", "-w", "relative", "--", "true"}, wantErr: `cwd`, wantCode: 125},
		// F10: an unreadable stdin is said, and exec does not exit 0.
		{name: "stdin unreadable", stdinFile: "/", args: []string{"exec", "-i", "--", "sh", "-c", "wc -c"}, wantOut: "0\n", wantErr: `reading the local stdin failed, so the command's stdin was closed early: is a directory`, wantCode: 125},
		// F01: a timeout that is not a positive finite number is a usage error, never a panic.
		{name: "timeout NaN", args: []string{"exec", "--timeout", "NaN", "--", "true"}, wantErr: `^sandbox-runtime exec: --timeout NaN: give a number of seconds above 0`, wantCode: 2},
		{name: "timeout inf", args: []string{"run", "-d", "--timeout", "inf", "--", "true"}, wantErr: `--timeout \+Inf: give`, wantCode: 2},
		{name: "timeout -1", args: []string{"exec", "--timeout", "-1", "--", "true"}, wantErr: `--timeout -1: give`, wantCode: 2},
		{name: "timeout 0", args: []string{"exec", "--timeout", "0", "--", "true"}, wantErr: `--timeout 0: give`, wantCode: 2},
		{name: "timeout huge", args: []string{"exec", "--timeout", "1e300", "--", "true"}, wantErr: `--timeout 1e\+300: give`, wantCode: 2},
		// F13: bytes that are not UTF-8 cannot cross the JSON API as typed.
		{name: "argv not UTF-8", args: []string{"exec", "--", "cat", "caf\xe9.txt"}, wantErr: `argument 2, "caf\\xe9.txt" is not valid UTF-8`, wantCode: 2},
		{name: "-e not UTF-8", args: []string{"exec", "-e", "K=\xff", "--", "true"}, wantErr: `the -e value of "K", "\\xff" is not valid UTF-8`, wantCode: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runClient(t, d.env(), tc.stdin, tc.args...)
			if tc.stdinFile != "" {
				r = runClientFile(t, d.env(), tc.stdinFile, tc.args...)
			}
			if r.code != tc.wantCode {
				t.Errorf("exit code %d, want %d; stderr: %s", r.code, tc.wantCode, r.stderr)
			}
			if r.stdout != tc.wantOut {
				t.Errorf("stdout %d bytes %.80q…, want %d bytes %.80q…", len(r.stdout), r.stdout, len(tc.wantOut), tc.wantOut)
			}
			re := "^$"
			if tc.wantErr != "" {
				re = tc.wantErr
			}
			if !regexp.MustCompile(re).MatchString(r.stderr) {
				t.Errorf("stderr %q does not match %q", r.stderr, re)
			}
		})
	}
}

// TestCLIExecTTY: -t on a daemon without terminals says so plainly; on
// one with them (after the PTY work), a stdin that is not a terminal is
// refused just as plainly.
func TestCLIExecTTY(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	resp, err := http.Get(d.url + "/v1/info")
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ Features []string }
	json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	want := `has no terminals: its /v1/info does not list the "pty" feature`
	for _, f := range info.Features {
		if f == "pty" {
			want = `-t needs a terminal, and stdin is not one`
		}
	}
	r := runClient(t, d.env(), "", "exec", "-t", "--", "sh")
	if r.code != 125 || !strings.Contains(r.stderr, want) {
		t.Errorf("exec -t: exit %d, stderr %q; want 125 and %q", r.code, r.stderr, want)
	}
	// Nothing was started.
	if r := runClient(t, d.env(), "", "ps", "-q"); r.stdout != "" {
		t.Errorf("ps after a refused -t: %q", r.stdout)
	}
}

func TestCLIBackgroundLogsKill(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	env := d.env()
	r := runClient(t, env, "", "run", "-d", "--", "sh", "-c", "echo oops >&2; echo first; exec sleep 60")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !regexp.MustCompile(`^[0-9a-f-]{36}$`).MatchString(id) {
		t.Fatalf("run -d: %+v", r)
	}
	// ps shows it running, with its argv.
	r = runClient(t, env, "", "ps")
	if !regexp.MustCompile(`(?m)^` + id + `\s+running\s+\d+s ago\s+sh -c "echo oops >&2;`).MatchString(r.stdout) {
		t.Errorf("ps:\n%s", r.stdout)
	}
	// logs -f shows the output so far, then waits for the end: kill it
	// once "first" (written after "oops") has arrived.
	follow, br, ferr := followUntilFirst(t, env, id)
	r = runClient(t, env, "", "kill", id)
	if r.code != 0 || !regexp.MustCompile(`^`+id+` cancelled by SIGTERM, exit code 143\n$`).MatchString(r.stdout) {
		t.Errorf("kill: %+v", r)
	}
	rest, _ := io.ReadAll(br)
	err := follow.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 143 || len(rest) != 0 || ferr.String() != "oops\nsandbox-runtime logs: the command was killed by a kill request (SIGTERM)\n" {
		t.Errorf("logs -f: %v, then %q, stderr %q; want it to end with the command (exit 143, saying it was killed), after first and oops", err, rest, ferr.String())
	}
	r = runClient(t, env, "", "logs", id)
	if r.code != 0 || r.stdout != "first\n" || r.stderr != "oops\n" {
		t.Errorf("logs: %+v", r)
	}
	r = runClient(t, env, "", "kill", id) // again: its status, unchanged
	if r.code != 0 || !strings.Contains(r.stdout, "cancelled") {
		t.Errorf("second kill: %+v", r)
	}
	r = runClient(t, env, "", "kill", "-s", "INT", id)
	if r.code != 125 || !strings.Contains(r.stderr, "has already finished") {
		t.Errorf("kill -s after the end: %+v", r)
	}
	r = runClient(t, env, "", "ps", "-q", "--state", "running")
	if r.stdout != "" {
		t.Errorf("ps --state running: %q", r.stdout)
	}
	unknown := "6f1d6a4e-0000-4000-8000-000000000000"
	r = runClient(t, env, "", "logs", unknown)
	if r.code != 125 || !strings.Contains(r.stderr, "there is no command "+unknown) {
		t.Errorf("logs of an unknown id: %+v", r)
	}
	r = runClient(t, env, "", "ps", "--state", "sleepy")
	if r.code != 2 || !strings.Contains(r.stderr, "state") { // a usage error (F10)
		t.Errorf("ps bad state: %+v", r)
	}
}

// TestCLIAttach attaches to a command that waits on stdin: the client
// forwards its stdin, shows the output and exits with the command's code.
func TestCLIAttach(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	env := d.env()
	r := runClient(t, env, "", "run", "-d", "-i", "--", "true")
	if r.code != 2 || !strings.Contains(r.stderr, "cannot be combined") {
		t.Errorf("run -d -i: %+v", r)
	}
	// Start it with a stdin pipe through the API, then attach.
	body := `{"argv":["sh","-c","echo before; read line; echo got:$line; exit 4"],"stdin":true}`
	resp, err := http.Post(d.url+"/v1/commands", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var st wire.Status
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	r = runClient(t, env, "hello\n", "attach", st.CommandID)
	if r.code != 4 || r.stdout != "before\ngot:hello\n" {
		t.Errorf("attach: %+v; want exit 4 and before, got:hello", r)
	}

	// --no-stdin: the client's empty stdin does not close the command's,
	// which then still takes a write through the API.
	resp, err = http.Post(d.url+"/v1/commands", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	att := exec.CommandContext(ctx, binPath, "attach", "--no-stdin", st.CommandID)
	att.Env = append(cliEnv(), env...)
	devnull, err := os.Open(os.DevNull) // at EOF at once, with no copying goroutine in between
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	att.Stdin = devnull
	out, err := att.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := att.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(out)
	if line, err := br.ReadString('\n'); line != "before\n" {
		t.Fatalf("attach --no-stdin: first line %q, %v", line, err)
	}
	resp, err = http.Post(d.url+"/v1/commands/"+st.CommandID+"/stdin", "application/json", strings.NewReader(`{"data":"late\n","eof":true}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 202 {
		t.Errorf("stdin after attach --no-stdin: %d, want 202 (the client must not have closed it)", resp.StatusCode)
	}
	rest, _ := io.ReadAll(br)
	err = att.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 4 || string(rest) != "got:late\n" {
		t.Errorf("attach --no-stdin: %v, then %q; want exit 4 after got:late", err, rest)
	}
}

func TestCLISignalForwarding(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, "exec", "--", "sh", "-c", "echo ready; exec sleep 60")
	cmd.Env = append(cliEnv(), d.env()...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	cmd.Process.Signal(syscall.SIGINT) // the command is running: forward
	err = cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 130 {
		t.Errorf("after SIGINT: %v (stderr %q); want exit 130", err, errb.String())
	}
}

func TestCLICopy(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	env := d.env()
	local := t.TempDir()
	src := filepath.Join(local, "data.bin")
	data := bytes.Repeat([]byte("bin\x00\xff ü\n"), 50000)
	if err := os.WriteFile(src, data, 0o640); err != nil {
		t.Fatal(err)
	}
	check := func(what string, r cliResult) {
		t.Helper()
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("%s: %+v", what, r)
		}
	}
	check("upload", runClient(t, env, "", "cp", src, ":in/sandbox.bin"))
	got, err := os.ReadFile(filepath.Join(d.base, "in", "sandbox.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("uploaded: %d bytes, %v", len(got), err)
	}
	if fi, _ := os.Stat(filepath.Join(d.base, "in", "sandbox.bin")); fi.Mode().Perm() != 0o640 {
		t.Errorf("uploaded mode %v, want the source's 0640", fi.Mode().Perm())
	}
	check("upload into a directory", runClient(t, env, "", "cp", src, ":in"))
	if _, err := os.Stat(filepath.Join(d.base, "in", "data.bin")); err != nil {
		t.Errorf("cp into :in: %v", err)
	}
	check("upload from stdin", runClient(t, env, "from stdin\n", "cp", "-", ":in/stdin.txt"))
	check("download", runClient(t, env, "", "cp", ":in/sandbox.bin", filepath.Join(local, "back.bin")))
	back, _ := os.ReadFile(filepath.Join(local, "back.bin"))
	if !bytes.Equal(back, data) {
		t.Errorf("downloaded %d bytes, want %d", len(back), len(data))
	}
	check("download into a directory", runClient(t, env, "", "cp", ":in/stdin.txt", local))
	if b, _ := os.ReadFile(filepath.Join(local, "stdin.txt")); string(b) != "from stdin\n" {
		t.Errorf("stdin.txt: %q", b)
	}
	r := runClient(t, env, "", "cp", ":in/stdin.txt", "-")
	if r.code != 0 || r.stdout != "from stdin\n" {
		t.Errorf("cp to -: %+v", r)
	}
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"cp", src, local}, 2, "exactly one of SRC and DST"},
		{[]string{"cp", ":a", ":b"}, 2, "exactly one of SRC and DST"},
		{[]string{"cp", ":in", local}, 125, ":in is a directory in the sandbox"},
		{[]string{"cp", local, ":x"}, 125, "is a directory; cp copies single files"},
		{[]string{"cp", ":missing", local}, 125, "no such file"},
		{[]string{"cp", ":../escape", local}, 125, `may not contain "." or ".." elements`},
		{[]string{"cp", src, ":a/../../escape"}, 125, `may not contain "." or ".." elements`},
		{[]string{"cp", filepath.Join(local, "nope"), ":x"}, 125, "no such file"},
	} {
		r := runClient(t, env, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.err) {
			t.Errorf("%v: exit %d stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.err)
		}
	}
	// A failed download leaves no partial file behind.
	entries, _ := os.ReadDir(local)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".part-") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// TestCLIConnectionErrors: where the daemon is and what it wants, told
// like a person would.
func TestCLIConnectionErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("  tok3n \n"), 0o600)
	wrongFile := filepath.Join(dir, "wrong")
	os.WriteFile(wrongFile, []byte("nope"), 0o600)
	d := startCLIDaemon(t, "SANDBOX_RUNTIME_TOKEN_FILE="+tokenFile)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		out  string
		err  string
	}{
		{"no token", d.env(), []string{"ps", "-q"}, 125, "", "wants a token: pass --token-file FILE or set SANDBOX_RUNTIME_TOKEN"},
		{"token from the environment", append(d.env(), "SANDBOX_RUNTIME_TOKEN=tok3n"), []string{"exec", "--", "echo", "ok"}, 0, "ok\n", ""},
		{"token file flag", d.env(), []string{"exec", "--token-file", tokenFile, "--", "echo", "ok"}, 0, "ok\n", ""},
		{"the daemon's token file variable", append(d.env(), "SANDBOX_RUNTIME_TOKEN_FILE="+tokenFile), []string{"exec", "--", "echo", "ok"}, 0, "ok\n", ""},
		{"wrong token", d.env(), []string{"ps", "--token-file", wrongFile}, 125, "", "refused the token from --token-file " + wrongFile},
		{"missing token file", d.env(), []string{"ps", "--token-file", filepath.Join(dir, "absent")}, 125, "", "cannot read the token file"},
		{"nothing listening", []string{"SANDBOX_RUNTIME_URL=http://127.0.0.1:1"}, []string{"ps"}, 125, "", "cannot reach the sandbox runtime at http://127.0.0.1:1: nothing is listening there"},
		{"--url wins", []string{"SANDBOX_RUNTIME_URL=" + d.url}, []string{"ps", "--url", "http://127.0.0.1:1"}, 125, "", "http://127.0.0.1:1"},
		{"bad url", nil, []string{"ps", "--url", "localhost:8888"}, 125, "", "must start with http:// or https://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Now()
			r := runClient(t, tc.env, "", tc.args...)
			if r.code != tc.code || r.stdout != tc.out || !strings.Contains(r.stderr, tc.err) {
				t.Errorf("got exit %d stdout %q stderr %q; want %d, %q and %q", r.code, r.stdout, r.stderr, tc.code, tc.out, tc.err)
			}
			if tc.code != 0 && time.Since(t0) > 20*time.Second {
				t.Errorf("took %v to fail", time.Since(t0))
			}
		})
	}
	// No arguments is still the daemon: --help prints the daemon's flags.
	r := runClient(t, nil, "", "--help")
	if r.code != 0 || !strings.Contains(r.stderr+r.stdout, "--max-running") && !strings.Contains(r.stderr+r.stdout, "-max-running") {
		t.Errorf("--help: %+v", r)
	}
}

// TestCLIUnderTmux uses the client as a person would, in a terminal: tmux
// runs a shell, the test types commands (send-keys) and reads the screen
// (capture-pane). With a daemon that has terminals, exec -t runs a remote
// shell whose size follows the window; without, -t says so.
func TestCLIUnderTmux(t *testing.T) {
	t.Parallel()
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed")
	}
	bin := os.Getenv("SANDBOX_CLI_TEST_DAEMON") // a daemon binary to test against, e.g. one with terminals
	if bin == "" {
		bin = binPath
	}
	d := startCLIDaemonBin(t, bin)
	sock := fmt.Sprintf("sandbox-cli-test-%d", os.Getpid())
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(tmux, append([]string{"-L", sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	run("new-session", "-d", "-s", "cli", "-x", "100", "-y", "30",
		"env", "-i", "PATH="+os.Getenv("PATH"), "TERM=xterm-256color", "PS1=$ ", "SANDBOX_RUNTIME_URL="+d.url, "sh")
	t.Cleanup(func() { exec.Command(tmux, "-L", sock, "kill-server").Run() })
	screen := func() string { return run("capture-pane", "-p", "-J", "-t", "cli") }
	// waitScreen polls the screen (the one place that must poll: tmux has
	// no event for "this text appeared") until re matches, within 30 s.
	waitScreen := func(re string) {
		t.Helper()
		if !screenMatches(screen, re) {
			t.Fatalf("the screen never matched %q:\n%s", re, screen())
		}
	}
	typeLine := func(s string) { run("send-keys", "-t", "cli", "-l", s); run("send-keys", "-t", "cli", "Enter") }

	waitScreen(`(?m)^\$ $`) // the shell's prompt: it reads what is typed now
	typeLine(binPath + " exec -- echo hi; echo rc=$?")
	waitScreen(`(?m)^\$? ?hi\n+rc=0$`)
	typeLine(binPath + " exec -- sh -c 'echo to-stderr >&2; exit 5'; echo rc=$?")
	waitScreen(`(?m)^to-stderr\n+rc=5$`)

	resp, err := http.Get(d.url + "/v1/info")
	if err != nil {
		t.Fatal(err)
	}
	var info wire.Info
	json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	hasPTY := info.HasFeature(wire.FeaturePTY)
	typeLine(binPath + " exec -t -- sh; echo rc=$?")
	if !hasPTY {
		waitScreen(`has no terminals: its /v1/info does not list the "pty" feature\. Run without -t[^\n]*\n(.*\n)*rc=125`)
		return
	}
	// A remote shell on a terminal of the window's size; Ctrl-C reaches
	// the remote foreground program, not the client.
	typeLine("PS1='remote$ '; stty size")
	waitScreen(`(?m)^30 100$`)
	run("resize-window", "-t", "cli", "-x", "90", "-y", "25")
	// The client forwards the SIGWINCH asynchronously: wait until the
	// daemon reports the new size before asking the remote shell.
	waitDaemon(t, d, "the new size", func(p *ptyState) bool { return p.PTY != nil && p.PTY.Cols == 90 && p.PTY.Rows == 25 })
	typeLine("stty size")
	waitScreen(`(?m)^25 90$`)
	// Like a person: Ctrl-C once sleep runs, the next line once the shell
	// is back at its prompt (or the terminal would flush what was typed).
	// "Running" is seen in /proc, the sleep the foreground job of the
	// remote terminal: "not waiting for input" is also what the shell reads
	// while stty is still ending, and a Ctrl-C typed then races the line.
	typeLine("sleep 30")
	shell := waitDaemon(t, d, "sleep to run", func(p *ptyState) bool { return foregroundSleep(p.PID) })
	run("send-keys", "-t", "cli", "C-c")
	waitDaemon(t, d, "the shell to read again", func(p *ptyState) bool {
		return !foregroundSleep(p.PID) && p.WaitingForInput != nil && *p.WaitingForInput
	})
	typeLine("echo after-interrupt; exit 3")
	if !screenMatches(screen, `(?m)^after-interrupt\s*\n(.*\n)*rc=3$`) {
		// Say what the daemon holds of the terminal too: it tells a lost
		// line from a client that did not show or did not exit.
		resp, err := http.Get(d.url + "/v1/commands/" + shell.CommandID + "/output?follow=false")
		var held []byte
		if err == nil {
			held, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		t.Fatalf("the screen never showed after-interrupt and rc=3:\n%s\nthe daemon's record of the command's terminal (%v): %q", screen(), err, held)
	}
}

// screenMatches polls screen (tmux has no event for "this text appeared")
// until re matches it, within 30 s.
func screenMatches(screen func() string, re string) bool {
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(30 * time.Second)
	for !rx.MatchString(screen()) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// ptyState is what the tmux test reads of the one running command.
type ptyState = wire.Status

// waitDaemon polls the one running command's status until ok holds, within
// 30 s (tmux offers no event to wait on, so the test reads the daemon).
func waitDaemon(t *testing.T, d *cliDaemon, what string, ok func(*ptyState) bool) wire.Status {
	t.Helper()
	return waitOne(t, d, "?state=running", what, ok)
}

// waitFinishedOne polls the daemon's list until it holds one command and
// that one has finished, within 30 s, and returns it.
func waitFinishedOne(t *testing.T, d *cliDaemon) wire.Status {
	t.Helper()
	return waitOne(t, d, "", "the command to finish", func(st *wire.Status) bool { return st.State.Finished() })
}

// waitOne polls GET /v1/commands+query until it lists exactly one command
// for which ok holds, within 30 s, and returns that command.
func waitOne(t *testing.T, d *cliDaemon, query, what string, ok func(*wire.Status) bool) wire.Status {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(d.url + "/v1/commands" + query)
		if err != nil {
			t.Fatal(err)
		}
		var l wire.CommandList
		json.NewDecoder(resp.Body).Decode(&l)
		resp.Body.Close()
		if len(l.Commands) == 1 && ok(&l.Commands[0]) {
			return l.Commands[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s: %+v", what, l)
		}
		time.Sleep(20 * time.Millisecond) // polling: the daemon has no event for this
	}
}

// TestCLIExecLostOutputFails (F02): output lost to the daemon's ring
// (the client's stdout is a pipe nobody reads until the command has ended,
// the ring is 64 KiB) makes exec say so once and exit 125 although the
// command exited 0; a failing command keeps its own code. logs of the same
// command exits 125 too.
func TestCLIExecLostOutputFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		script string
		code   int
	}{{"head -c 2000000 /dev/zero", 125}, {"head -c 2000000 /dev/zero; exit 3", 3}} {
		d := startCLIDaemon(t, "SANDBOX_OUTPUT_LIMIT_BYTES=65536")
		cmd := exec.Command(binPath, "exec", "--", "sh", "-c", tc.script)
		cmd.Env = append(cliEnv(), d.env()...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		st := waitFinishedOne(t, d) // the client is stuck writing to the pipe meanwhile
		n, _ := io.Copy(io.Discard, out)
		err = cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		if code != tc.code || n >= 2000000 {
			t.Errorf("%s: exit %d (%v) with %d bytes; want exit %d with bytes lost", tc.script, code, err, n, tc.code)
		}
		if !regexp.MustCompile(`^sandbox-runtime exec: \d+ bytes of the output \(stdout and stderr together\) were lost: .*exit code was ` + fmt.Sprint(tc.code%125) + `\n$`).MatchString(errb.String()) {
			t.Errorf("%s: stderr %q; want one line saying how much was lost and the command's code", tc.script, errb.String())
		}
		r := runClient(t, d.env(), "", "logs", st.CommandID)
		if r.code != 125 || !strings.Contains(r.stderr, "are missing") {
			t.Errorf("logs: exit %d, stderr %q; want 125 and a note", r.code, r.stderr)
		}
	}
}

// TestCLIExecHoldLosesNothing: the same 64 KiB ring as
// TestCLIExecLostOutputFails, the client's stdout a pipe read at about
// 2 MB/s while `yes` writes 2 MB at once: with --hold the daemon waits for
// the client and it shows every byte, exits 0 and says nothing; without it
// (the control) bytes are lost and it exits 125. A --hold above 10 is a
// usage error.
func TestCLIExecHoldLosesNothing(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t, "SANDBOX_OUTPUT_LIMIT_BYTES=65536")
	const n = 2000000
	run := func(args ...string) (code int, got []byte, stderr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, binPath, append(append([]string{"exec"}, args...), "--", "sh", "-c", "yes | head -c "+strconv.Itoa(n))...)
		cmd.Env = append(cliEnv(), d.env()...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 16<<10)
		for {
			k, err := out.Read(buf)
			got = append(got, buf[:k]...)
			if err != nil {
				break
			}
			time.Sleep(8 * time.Millisecond) // paces a slow reader (about 2 MB/s); nothing waits on it
		}
		cmd.Wait()
		return cmd.ProcessState.ExitCode(), got, errb.String()
	}
	code, got, stderr := run("--hold", "1")
	if want := strings.Repeat("y\n", n/2); code != 0 || string(got) != want || stderr != "" {
		t.Fatalf("--hold 1: exit %d, %d of %d bytes (equal %v), stderr %q; want 0, every byte, nothing said", code, len(got), n, string(got) == want, stderr)
	}
	if code, got, _ := run(); code != 125 || len(got) >= n {
		t.Fatalf("without --hold: exit %d with %d of %d bytes; want 125 and bytes lost (else the test cannot tell)", code, len(got), n)
	}
	r := runClient(t, d.env(), "", "exec", "--hold", "11", "--", "true")
	if r.code != 2 || !strings.Contains(r.stderr, "--hold 11") {
		t.Fatalf("--hold 11: exit %d, stderr %q; want a usage error", r.code, r.stderr)
	}
}

// TestCLIOutputWriteErrors (F03, F04): exec piped into a reader that stops
// (head) exits 141 quietly and kills the command it started; a stdout that
// fails otherwise (/dev/full) is said, the command killed, exit 125; logs
// into /dev/full says so and exits 125, leaving the command alone.
func TestCLIOutputWriteErrors(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	cmd := exec.Command(binPath, "exec", "--timeout", "60", "--", "sh", "-c", "while :; do echo yes; done")
	cmd.Env = append(cliEnv(), d.env()...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(out, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	out.Close() // like head -c 4
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 141 || errb.Len() != 0 {
		t.Errorf("exec | head: exit %d (%v), stderr %q; want 141 and nothing said", code, cmd.ProcessState, errb.String())
	}
	if st := waitFinishedOne(t, d); st.State != wire.StateCancelled {
		t.Errorf("the command after exec | head: %s; want cancelled (killed by the client)", st.State)
	}

	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full:", err)
	}
	defer full.Close()
	d2 := startCLIDaemon(t)
	cmd = exec.Command(binPath, "exec", "--timeout", "60", "--", "sh", "-c", "echo hi; exec sleep 60")
	cmd.Env = append(cliEnv(), d2.env()...)
	errb.Reset()
	cmd.Stdout, cmd.Stderr = full, &errb
	cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 125 || !strings.Contains(errb.String(), "writing to stdout: write /dev/stdout: no space left on device; command ") {
		t.Errorf("exec >/dev/full: exit %d, stderr %q; want 125 and the reason", code, errb.String())
	}
	st := waitFinishedOne(t, d2)
	if st.State != wire.StateCancelled {
		t.Errorf("the command after exec >/dev/full: %s; want cancelled", st.State)
	}
	cmd = exec.Command(binPath, "logs", st.CommandID)
	cmd.Env = append(cliEnv(), d2.env()...)
	errb.Reset()
	cmd.Stdout, cmd.Stderr = full, &errb
	cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 125 || !strings.Contains(errb.String(), "no space left on device") {
		t.Errorf("logs >/dev/full: exit %d, stderr %q; want 125 and the reason", code, errb.String())
	}
}

// dropStdinProxy is an HTTP proxy on 127.0.0.1 to d that passes every
// request but a stdin write, whose connection it closes unanswered.
func dropStdinProxy(t *testing.T, d *cliDaemon) string {
	t.Helper()
	target, _ := url.Parse(d.url)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/stdin") {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestCLIStdinBrokenOff (F05): a stdin write that breaks off cannot be
// repeated exactly once: exec -i says so in words (no Go request line),
// kills the command at once rather than leave it waiting to its timeout,
// and exits 125.
func TestCLIStdinBrokenOff(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	r := runClient(t, []string{"SANDBOX_RUNTIME_URL=" + dropStdinProxy(t, d)}, "hello\n", "exec", "-i", "--timeout", "20", "--", "cat")
	if r.code != 125 || !strings.Contains(r.stderr, "cannot be repeated safely, so the command is killed") || strings.Contains(r.stderr, `Post "`) {
		t.Errorf("exit %d, stderr %q; want 125 and a plain reason", r.code, r.stderr)
	}
	if st := waitFinishedOne(t, d); st.State != wire.StateCancelled {
		t.Errorf("the command: %s; want cancelled", st.State)
	}
}

// TestCLIInterruptWhileCreating (F11): Ctrl-C (SIGINT) or SIGTERM while the
// create is being retried (the daemon answers 503) ends the client at once
// with 128+N, and the command_id it was creating is killed, in case the
// create got through.
func TestCLIInterruptWhileCreating(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sig  syscall.Signal
		args []string
	}{
		{syscall.SIGINT, []string{"exec", "--", "true"}},
		{syscall.SIGTERM, []string{"run", "-d", "--", "true"}},
	} {
		creates := make(chan string, 100)
		kills := make(chan string, 100)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Method == "POST" && r.URL.Path == "/v1/commands":
				var req wire.CreateRequest
				json.NewDecoder(r.Body).Decode(&req)
				creates <- req.CommandID
			case strings.HasSuffix(r.URL.Path, "/kill"):
				kills <- strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/commands/"), "/kill")
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"code":"unavailable","message":"busy"}}`)
		}))
		cmd := exec.Command(binPath, tc.args...)
		cmd.Env = append(cliEnv(), "SANDBOX_RUNTIME_URL="+srv.URL)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var id string
		for range 2 { // the create, then its first retry: the client is retrying
			id = <-creates
		}
		cmd.Process.Signal(tc.sig)
		cmd.Wait()
		srv.Close()
		if code := cmd.ProcessState.ExitCode(); code != 128+int(tc.sig) || !strings.Contains(errb.String(), "interrupted") {
			t.Errorf("%v during the create's retries: exit %d, stderr %q; want %d and a note", tc.args, code, errb.String(), 128+int(tc.sig))
		}
		select {
		case k := <-kills:
			if k != id {
				t.Errorf("%v: killed %q; want the id being created, %q", tc.args, k, id)
			}
		default:
			t.Errorf("%v: no kill of the command being created", tc.args)
		}
	}
}

// TestCLIAttachDevNullToATerminal (F12): attach ID </dev/null to a command
// on a terminal does not type Ctrl-D at the local EOF: the command, which
// reads one raw byte, goes on waiting, until the test kills it.
func TestCLIAttachDevNullToATerminal(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	body, _ := json.Marshal(wire.CreateRequest{
		Argv: []string{"sh", "-c", "stty raw -echo; echo ready; dd bs=1 count=1 2>/dev/null | od -An -c; echo END"},
		PTY:  &wire.PTYRequest{Cols: 80, Rows: 24},
	})
	resp, err := http.Post(d.url+"/v1/commands", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var st wire.Status
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if st.PTY == nil {
		t.Skip("the daemon has no terminals")
	}
	// The terminal is raw (the command has printed) before the attach.
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get(d.url + "/v1/commands/" + st.CommandID)
		if err != nil {
			t.Fatal(err)
		}
		var now wire.Status
		json.NewDecoder(resp.Body).Decode(&now)
		resp.Body.Close()
		if now.PTYBytes > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command never printed: %+v", now)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd := exec.Command(binPath, "attach", st.CommandID)
	cmd.Env = append(cliEnv(), d.env()...)
	cmd.Stdin = nil // /dev/null
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(out)
	var seen strings.Builder
	for !strings.Contains(seen.String(), "ready") {
		b, err := br.ReadByte()
		if err != nil {
			t.Fatalf("attach ended before the command was ready: %q, %s", seen.String(), errb.String())
		}
		seen.WriteByte(b)
	}
	// The byte the command reads: this one, unless the client typed one.
	resp, err = http.Post(d.url+"/v1/commands/"+st.CommandID+"/stdin", "application/json", strings.NewReader(`{"data":"Z"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	rest, _ := io.ReadAll(br)
	cmd.Wait()
	if !strings.Contains(string(rest), "Z") || strings.Contains(string(rest), "004") {
		t.Errorf("the command read %q; want Z (004 is the Ctrl-D the client must not type at its stdin's EOF)", rest)
	}
}

// TestCLICopyModesAndPaths (F09): a download takes the sandbox file's mode
// under the local umask (a 0600 key stays 0600, a 0755 script executable);
// ':/abs' inside the base dir (from /v1/info) means that file, outside it
// is refused, never rebased under the base dir; errors name
// the destination, never the temp file; 'cp : DIR' asks for a name.
func TestCLICopyModesAndPaths(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	local := t.TempDir()
	os.WriteFile(filepath.Join(d.base, "key"), []byte("secret\n"), 0o600)
	os.Chmod(filepath.Join(d.base, "key"), 0o600)
	os.MkdirAll(filepath.Join(d.base, "bin"), 0o755)
	os.WriteFile(filepath.Join(d.base, "bin", "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	os.Chmod(filepath.Join(d.base, "bin", "run.sh"), 0o755)
	for _, tc := range []struct {
		umask, src string
		want       os.FileMode
	}{{"022", ":key", 0o600}, {"022", ":bin/run.sh", 0o755}, {"077", ":bin/run.sh", 0o700}} {
		dst := filepath.Join(local, "m"+tc.umask+filepath.Base(tc.src))
		cmd := exec.Command("sh", "-c", `umask "$1"; shift; exec "$@"`, "sh", tc.umask, binPath, "cp", tc.src, dst)
		cmd.Env = append(cliEnv(), d.env()...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v: %s", tc.src, err, out)
		}
		if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != tc.want {
			t.Errorf("cp %s under umask %s: %v %v; want mode %v", tc.src, tc.umask, fi.Mode(), err, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"cp", filepath.Join(d.base, "key"), ":" + filepath.Join(d.base, "abs")}, 0, ""},
		{[]string{"cp", ":" + filepath.Join(d.base, "bin", "run.sh"), local + "/"}, 0, ""},
		{[]string{"cp", ":/key", local}, 2, "sandbox paths are relative to the daemon's base dir " + d.base + ": :/key is outside it"},
		{[]string{"cp", ":" + d.base + "-other/key", local}, 2, "is outside it"},
		{[]string{"cp", ":key", "/nonexistent-dir/key"}, 125, "cannot write /nonexistent-dir/key: no such file or directory"},
		{[]string{"cp", ":key", "/nonexistent-dir/"}, 125, "cannot write /nonexistent-dir/key: no such file or directory"},
		{[]string{"cp", ":", local}, 2, "name the sandbox file to copy"},
	} {
		r := runClient(t, d.env(), "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.err) || strings.Contains(r.stderr, ".part-") {
			t.Errorf("%v: exit %d stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.err)
		}
	}
	if _, err := os.Stat(filepath.Join(d.base, strings.TrimPrefix(d.base, "/"), "abs")); err == nil {
		t.Errorf("cp to :/abs wrote under the base dir")
	}
	if b, err := os.ReadFile(filepath.Join(d.base, "abs")); err != nil || string(b) != "secret\n" {
		t.Errorf("cp to :%s/abs: %q %v; want the key's bytes in the base dir's abs", d.base, b, err)
	}
	if b, err := os.ReadFile(filepath.Join(local, "run.sh")); err != nil || !strings.Contains(string(b), "echo hi") {
		t.Errorf("cp :%s/bin/run.sh %s/: %q %v", d.base, local, b, err)
	}
}

// TestCLIInterruptWithTheDaemonGone (F11): SIGINT after the start, while
// the daemon cannot be reached, cannot be forwarded: the client says so
// and exits 130 at once instead of re-dialling for 30 s.
func TestCLIInterruptWithTheDaemonGone(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	p := newBlipProxy(t, d.url)
	cmd := exec.Command(binPath, "exec", "--timeout", "60", "--", "sh", "-c", "echo started; exec sleep 50")
	cmd.Env = append(cliEnv(), "SANDBOX_RUNTIME_URL="+p.url())
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	p.setDown(true)
	p.waitRefused(t, 1) // the client re-dials its stream
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(errb.String(), "SIGINT could not be forwarded") {
		t.Errorf("exit %d, stderr %q; want 130 and why", code, errb.String())
	}
	http.Post(d.url+"/v1/commands/"+waitRunningID(t, d)+"/kill", "application/json", nil)
}

// waitRunningID returns the id of the daemon's one command.
func waitRunningID(t *testing.T, d *cliDaemon) string {
	t.Helper()
	resp, err := http.Get(d.url + "/v1/commands")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l wire.CommandList
	json.NewDecoder(resp.Body).Decode(&l)
	if len(l.Commands) != 1 {
		t.Fatalf("commands: %+v", l)
	}
	return l.Commands[0].CommandID
}

// TestCLIMessages (F10, F17): messages a person can act on: ps escapes the
// control bytes of an argv; a URL without scheme and a bad --state are
// explained; a password in the URL is never echoed; a wrong flag is said
// with the subcommand's name; --help goes to stdout with exit 0.
func TestCLIMessages(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	if r := runClient(t, d.env(), "", "run", "-d", "--", "printf", "\x1b[2J\x1b]0;pwned\x07"); r.code != 0 {
		t.Fatalf("run -d: %+v", r)
	}
	waitFinishedOne(t, d)
	if r := runClient(t, d.env(), "", "ps"); r.code != 0 || strings.ContainsAny(r.stdout, "\x1b\x07") || !strings.Contains(r.stdout, `"\x1b[2J\x1b]0;pwned\a"`) {
		t.Errorf("ps: %+v; want the argv quoted with its control bytes escaped", r)
	}
	for _, tc := range []struct {
		args    []string
		code    int
		stdout  string
		stderr  string
		notSaid string
	}{
		{[]string{"ps", "--state", "bogus"}, 2, "", `--state "bogus" is not a state: running, exited`, ""},
		{[]string{"ps", "--url", "127.0.0.1:1"}, 125, "", `must start with http:// or https://, e.g. http://127.0.0.1:1`, "first path segment"},
		{[]string{"ps", "--url", "http://me:s3cret@127.0.0.1:1"}, 125, "", "http://me:xxxxx@127.0.0.1:1", "s3cret"},
		{[]string{"exec", "--bogus", "--", "true"}, 2, "", "sandbox-runtime exec: flag provided but not defined: --bogus\nusage: sandbox-runtime exec", ""},
		{[]string{"exec", "--help"}, 0, "usage: sandbox-runtime exec", "", ""},
		{[]string{"--url", "http://127.0.0.1:1", "ps", "-q"}, 2, "", "the client's flags go after its subcommand: sandbox-runtime ps --url http://127.0.0.1:1 -q", ""},
		{[]string{"--help"}, 0, "sandbox-runtime attach [--no-stdin] [--cursor N] [--hold S] ID", "", ""},
	} {
		r := runClient(t, nil, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout, tc.stdout) || !strings.Contains(r.stderr, tc.stderr) || tc.notSaid != "" && strings.Contains(r.stdout+r.stderr, tc.notSaid) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d, %q on stdout, %q on stderr", tc.args, r.code, r.stdout, r.stderr, tc.code, tc.stdout, tc.stderr)
		}
	}
}

// TestCLIAttachPipedInputNotLost (issue 20 item 3): 2,500,000 bytes piped
// into attach of a terminal command that reads nothing for a while all
// arrive: the daemon's full stdin queue holds the WebSocket back instead of
// refusing frames.
func TestCLIAttachPipedInputNotLost(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	const n = 2500000
	body := `{"argv":["sh","-c","stty raw -echo; sleep 2; timeout --foreground 60 head -c ` + strconv.Itoa(n) + ` | wc -c"],"pty":{"cols":80,"rows":24}}`
	resp, err := http.Post(d.url+"/v1/commands", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var st wire.Status
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	in := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(in, bytes.Repeat([]byte("abcdefghijklmnopqrstuvwxy"), n/25), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runClientFile(t, d.env(), in, "attach", st.CommandID)
	if r.code != 0 || !strings.Contains(r.stdout, strconv.Itoa(n)) || strings.Contains(r.stderr, "refused") {
		t.Errorf("attach with %d bytes piped: exit %d, stdout %q, stderr %q; want exit 0 and %d", n, r.code, r.stdout, r.stderr, n)
	}
}

// TestCLILogsFollowShutdown (issue 20 item 19): logs -f of a command that
// the daemon's shutdown ends says so and exits 143, as exec and attach do.
func TestCLILogsFollowShutdown(t *testing.T) {
	t.Parallel()
	dm := daemontest.StartT(t, daemontest.Options{Bin: binPath, BaseDir: t.TempDir(), LogPath: filepath.Join(t.TempDir(), "daemon.log"), CheckLeaks: true})
	env := []string{"SANDBOX_RUNTIME_URL=" + dm.URL}
	r := runClient(t, env, "", "run", "-d", "--", "sh", "-c", "echo first; exec sleep 60")
	id := strings.TrimSpace(r.stdout)
	follow, br, ferr := followUntilFirst(t, env, id)
	if err := dm.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	io.ReadAll(br)
	err := follow.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 143 || !strings.Contains(ferr.String(), "shut down and ended the command") {
		t.Errorf("logs -f across a shutdown: %v, stderr %q; want exit 143 saying the shutdown ended it", err, ferr.String())
	}
}

// TestCLIHelpSpellingAndSuggestions (issue 20 item 19): a subcommand's help
// spells word flags with two dashes, as the daemon's --help and the usage
// lines do; a mistyped subcommand gets a "did you mean".
func TestCLIHelpSpellingAndSuggestions(t *testing.T) {
	t.Parallel()
	for _, name := range cli.Commands() {
		r := runClient(t, nil, "", name, "--help")
		if r.code != 0 || !strings.Contains(r.stdout, "\n  --url string\n") || strings.Contains(r.stdout, "\n  -url") || strings.Contains(r.stdout, "\n  -token-file") {
			t.Errorf("%s --help: exit %d, %q; want --url and --token-file with two dashes", name, r.code, r.stdout)
		}
	}
	for _, tc := range []struct{ arg, want string }{
		{"exce", `did you mean "exec"?`}, {"log", `did you mean "logs"?`}, {"atach", `did you mean "attach"?`},
		{"frobnicate", `unknown subcommand "frobnicate"`},
	} {
		r := runClient(t, nil, "", tc.arg, "x")
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s x: exit %d, stderr %q; want %d and %s", tc.arg, r.code, r.stderr, cli.ExitUsage, tc.want)
		}
	}
}

// TestCLIAttachInputAfterTheEnd: piped input that a terminal command
// no longer takes because it has finished is not a loss: exit 0, quiet.
func TestCLIAttachInputAfterTheEnd(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	body := `{"argv":["sh","-c","stty raw -echo; head -c 10 >/dev/null; echo took-10"],"pty":{"cols":80,"rows":24}}`
	resp, err := http.Post(d.url+"/v1/commands", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var st wire.Status
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	in := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(in, bytes.Repeat([]byte("x"), 2500000), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runClientFile(t, d.env(), in, "attach", st.CommandID)
	if r.code != 0 || !strings.Contains(r.stdout, "took-10") || r.stderr != "" {
		t.Errorf("attach of a command that stops reading: exit %d, stdout %q, stderr %q; want exit 0, quiet", r.code, r.stdout, r.stderr)
	}
}

// TestCLIAttachSignalNotBehindInput (issue 20, attacker D7): SIGINT to
// attach reaches the command at once although 8 MB piped into it (more than the daemon and the
// kernels hold) wait for
// a command that reads nothing: the signal does not queue behind the
// stdin frames.
func TestCLIAttachSignalNotBehindInput(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	resp, err := http.Post(d.url+"/v1/commands", "application/json", strings.NewReader(`{"argv":["sh","-c","echo ready; exec sleep 60"],"stdin":true}`))
	if err != nil {
		t.Fatal(err)
	}
	var st wire.Status
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	in := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(in, bytes.Repeat([]byte("z"), 8000000), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, "attach", st.CommandID)
	cmd.Env = append(cliEnv(), "SANDBOX_RUNTIME_URL="+d.url)
	cmd.Stdin = f
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	// Wait until attach has read the whole input (its stdin's offset):
	// more than the daemon holds for a command that does not read.
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/fdinfo/0")
		if bytes.HasPrefix(b, []byte("pos:\t8000000\n")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("attach never read its input: %q", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t0 := time.Now()
	cmd.Process.Signal(syscall.SIGINT)
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 || time.Since(t0) > 10*time.Second {
		t.Fatalf("SIGINT behind 3 MB of input: %v after %v (stderr %q); want exit 130 at once", err, time.Since(t0), errb.String())
	}
	r, err := http.Get(d.url + "/v1/commands/" + st.CommandID)
	if err != nil {
		t.Fatal(err)
	}
	var fin wire.Status
	json.NewDecoder(r.Body).Decode(&fin)
	r.Body.Close()
	if fin.State != "exited" || fin.Signal == nil || *fin.Signal != "SIGINT" {
		t.Fatalf("the command after attach's SIGINT: %s, signal %v (attach stderr %q); want ended by SIGINT", fin.State, fin.Signal, errb.String())
	}
	t.Logf("SIGINT behind 8 MB of piped input: attach exited 130 after %v", time.Since(t0))
}

// TestCLIUsageErrorsAsTyped (issue 20, attacker D8): an empty first
// argument is a usage error, not the daemon starting; a subcommand in
// capitals gets a did-you-mean; an unknown flag is named as typed.
func TestCLIUsageErrorsAsTyped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{""}, "an empty first argument is not a subcommand"},
		{[]string{"KILL"}, `did you mean "kill"?`},
		{[]string{"ps", "--bogus"}, "flag provided but not defined: --bogus\n"},
		{[]string{"ps", "--bogus=3"}, "flag provided but not defined: --bogus\n"},
		{[]string{"ps", "-bogus"}, "flag provided but not defined: -bogus\n"},
	} {
		r := runClient(t, []string{"SANDBOX_RUNTIME_URL=http://127.0.0.1:1"}, "", tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("sandbox-runtime %q: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// followUntilFirst starts `logs -f id` (bounded by a minute, ended with the
// test) and reads its first line, which must be "first"; it returns the
// running client, the rest of its stdout and its stderr.
func followUntilFirst(t *testing.T, env []string, id string) (*exec.Cmd, *bufio.Reader, *bytes.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	follow := exec.CommandContext(ctx, binPath, "logs", "-f", id)
	follow.Env = append(cliEnv(), env...)
	ferr := new(bytes.Buffer)
	follow.Stderr = ferr
	fout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(fout)
	if line, err := br.ReadString('\n'); line != "first\n" {
		t.Fatalf("logs -f first line %q, %v", line, err)
	}
	return follow, br, ferr
}
