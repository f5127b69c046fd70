package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary a process of a test-like tree (runHelper).
const helperEnv = "TESTEXEC_TEST_HELPER"

// treeMarkEnv carries a per-test marker to every process of a tree, so the
// test finds them in /proc whatever their parent or session is.
const treeMarkEnv = "TESTEXEC_TEST_TREE"

// chainDepth is the length of the tree's fork chain.
const chainDepth = 5

// treeSize is the number of processes a ready tree has: the root, a
// plain child, a setsid'd grandchild (its parent has exited), and the
// chain of chainDepth forks below a first link.
const treeSize = 1 + 1 + 1 + chainDepth + 1

var testexecBin string

// hostProc is the /proc of the test binary's own namespace.
var hostProc procDir

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(runHelper(h, os.Args[1:]))
	}
	var err error
	if hostProc, err = openProc("/proc"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "testexec-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testexecBin = filepath.Join(dir, "testexec")
	build := exec.Command("go", "build", "-o", testexecBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building testexec:", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// hangForever blocks until the process is killed. Not select {}: in a
// binary built without -race, a process whose only goroutine blocks there
// dies at once ("all goroutines are asleep - deadlock!"), and a tree
// without its hanging processes passed or failed its test for the wrong
// reason (go test ./internal/testexec/ without -race failed
// TestCICheckProcMountedOver: the orphan it looks for was gone). A pending
// timer keeps the runtime from calling it a deadlock.
func hangForever() {
	for {
		time.Sleep(time.Hour)
	}
}

// runHelper is one process of a test-like tree. Every process that stays
// reports "ready" on its stdout once everything below it is ready.
func runHelper(name string, args []string) int {
	switch name {
	case "hang":
		fmt.Println("ready")
		hangForever()
	case "setsid-parent":
		// A grandchild in a session of its own, then exit: it is orphaned.
		if err := startReady("hang", nil, &syscall.SysProcAttr{Setsid: true}); err != nil {
			return fail(err)
		}
		fmt.Println("ready")
		return 0
	case "chain":
		n, _ := strconv.Atoi(args[0])
		next := "hang"
		var nextArgs []string
		if n > 0 {
			next, nextArgs = "chain", []string{strconv.Itoa(n - 1)}
		}
		if err := startReady(next, nextArgs, nil); err != nil {
			return fail(err)
		}
		fmt.Println("ready")
		hangForever()
	case "tree", "tree-exit":
		for _, c := range []struct {
			name string
			args []string
		}{{"hang", nil}, {"setsid-parent", nil}, {"chain", []string{strconv.Itoa(chainDepth - 1)}}} {
			if err := startReady(c.name, c.args, nil); err != nil {
				return fail(err)
			}
		}
		fmt.Println("ready")
		if name == "tree-exit" {
			return 0 // leave the tree behind
		}
		hangForever()
	case "exit":
		n, _ := strconv.Atoi(args[0])
		return n
	case "blind":
		// A setsid'd orphan, then the proc of a new PID namespace (empty
		// once its init exits) mounted over /proc of our mount namespace.
		if err := startReady("setsid-parent", nil, nil); err != nil {
			return fail(err)
		}
		mount := exec.Command(os.Args[0])
		mount.Env = environWith(helperEnv + "=mount-proc")
		mount.Stdout, mount.Stderr = os.Stderr, os.Stderr
		mount.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
		if err := mount.Run(); err != nil {
			return fail(fmt.Errorf("mount-proc: %v", err))
		}
		fmt.Println("ready")
		return 0
	case "mount-proc":
		if err := syscall.Mount("proc", "/proc", "proc", 0, ""); err != nil {
			return fail(err)
		}
		return 0
	case "umount-proc":
		// What is under the namespace's /proc is the host's proc.
		if err := syscall.Unmount("/proc", syscall.MNT_DETACH); err != nil {
			return fail(err)
		}
		fmt.Println("ready")
		return 0
	case "private-mounts":
		// Started in a new mount namespace: make it private (so nothing
		// mounted in it reaches the test's), then exec args.
		if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
			return fail(err)
		}
		path, err := exec.LookPath(args[0])
		if err != nil {
			return fail(err)
		}
		return fail(syscall.Exec(path, args, environWith(helperEnv+"=")))
	case "term-exits":
		// Exit 42 on SIGTERM (passed on by testexec).
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		fmt.Println("ready")
		<-c
		return 42
	}
	fmt.Fprintln(os.Stderr, "unknown helper", name)
	return 2
}

// startReady starts helper name and waits for its "ready" line.
func startReady(name string, args []string, attr *syscall.SysProcAttr) error {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = environWith(helperEnv + "=" + name)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = attr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		return fmt.Errorf("%s said %q (%v)", name, line, err)
	}
	return nil
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "helper:", err)
	return 3
}

// environWith is our environment with each KEY=VALUE of set replacing any
// KEY we have (os.Getenv returns the first of duplicates).
func environWith(set ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(set, func(s string) bool { return strings.HasPrefix(s, k+"=") }) {
			env = append(env, kv)
		}
	}
	return append(env, set...)
}

// treeProcs lists the live processes carrying the tree's marker.
func treeProcs(mark string) []int {
	var pids []int
	for _, p := range hostProc.scan() {
		if hostProc.hasEnv(p, treeMarkEnv, mark) {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

// wrapped is testexec running helper name, in the given mode, with a fresh
// tree marker. When the test ends every process with the marker is
// SIGKILLed by PID (until none is left), so a failing test leaves nothing.
func wrapped(t *testing.T, mode, name string, args ...string) (*exec.Cmd, string) {
	mark := strconv.FormatUint(rand.Uint64(), 36)
	cmd := exec.Command(testexecBin, append([]string{"-label", "tree", "--", os.Args[0]}, args...)...)
	// Neither the stage's marker nor its report: what these trees leave on
	// purpose is this test's to judge, not the CI stage's.
	cmd.Env = environWith(helperEnv+"="+name, treeMarkEnv+"="+mark, modeEnv+"="+mode, markEnv+"=", reportEnv+"=")
	t.Cleanup(func() {
		deadline := time.Now().Add(20 * time.Second)
		for left := treeProcs(mark); len(left) > 0; left = treeProcs(mark) {
			if time.Now().After(deadline) {
				t.Errorf("processes %v of the tree still alive", left)
				return
			}
			for _, pid := range left {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(5 * time.Millisecond) // polling the process table
		}
	})
	return cmd, mark
}

// needNamespaces skips unless testexec can make a PID namespace here.
func needNamespaces(t *testing.T) {
	cmd := exec.Command(testexecBin, "--", "true")
	cmd.Env = environWith(modeEnv + "=ns")
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == 125 {
		t.Skipf("no PID namespace here (needs CAP_SYS_ADMIN): %s", bytes.TrimSpace(out))
	}
	if err != nil {
		t.Fatalf("testexec -- true: %v\n%s", err, out)
	}
}

// readReady waits (bounded) for the tree's "ready" line on r.
func readReady(t *testing.T, r *bufio.Reader) {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		line, _ := r.ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if line != "ready\n" {
			t.Fatalf("the tree said %q; want ready", line)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the tree was not ready within 60s")
	}
}

// waitNone polls (bounded) until no process carries the tree's marker.
func waitNone(t *testing.T, mark string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := treeProcs(mark)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var desc []string
			for _, pid := range left {
				desc = append(desc, fmt.Sprintf("%d (%s)", pid, hostProc.cmdline(proc{pid: pid})))
			}
			t.Fatalf("%d process(es) of the tree survived: %s", len(left), strings.Join(desc, ", "))
		}
		time.Sleep(10 * time.Millisecond) // polling the process table
	}
}

// TestSIGKILLLeavesNothing: a test-like tree (a child, a setsid'd orphan,
// a fork chain) under testexec, then SIGKILL to testexec alone, as a
// `go test` timeout or a CI limit does: every process of the tree dies.
func TestSIGKILLLeavesNothing(t *testing.T) {
	needNamespaces(t)
	cmd, mark := wrapped(t, "ns", "tree")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readReady(t, bufio.NewReader(out))
	if n := len(treeProcs(mark)); n < treeSize {
		t.Fatalf("%d processes carry the marker; want at least %d (the ready tree)", n, treeSize)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	waitNone(t, mark, 10*time.Second)
}

// TestLeftoversAreReportedAndKilled: the tree's root exits and leaves the
// rest behind: testexec names them, kills them, and exits 1.
func TestLeftoversAreReportedAndKilled(t *testing.T) {
	for _, mode := range []string{"ns", "subreaper"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "ns" {
				needNamespaces(t)
			}
			cmd, mark := wrapped(t, mode, "tree-exit")
			reportFile := filepath.Join(t.TempDir(), "report")
			cmd.Env = append(cmd.Env, reportEnv+"="+reportFile)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			done := make(chan error, 1)
			var stdout []byte
			go func() {
				var err error
				stdout, err = cmd.Output()
				done <- err
			}()
			select {
			case <-done:
			case <-ctx.Done():
				cmd.Process.Kill()
				<-done
				t.Fatalf("testexec did not exit; stderr:\n%s", stderr.String())
			}
			if string(stdout) != "ready\n" {
				t.Errorf("stdout %q; want ready", stdout)
			}
			if code := cmd.ProcessState.ExitCode(); code != 1 {
				t.Errorf("exit code %d; want 1 (the tree left processes behind); stderr:\n%s", code, stderr.String())
			}
			want := fmt.Sprintf("testexec: tree: %d process(es) outlived it; killing them:", treeSize-1)
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr:\n%s\nwant the line %q", stderr.String(), want)
			}
			if rep, _ := os.ReadFile(reportFile); !strings.Contains(string(rep), want) {
				t.Errorf("%s: %q; want the report", reportEnv, rep)
			}
			waitNone(t, mark, 0)
		})
	}
}

// TestStatusAndSignals: testexec exits with PROG's code, passes SIGTERM
// on, and a clean PROG leaves no report and exit 0.
func TestStatusAndSignals(t *testing.T) {
	for _, mode := range []string{"ns", "subreaper"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "ns" {
				needNamespaces(t)
			}
			for _, n := range []int{0, 7} {
				cmd, _ := wrapped(t, mode, "exit", strconv.Itoa(n))
				out, _ := cmd.CombinedOutput()
				if code := cmd.ProcessState.ExitCode(); code != n || len(out) != 0 {
					t.Errorf("exit %d: testexec exited %d, output %q; want %d and nothing", n, code, out, n)
				}
			}
			cmd, _ := wrapped(t, mode, "term-exits")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			readReady(t, bufio.NewReader(out))
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 42 {
				t.Errorf("after SIGTERM: exit %d; want the helper's 42", code)
			}
		})
	}
}

// TestCICheckNamesLeftovers: .ci/no-leftovers (CI's test stages) fails a
// stage that leaves a tree behind, names its processes and kills them,
// through testexec and, when a process escaped testexec (here a stand-in
// that only execs the stage), through the stage's TESTEXEC_RUN marker.
func TestCICheckNamesLeftovers(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("no bash: %v", err)
	}
	plain := filepath.Join(t.TempDir(), "plain-exec")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\nwhile [ \"$1\" != -- ]; do shift; done; shift; exec \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, wrapper, want string
	}{
		{"testexec", testexecBin, "process(es) outlived it; killing them:"},
		{"marker", plain, "process(es) carrying TESTEXEC_RUN of this stage outlived it; killing them:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, mark := wrapped(t, "", "tree-exit")
			cmd.Args = append([]string{"bash", "../../.ci/no-leftovers", "stage"}, cmd.Args[4:]...)
			cmd.Path, _ = exec.LookPath("bash")
			cmd.Env = append(cmd.Env, "TESTEXEC="+tc.wrapper)
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != 1 {
				t.Errorf("exit %d; want 1; output:\n%s", code, out)
			}
			if n := strings.Count(string(out), tc.want); n != 2 { // as it happens and in the summary
				t.Errorf("output:\n%s\nwant %q twice", out, tc.want)
			}
			waitNone(t, mark, 0)
		})
	}
}

// runBounded runs cmd to its end within 90 s, and returns its stdout and
// stderr.
func runBounded(t *testing.T, cmd *exec.Cmd) (stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.WaitDelay = 5 * time.Second // a leftover may hold the pipes open
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%v did not exit within 90s; stderr:\n%s", cmd.Args, e.String())
	}
	return o.String(), e.String()
}

// TestProcMountedOver: a test that mounts another PID namespace's proc
// over /proc (in testexec's mount namespace) cannot hide what it leaves:
// testexec still names the setsid'd orphan and exits 1. In ns mode the
// mount is in the init's mount namespace; in subreaper mode testexec runs
// in a private mount namespace of the test's making (so the test's own
// /proc stays as it was), where the helper mounts over the /proc it sees.
func TestProcMountedOver(t *testing.T) {
	for _, mode := range []string{"ns", "subreaper"} {
		t.Run(mode, func(t *testing.T) {
			needNamespaces(t)
			cmd, mark := wrapped(t, mode, "blind")
			if mode == "subreaper" {
				cmd.Args = append([]string{os.Args[0], testexecBin}, cmd.Args[1:]...)
				cmd.Path = os.Args[0]
				cmd.Env = environWith(helperEnv+"=private-mounts", treeMarkEnv+"="+mark, modeEnv+"="+mode, markEnv+"=", reportEnv+"=")
				cmd.Args = append(cmd.Args[:len(cmd.Args)-1], "env", helperEnv+"=blind", os.Args[0])
				cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
			}
			stdout, stderr := runBounded(t, cmd)
			if stdout != "ready\n" {
				t.Fatalf("stdout %q; want ready; stderr:\n%s", stdout, stderr)
			}
			if code := cmd.ProcessState.ExitCode(); code != 1 {
				t.Errorf("exit code %d; want 1 (a process outlived the test); stderr:\n%s", code, stderr)
			}
			want := "testexec: tree: 1 process(es) outlived it; killing them:"
			if !strings.Contains(stderr, want) || !strings.Contains(stderr, ": "+os.Args[0]) {
				t.Errorf("stderr:\n%s\nwant the line %q and the orphan's command line", stderr, want)
			}
			waitNone(t, mark, 0)
		})
	}
}

// TestProcUnmounted: a test that unmounts /proc (exposing the host's proc
// below it) and leaves nothing passes: the init reports no process of
// another namespace and exits 0 at once.
func TestProcUnmounted(t *testing.T) {
	needNamespaces(t)
	cmd, _ := wrapped(t, "ns", "umount-proc")
	start := time.Now()
	stdout, stderr := runBounded(t, cmd)
	if code := cmd.ProcessState.ExitCode(); code != 0 || stdout != "ready\n" || stderr != "" {
		t.Errorf("exit code %d, stdout %q, stderr:\n%s\nwant 0, ready and nothing", code, stdout, stderr)
	}
	if d := time.Since(start); d > leakGrace {
		t.Errorf("took %v; want well under the %v leak grace (nothing was left)", d, leakGrace)
	}
}

// TestCICheckProcMountedOver: a stage that mounts another PID namespace's
// proc over the /proc that .ci/no-leftovers scans (possible only for a
// root stage in the script's own mount namespace: TESTEXEC_MODE=subreaper,
// or a wrapper that escapes testexec, as here) cannot make its leftovers
// pass as none: the script says /proc is not its own and fails (its
// orphan, out of the script's sight, is killed by the test's cleanup).
func TestCICheckProcMountedOver(t *testing.T) {
	needNamespaces(t) // the whole check runs in a private mount namespace of its own
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("no bash: %v", err)
	}
	plain := filepath.Join(t.TempDir(), "plain-exec")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\nwhile [ \"$1\" != -- ]; do shift; done; shift; exec \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd, mark := wrapped(t, "", "private-mounts")
	stage := os.Args[0]
	cmd.Path = os.Args[0]
	cmd.Args = []string{stage, "bash", "../../.ci/no-leftovers", "stage", "env", helperEnv + "=blind", stage}
	cmd.Env = append(cmd.Env, "TESTEXEC="+plain)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	stdout, stderr := runBounded(t, cmd)
	out := stdout + stderr
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit %d; want 1; output:\n%s", code, out)
	}
	if want := "/proc is not the proc of this script's PID namespace after the stage (it mounted over /proc?): its leftovers cannot be checked"; !strings.Contains(out, want) {
		t.Errorf("output:\n%s\nwant %q", out, want)
	}
	if n := len(treeProcs(mark)); n != 1 {
		t.Errorf("%d processes of the stage alive after it; want its orphan (the check could not see it; the cleanup kills it)", n)
	}
}
