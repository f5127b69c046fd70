//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// TestE2ETerminalThroughTmux drives a shell on a PTY the way a person does:
// tmux is the person's terminal, the CLI (sandbox-runtime exec -t, then
// attach) the client inside it, the built daemon at the other end. Keys
// are typed with send-keys, the window is resized with resize-window (the
// client turns the SIGWINCH into a resize), Ctrl-C interrupts a foreground
// sleep, Ctrl-] detaches, and attach ID in a window of another size
// re-attaches: the screen is replayed, the terminal takes the new window's
// size, and the shell's exit 7 is the client's exit code.
func TestE2ETerminalThroughTmux(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed (apt-get install tmux)")
	}
	d := startDaemon(t)
	sock := "sandbox-e2e-" + strconv.Itoa(os.Getpid())
	run := tmuxServer(t, tmux, sock)
	// The pane keeps the client's exit code on screen, then waits.
	start := func(name string, cols, rows int, args ...string) {
		cmd := binPath + " " + strings.Join(args, " ") + "; echo CLIENT-EXIT=$?; read x"
		run("new-session", "-d", "-s", name, "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows), cmd)
	}
	waitPane := func(name, want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			screen := run("capture-pane", "-p", "-t", name)
			if strings.Contains(screen, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("pane %s never showed %q; it shows:\n%s", name, want, screen)
			}
			time.Sleep(50 * time.Millisecond) // polling a screen nobody can be told about
		}
	}
	keys := func(name string, k ...string) { run(append([]string{"send-keys", "-t", name}, k...)...) }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// waitSize waits until the daemon reports the terminal size: the client
	// forwards a SIGWINCH asynchronously.
	waitSize := func(id string, cols, rows int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			st := d.get(ctx, id, 0)
			if st.PTY != nil && st.PTY.Cols == cols && st.PTY.Rows == rows {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the terminal of %s is %+v; want %dx%d", id, st.PTY, cols, rows)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	start("one", 100, 30, "exec", "-t", "--url", d.url, "--", "sh", "-i")
	keys("one", `PS1='$ '; stty size; echo ok-$((6*7))`, "Enter")
	waitPane("one", "ok-42")
	waitPane("one", "30 100")
	var list wire.CommandList
	d.doJSON(ctx, "GET", "/v1/commands", nil, 200, &list)
	if len(list.Commands) != 1 || list.Commands[0].PTY == nil {
		t.Fatalf("commands: %+v; want the one shell, on a terminal", list.Commands)
	}
	shell := list.Commands[0]
	run("resize-window", "-t", "one", "-x", "80", "-y", "20")
	waitSize(shell.CommandID, 80, 20)
	keys("one", "stty size", "Enter")
	waitPane("one", "20 80")

	// Ctrl-C (a key in the raw local terminal) ends the remote foreground
	// sleep; the shell goes on.
	keys("one", "sleep 100", "Enter")
	deadline := time.Now().Add(30 * time.Second)
	for !foregroundSleep(shell.PID) {
		if time.Now().After(deadline) {
			t.Fatal("sleep never became the terminal's foreground job")
		}
		time.Sleep(20 * time.Millisecond)
	}
	keys("one", "C-c")
	keys("one", "echo alive-$((40+2))", "Enter")
	waitPane("one", "alive-42")
	if foregroundSleep(shell.PID) {
		t.Fatal("sleep survived Ctrl-C")
	}

	// Ctrl-] detaches: the client exits 0, the shell runs on.
	keys("one", "C-]")
	waitPane("one", "CLIENT-EXIT=0")
	waitPane("one", "attach "+shell.CommandID)
	// The note starts a line of its own, not after the remote prompt.
	if screen := run("capture-pane", "-p", "-J", "-t", "one"); !regexp.MustCompile(`(?m)^sandbox-runtime exec: detached from`).MatchString(screen) {
		t.Errorf("the detach note does not start a line:\n%s", screen)
	}
	if st := d.get(ctx, shell.CommandID, 0); st.State != wire.StateRunning {
		t.Fatalf("after detach: %s; want running", st.State)
	}

	// attach ID from a window of another size: the screen so far is
	// replayed, and the terminal takes this window's size.
	start("two", 90, 25, "attach", "--url", d.url, shell.CommandID)
	waitPane("two", "alive-42")
	waitSize(shell.CommandID, 90, 25)
	keys("two", "stty size", "Enter")
	waitPane("two", "25 90")
	keys("two", "exit 7", "Enter")
	waitPane("two", "CLIENT-EXIT=7")
	if st := d.waitFinished(ctx, shell.CommandID); st.State != wire.StateExited || st.ExitCode == nil || *st.ExitCode != 7 {
		t.Errorf("shell: %+v; want exited 7", st)
	}

	// A window over 1000 columns (issue 20 item 5): the command runs at
	// 1000 columns and the client says why; a later resize past the limit
	// is clamped, not dropped (the rows still change).
	start("wide", 1200, 40, "exec", "-t", "--url", d.url, "--", "sh", "-c", `"stty size; read x; stty size; read y"`)
	waitPane("wide", "40 1000")
	waitPane("wide", "this window is 1200x40")
	d.doJSON(ctx, "GET", "/v1/commands?state=running", nil, 200, &list)
	if len(list.Commands) != 1 {
		t.Fatalf("running commands: %+v; want the wide one", list.Commands)
	}
	run("resize-window", "-t", "wide", "-x", "1300", "-y", "45")
	waitSize(list.Commands[0].CommandID, 1000, 45)
	keys("wide", "Enter")
	waitPane("wide", "45 1000")
	keys("wide", "Enter")
	waitPane("wide", "CLIENT-EXIT=0")
}

// foregroundSleep reports whether a sleep of session sid is the foreground
// job of its terminal (its pgrp is the terminal's tpgid).
func foregroundSleep(sid int) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || !strings.Contains(s[:i], "(sleep") {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 5 && f[3] == fmt.Sprint(sid) && f[2] == f[5] && f[0] != "Z" {
			return true
		}
	}
	return false
}

// blipProxy is a TCP proxy on 127.0.0.1 to a daemon that can be taken
// down (every connection cut, new ones closed at once) and up again.
type blipProxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	down     bool
	conns    map[net.Conn]bool
	refused  int           // connections closed at once while down
	refusedC chan struct{} // gets a value for each refused connection
}

func newBlipProxy(t *testing.T, target string) *blipProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blipProxy{ln: ln, target: strings.TrimPrefix(target, "http://"), conns: map[net.Conn]bool{}, refusedC: make(chan struct{}, 1000)}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.setDown(true) })
	return p
}

func (p *blipProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *blipProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
	}
}

func (p *blipProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.refused++
			p.mu.Unlock()
			c.Close()
			p.refusedC <- struct{}{}
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[s] = true, true
		p.mu.Unlock()
		go func() {
			go func() { io.Copy(s, c); s.Close(); c.Close() }()
			io.Copy(c, s)
			s.Close()
			c.Close()
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, s)
			p.mu.Unlock()
		}()
	}
}

// waitRefused waits until the proxy has refused n more connections (the
// client is re-dialling while it is down), within 30 s.
func (p *blipProxy) waitRefused(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for range n {
		select {
		case <-p.refusedC:
		case <-timeout:
			t.Fatal("the client never re-dialled while the link was down")
		}
	}
}

// TestTerminalKeysSurviveAReconnect (F07): keys typed while the WebSocket
// re-dials are delivered after the reconnect, in order; later keys and
// Ctrl-] go on working.
func TestTerminalKeysSurviveAReconnect(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed (apt-get install tmux)")
	}
	d := startDaemon(t)
	p := newBlipProxy(t, d.url)
	sock := "sandbox-f07-" + strconv.Itoa(os.Getpid())
	run := tmuxServer(t, tmux, sock)
	waitPane := func(want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			screen := run("capture-pane", "-p", "-t", "k")
			if strings.Contains(screen, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the pane never showed %q; it shows:\n%s", want, screen)
			}
			time.Sleep(50 * time.Millisecond) // polling a screen nobody can be told about
		}
	}
	keys := func(k ...string) { run(append([]string{"send-keys", "-t", "k"}, k...)...) }
	run("new-session", "-d", "-s", "k", "-x", "100", "-y", "30",
		binPath+" exec -t --url "+p.url()+" -- sh -i; echo CLIENT-EXIT=$?; read x")
	keys(`PS1='$ '; echo before-$((6*7))`, "Enter")
	waitPane("before-42")
	p.setDown(true)
	p.waitRefused(t, 1) // the client noticed and re-dials
	keys("echo during-$((6*7))", "Enter")
	p.waitRefused(t, 2) // two more failed dials: the keys were read meanwhile
	p.setDown(false)
	waitPane("during-42")
	keys("echo after-$((6*7))", "Enter")
	waitPane("after-42")
	keys("C-]")
	waitPane("CLIENT-EXIT=0")
}

// TestTerminalDetachFromAPipeCommand (F08): attach from a terminal to a
// command without one (and without stdin): Ctrl-] detaches and leaves it
// running, as it does for a terminal command; Ctrl-C need not be used.
func TestTerminalDetachFromAPipeCommand(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed (apt-get install tmux)")
	}
	d := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var st wire.Status
	d.doJSON(ctx, "POST", "/v1/commands", wire.CreateRequest{Argv: []string{"sh", "-c", "echo watching-$((6*7)); exec sleep 60"}}, 201, &st)
	sock := "sandbox-f08-" + strconv.Itoa(os.Getpid())
	run := tmuxServer(t, tmux, sock)
	pane := "p"
	waitPane := func(want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			screen := run("capture-pane", "-p", "-t", pane)
			if strings.Contains(screen, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the pane never showed %q; it shows:\n%s", want, screen)
			}
			time.Sleep(50 * time.Millisecond) // polling a screen nobody can be told about
		}
	}
	run("new-session", "-d", "-s", "p", "-x", "100", "-y", "30",
		binPath+" attach --url "+d.url+" "+st.CommandID+"; echo CLIENT-EXIT=$?; read x")
	waitPane("watching-42")
	run("send-keys", "-t", "p", "C-]")
	waitPane("CLIENT-EXIT=0")
	if now := d.get(ctx, st.CommandID, 0); now.State != wire.StateRunning {
		t.Errorf("after the detach: %s; want running", now.State)
	}
	d.doJSON(ctx, "POST", "/v1/commands/"+st.CommandID+"/kill", nil, 200, nil)

	// attach --no-stdin to a terminal command: the local terminal is raw
	// (Ctrl-C is only a key), so Ctrl-] is the way out there too.
	var shell wire.Status
	d.doJSON(ctx, "POST", "/v1/commands", wire.CreateRequest{Argv: []string{"sh", "-c", "echo on-a-tty-$((6*7)); exec sleep 60"}, PTY: &wire.PTYRequest{Cols: 80, Rows: 24}}, 201, &shell)
	pane = "q"
	run("new-session", "-d", "-s", "q", "-x", "100", "-y", "30",
		binPath+" attach --no-stdin --url "+d.url+" "+shell.CommandID+"; echo CLIENT-EXIT=$?; read x")
	waitPane("on-a-tty-42")
	run("send-keys", "-t", "q", "C-]")
	waitPane("CLIENT-EXIT=0")
	if now := d.get(ctx, shell.CommandID, 0); now.State != wire.StateRunning {
		t.Errorf("after the detach: %s; want running", now.State)
	}
	d.doJSON(ctx, "POST", "/v1/commands/"+shell.CommandID+"/kill", nil, 200, nil)
}

// tmuxServer returns a runner of tmux commands on a private server named
// sock (killed when the test ends). The server and its panes get a clean
// environment: no SANDBOX_* of the developer's.
func tmuxServer(t *testing.T, tmux, sock string) func(args ...string) string {
	t.Cleanup(func() { exec.Command(tmux, "-L", sock, "kill-server").Run() })
	return func(args ...string) string {
		t.Helper()
		cmd := exec.Command(tmux, append([]string{"-L", sock, "-f", "/dev/null"}, args...)...)
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
}
