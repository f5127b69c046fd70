package runtime

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
)

// helperEnv names the helper a re-executed test binary should act as.
const helperEnv = "RUNTIME_TEST_HELPER"

var testReaper *procgroup.Reaper

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(runHelper(h, os.Args[len(os.Args)-1]))
	}
	r, err := procgroup.NewReaper(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reaper:", err)
		os.Exit(2)
	}
	testReaper = r
	code := m.Run()
	testReaper.Close()
	os.Exit(code)
}

// helperArgv returns an argv that re-runs this test binary as helper name.
// The helper's argument travels as the last argv element.
func helperArgv(name, arg string) ([]string, map[string]string) {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return []string{exe, "-test.run=^$", arg}, map[string]string{helperEnv: name}
}

// helperEnviron is this process's environment with helperEnv set to name,
// for a grandchild started by a helper. It replaces the helper's own
// helperEnv rather than adding a second one: os.Getenv returns the first of
// duplicates (and os.StartProcess, unlike exec.Cmd, keeps them), so an
// appended name would make the grandchild run this helper again, without end.
func helperEnviron(name string) []string {
	env := []string{helperEnv + "=" + name}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, helperEnv+"=") {
			env = append(env, kv)
		}
	}
	return env
}

// runHelper implements the named child behaviours used by the tests.
func runHelper(name, arg string) int {
	switch name {
	case "exit":
		n, _ := strconv.Atoi(arg)
		return n
	case "echo":
		fmt.Print(arg)
		return 0
	case "hang":
		fmt.Println("ready")
		if arg != "" { // a marker file: "ready" is in the pipe now
			if err := os.WriteFile(arg, nil, 0o600); err != nil {
				return 3
			}
		}
		select {}
	case "ignore-sigterm":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		select {}
	case "spawn-grandchild":
		// Start a grandchild that hangs ignoring SIGTERM (in our process
		// group), wait until it says it is that helper, print its pid, hang.
		exe, _ := os.Executable()
		pr, pw, err := os.Pipe()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		p, err := os.StartProcess(exe, []string{exe, "-test.run=^$", "x"}, &os.ProcAttr{
			Env:   helperEnviron("ignore-sigterm"),
			Files: []*os.File{nil, pw, os.Stderr},
		})
		pw.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		if line, err := bufio.NewReader(pr).ReadString('\n'); line != "ready\n" {
			fmt.Fprintf(os.Stderr, "grandchild said %q (%v); want ready\n", line, err)
			return 3
		}
		fmt.Printf("%d\n", p.Pid)
		select {}
	case "flood":
		// Write as fast as possible for arg seconds; report the count on stderr.
		d, _ := strconv.ParseFloat(arg, 64)
		buf := make([]byte, 32<<10)
		for i := range buf {
			buf[i] = 'a' + byte(i%26)
		}
		var total int64
		deadline := time.Now().Add(time.Duration(d * float64(time.Second)))
		for time.Now().Before(deadline) {
			n, err := os.Stdout.Write(buf)
			total += int64(n)
			if err != nil {
				return 4
			}
		}
		fmt.Fprintf(os.Stderr, "%d", total)
		return 0
	case "echo-stdin":
		// Copy stdin to stdout line by line until EOF.
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Println(sc.Text())
		}
		return 0
	case "cat":
		io.Copy(os.Stdout, os.Stdin)
		return 0
	case "both":
		// Interleave stdout and stderr lines in a known order.
		n, _ := strconv.Atoi(arg)
		for i := 0; i < n; i++ {
			if i%2 == 0 {
				fmt.Fprintf(os.Stdout, "out%d\n", i)
			} else {
				fmt.Fprintf(os.Stderr, "err%d\n", i)
			}
		}
		return 0
	case "background-holds-pipe":
		// Leave a grandchild that keeps stdout open (it prints "ready"
		// there), then exit at once. "parent done" comes first, always.
		fmt.Println("parent done")
		exe, _ := os.Executable()
		_, err := os.StartProcess(exe, []string{exe, "-test.run=^$", "x"}, &os.ProcAttr{
			Env:   helperEnviron("hang"),
			Files: []*os.File{nil, os.Stdout, os.Stderr},
		})
		if err != nil {
			return 3
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown helper", name)
	return 99
}

// fakeClock is a Clock the test moves by hand.
type fakeClock struct {
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	c := &fakeClock{ch: make(chan time.Time, 1)}
	c.ch <- time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return c
}

func (c *fakeClock) Now() time.Time { t := <-c.ch; c.ch <- t; return t }

func (c *fakeClock) Advance(d time.Duration) { t := <-c.ch; c.ch <- t.Add(d) }

var _ = testing.Verbose
