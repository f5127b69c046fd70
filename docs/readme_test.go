//go:build linux

package docs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbox-runtime/sandbox-runtime/internal/daemontest"
)

// The documents' shell examples run as written (issue 20, item 15; issue
// 21, item 10 moved most of them out of the README): every ```sh block of
// README.md and of every docs/*.md is run, in order (README.md first, then
// docs/ by name), by TestREADMEExamples against the daemon started by
// `make run` itself, unless the line before it marks it as needing Docker:
//
//	<!-- example: docker -->        runs containers of the images (a machine with Docker)
//	<!-- example: docker build -->  builds the images (what .ci/docker.sh does, offline)
//
// Shell examples are fenced as ```sh only (```bash, ```shell and ```console
// are refused, so none escapes the test); a transcript that is not a script
// (a websocat session) is ```text.
const (
	readmeFile = "../README.md"
	docsDir    = "." // the tests run in docs/
)

const (
	readmeNetnsEnv  = "README_EXAMPLES_IN_NETNS" // set for the re-executed test inside the network namespace
	blockTimeout    = 90 * time.Second           // one block (the slowest waits about 5 s)
	daemonStartWait = 3 * time.Minute            // make run: the shim, the race-built daemon on a loaded machine

	// The examples there are today, as floors: a block that stops being
	// found (a fence renamed, a document moved out of docs/) fails.
	minShellExamples  = 4 // README: first screen, try it; docs/cli.md; docs/terminals.md
	minDockerExamples = 4 // README: first screen; docs/images.md: python, codex, the codex stub
)

// example is one fenced shell block of a document.
type example struct {
	file   string // as the messages name it: README.md, docs/cli.md
	line   int    // of the opening fence, 1-based
	marker string // "", "docker" or "docker build"
	text   string
}

func (e example) where() string { return fmt.Sprintf("%s:%d", e.file, e.line) }

var markerRE = regexp.MustCompile(`^<!-- example: ([a-z ]+) -->$`)

// docFiles returns the documents whose examples run, as paths from docs/:
// README.md, then every docs/*.md by name, so that a document added to
// docs/ is covered without a list to update.
func docFiles() ([]string, error) {
	md, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil {
		return nil, err
	}
	sort.Strings(md)
	return append([]string{readmeFile}, md...), nil
}

// docName is how messages name a document of docFiles: from the repository's root.
func docName(path string) string {
	if path == readmeFile {
		return "README.md"
	}
	return "docs/" + filepath.Base(path)
}

// docExamples returns the ```sh blocks of every document of docFiles, in
// order, failing t for every problem parseExamples finds.
func docExamples(t *testing.T) []example {
	t.Helper()
	files, err := docFiles()
	if err != nil {
		t.Fatal(err)
	}
	var out []example
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ex, problems := parseExamples(docName(f), data)
		for _, p := range problems {
			t.Error(p)
		}
		out = append(out, ex...)
	}
	return out
}

// parseExamples returns the ```sh blocks of one document (named name in the
// messages), and its problems: shell blocks under another name, unknown
// markers, unterminated blocks, unmarked blocks that call docker, sudo.
func parseExamples(name string, data []byte) (out []example, problems []string) {
	var (
		cur     *example
		body    strings.Builder
		prev    string // the last non-blank line outside a block
		inOther bool   // inside a fence that is not ```sh
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && line == "```":
			cur.text = body.String()
			out = append(out, *cur)
			cur, prev = nil, ""
			body.Reset()
		case cur != nil:
			body.WriteString(line + "\n")
		case inOther && strings.HasPrefix(line, "```"):
			inOther, prev = false, ""
		case inOther:
		case strings.HasPrefix(line, "```"):
			info := strings.TrimSpace(strings.TrimPrefix(line, "```"))
			switch info {
			case "sh":
				cur = &example{file: name, line: n}
				if m := markerRE.FindStringSubmatch(prev); m != nil {
					cur.marker = m[1]
					if cur.marker != "docker" && cur.marker != "docker build" {
						problems = append(problems, fmt.Sprintf("%s:%d: unknown marker %q (docker, docker build)", name, n-1, cur.marker))
					}
				}
			case "bash", "shell", "console", "zsh", "sh-session":
				problems = append(problems, fmt.Sprintf("%s:%d: a shell block is fenced ```%s: use ```sh, which this test runs (```text for a transcript)", name, n, info))
				inOther = true
			default:
				inOther = true
			}
		case strings.TrimSpace(line) != "":
			prev = strings.TrimSpace(line)
		}
	}
	if cur != nil {
		problems = append(problems, fmt.Sprintf("%s:%d: unterminated ```sh block", name, cur.line))
	}
	dockerRE := regexp.MustCompile(`(?m)^\s*(sudo\s+)?docker\s`)
	for _, e := range out {
		if e.marker == "" && dockerRE.MatchString(e.text) {
			problems = append(problems, fmt.Sprintf("%s: this example runs docker: mark it <!-- example: docker --> (or docker build) on the line before", e.where()))
		}
		if strings.Contains(e.text, "sudo ") {
			problems = append(problems, fmt.Sprintf("%s: an example uses sudo, which a root machine may not have: say \"as root\" instead", e.where()))
		}
	}
	return out, problems
}

// selectExamples returns the examples a mode runs: "" (make run) the
// unmarked ones, "docker" (.ci/docker.sh, README_EXAMPLES=docker) the ones
// marked docker. The "docker build" blocks run in neither: the docker stage
// builds the same images offline.
func selectExamples(examples []example, mode string) []example {
	var out []example
	for _, e := range examples {
		if e.marker == mode {
			out = append(out, e)
		}
	}
	return out
}

// TestREADMEExamples runs every unmarked ```sh block of README.md and
// docs/*.md (docFiles) as a bash
// script (set -e -o pipefail) in a fresh directory, with the built binary
// first on PATH, against the daemon `make run` starts (its own flags: loopback,
// a fresh temporary base dir), each block bounded. curl is wrapped to add
// --fail-with-body, so an example answered 4xx or 5xx fails. It runs in a
// network namespace of its own, where 127.0.0.1:8888, the README's port, is
// free whatever else this machine runs.
func TestREADMEExamples(t *testing.T) {
	examples := docExamples(t)
	if os.Getenv("README_EXAMPLES") == "docker" {
		runDockerExamples(t, examples)
		return
	}
	if os.Getenv(readmeNetnsEnv) != "1" {
		runInNetns(t)
		return
	}
	bringLoopbackUp(t)

	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin, err := daemontest.Build(context.Background(), daemontest.BuildOptions{Dir: filepath.Join(tmp, "bin"), Version: "readme-test", Race: daemontest.RaceEnabled})
	if err != nil {
		t.Fatal(err)
	}
	shims := filepath.Join(tmp, "shims")
	writeShims(t, shims, bin)

	// make run, with GO standing for "go run" of the already built binary:
	// every flag and the base dir are make's own.
	runTmp := filepath.Join(tmp, "run-tmp")
	if err := os.Mkdir(runTmp, 0o700); err != nil {
		t.Fatal(err)
	}
	var runLog syncBuffer
	mk := exec.Command("make", "-s", "-C", repo, "run", "GO="+filepath.Join(shims, "go"))
	// HOME of its own: a shell of the examples (bash -i) writes its history there.
	home := filepath.Join(tmp, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	mk.Env = append(cleanEnv(), "PATH="+os.Getenv("PATH"), "TMPDIR="+runTmp, "HOME="+home) // stderr is no terminal: the log is JSON
	mk.Stdout, mk.Stderr = &runLog, &runLog
	mk.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := mk.Start(); err != nil {
		t.Fatalf("make run: %v", err)
	}
	exited := make(chan struct{})
	go func() { mk.Wait(); close(exited) }()
	t.Cleanup(func() { stopGroup(t, mk.Process.Pid, exited, &runLog) })
	waitHealthy(t, exited, &runLog)

	// make run serves loopback only, from a base dir outside the clone (the
	// daemon's own "listening" line says both).
	var listening struct{ Addr, BaseDir string }
	for _, line := range strings.Split(runLog.String(), "\n") {
		if strings.Contains(line, `"msg":"listening"`) {
			var l struct {
				Addr    string `json:"addr"`
				BaseDir string `json:"base_dir"`
			}
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("the listening line %q: %v", line, err)
			}
			listening.Addr, listening.BaseDir = l.Addr, l.BaseDir
		}
	}
	if listening.Addr != "127.0.0.1:8888" {
		t.Errorf("make run listens on %q; want 127.0.0.1:8888 (loopback only)", listening.Addr)
	}
	if rel, err := filepath.Rel(repo, listening.BaseDir); listening.BaseDir == "" || err != nil || !strings.HasPrefix(rel, "..") {
		t.Errorf("make run's base dir %q is inside the source tree %s (or unknown)", listening.BaseDir, repo)
	}

	for _, e := range examples {
		if e.marker != "" {
			t.Logf("%s: not run here: marked %q (.ci/docker.sh runs the docker ones with README_EXAMPLES=docker, and builds the images itself)", e.where(), e.marker)
		}
	}
	selected := selectExamples(examples, "")
	for i, e := range selected {
		dir := filepath.Join(tmp, fmt.Sprintf("example-%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := runBlock(dir, home, shims, e.text)
		if err != nil {
			t.Errorf("%s: the example failed (%v):\n%s--- its output:\n%s", e.where(), err, e.text, out)
		} else {
			t.Logf("%s: ran (%d bytes of output)", e.where(), len(out))
		}
	}
	if len(selected) < minShellExamples {
		t.Errorf("ran %d examples; README.md and docs/ have at least %d unmarked ```sh blocks (first screen, try it, client, terminals)", len(selected), minShellExamples)
	}
}

// runDockerExamples runs the blocks marked <!-- example: docker --> of
// README.md and docs/*.md in order,
// from the repository's root (they name files of the clone), with the built
// client first on PATH: .ci/docker.sh runs it (README_EXAMPLES=docker) once
// it has built the images under the README's names. On 127.0.0.1:8888 of this
// machine, which must be free. README_DOCKER_RUN_ARGS is added to every
// `docker run` (the stage's private dockerd has no default bridge: it passes
// --network of its own). The "docker build" blocks are not run here: the
// stage builds the same images offline (the README's recipe).
func runDockerExamples(t *testing.T, examples []example) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Fatal("README_EXAMPLES=docker: docker is not installed")
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin, err := daemontest.Build(context.Background(), daemontest.BuildOptions{Dir: filepath.Join(tmp, "bin"), Version: "readme-test"})
	if err != nil {
		t.Fatal(err)
	}
	shims := filepath.Join(tmp, "shims")
	writeShims(t, shims, bin)
	home := filepath.Join(tmp, "home") // the docker CLI's ~/.docker, nothing of the developer's
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	shim := "#!/bin/sh\nif [ \"$1\" = run ]; then shift; exec " + shq(docker) + " run $README_DOCKER_RUN_ARGS \"$@\"; fi\nexec " + shq(docker) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(shims, "docker"), []byte(shim), 0o755); err != nil {
		t.Fatal(err)
	}
	selected := selectExamples(examples, "docker")
	for _, e := range selected {
		out, err := runBlock(repo, home, shims, e.text)
		if err != nil {
			t.Errorf("%s: the docker example failed (%v):\n%s--- its output:\n%s", e.where(), err, e.text, out)
		} else {
			t.Logf("%s: ran:\n%s", e.where(), out)
		}
	}
	if len(selected) < minDockerExamples {
		t.Errorf("%d <!-- example: docker --> blocks in README.md and docs/; want at least %d (first screen, python, codex, the codex stub)", len(selected), minDockerExamples)
	}
}

// runInNetns runs this test again inside a new network namespace and
// reports its result.
func runInNetns(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("cannot create a network namespace: unshare(1) is not installed")
	}
	args := []string{"--net"}
	if os.Getuid() != 0 {
		args = []string{"--map-root-user", "--net"}
	}
	if out, err := exec.Command("unshare", append(args, "true")...).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace (unshare %s): %v %s", strings.Join(args, " "), err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args = append(args, self, "-test.run", "^TestREADMEExamples$", "-test.v", "-test.count=1", "-test.timeout", "12m")
	ctx, cancel := context.WithTimeout(context.Background(), 13*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.Env = append(cleanEnv(), "PATH="+os.Getenv("PATH"), "HOME="+os.Getenv("HOME"), readmeNetnsEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	t.Logf("inside the network namespace:\n%s", out)
	if err != nil {
		t.Fatalf("the README examples failed: %v", err)
	}
	if !bytes.Contains(out, []byte("--- PASS: TestREADMEExamples")) {
		t.Fatal("the test inside the network namespace did not pass")
	}
}

// bringLoopbackUp sets lo up in this (new) network namespace.
func bringLoopbackUp(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		t.Fatal(err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		t.Fatalf("setting lo up: %v", err)
	}
}

// writeShims writes the stand-ins: go (make run's "go run" of the built
// binary, with make's arguments) and curl (the real one, failing on HTTP
// errors), and links the binary in as sandbox-runtime.
func writeShims(t *testing.T, dir, bin string) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("the README examples need curl: not installed")
	}
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatal("the README examples need jq: not installed")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		// make run calls: $(GO) run -ldflags '…' ./cmd/sandbox-runtime FLAGS…
		"go": "#!/bin/sh\n[ \"$1\" = run ] || { echo \"go shim: not a go run: $*\" >&2; exit 2; }\n" +
			"while [ $# -gt 0 ]; do\n  if [ \"$1\" = ./cmd/sandbox-runtime ]; then shift; exec " + shq(bin) + " \"$@\"; fi\n  shift\ndone\n" +
			"echo 'go shim: no ./cmd/sandbox-runtime in the arguments' >&2; exit 2\n",
		"curl": "#!/bin/sh\nexec " + shq(curl) + " --fail-with-body \"$@\"\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(bin, filepath.Join(dir, "sandbox-runtime")); err != nil {
		t.Fatal(err)
	}
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// runBlock runs one example in dir with that HOME, bounded; it returns the
// combined output.
func runBlock(dir, home, shims, text string) (string, error) {
	f, err := os.CreateTemp("", "readme-example-*.sh")
	if err != nil {
		return "", err
	}
	script := f.Name()
	defer os.Remove(script)
	_, err = f.WriteString("set -e -o pipefail\n" + text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), blockTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "PATH="+shims+":"+os.Getenv("PATH"), "HOME="+home)
	cmd.Stdin = nil // /dev/null
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // anything it left in its group
	if ctx.Err() != nil {
		err = fmt.Errorf("still running after %v", blockTimeout)
	}
	return string(out), err
}

// cleanEnv is this process's environment without SANDBOX_ variables, PATH,
// HOME and TMPDIR (each caller sets its own, once), and the netns marker.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "SANDBOX_") || k == "PATH" || k == "HOME" || k == "TMPDIR" || k == readmeNetnsEnv {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// waitHealthy polls GET /v1/health on make run's address until it answers
// 200 and the daemon's "listening" line has reached the log (it is copied
// from a pipe, so it may arrive after the answer), make exits, or the
// deadline passes.
func waitHealthy(t *testing.T, exited <-chan struct{}, log *syncBuffer) {
	deadline := time.Now().Add(daemonStartWait)
	c := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := c.Get("http://127.0.0.1:8888/v1/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.Contains(log.String(), `"msg":"listening"`) {
				return
			}
		}
		select {
		case <-exited:
			t.Fatalf("make run exited before it served:\n%s", log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("make run did not answer /v1/health within %v:\n%s", daemonStartWait, log.String())
		}
	}
}

// stopGroup ends make run: SIGTERM to its process group (make and the
// daemon), SIGKILL after a bounded wait.
func stopGroup(t *testing.T, pgid int, exited <-chan struct{}, log *syncBuffer) {
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(40 * time.Second):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
		t.Errorf("make run did not stop within 40 s of SIGTERM:\n%s", log.String())
	}
	if err := syscall.Kill(-pgid, 0); !errors.Is(err, syscall.ESRCH) {
		syscall.Kill(-pgid, syscall.SIGKILL)
	}
	if t.Failed() {
		t.Logf("make run's output:\n%s", log.String())
	}
}

// syncBuffer is a bytes.Buffer written by a process's output copier and read
// by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
