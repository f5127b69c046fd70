//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestE2ETerminalThroughTmux drives a shell on a PTY the way a person does:
// tmux is the person's terminal, cmd/sandbox-attach the client inside it,
// the built daemon at the other end. Keys are typed with send-keys, the
// window is resized with resize-window (the client turns the SIGWINCH into
// a resize frame), Ctrl-C interrupts a foreground sleep, Ctrl-] detaches,
// and a second client re-attaches from cursor 0 and sees the screen again.
func TestE2ETerminalThroughTmux(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed (apt-get install tmux)")
	}
	d := startDaemon(t)
	client := filepath.Join(t.TempDir(), "sandbox-attach")
	if out, err := exec.Command("go", "build", "-o", client, "../sandbox-attach").CombinedOutput(); err != nil {
		t.Fatalf("building sandbox-attach: %v\n%s", err, out)
	}
	sock := "sandbox-e2e-" + strconv.Itoa(os.Getpid())
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(tmux, append([]string{"-L", sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	t.Cleanup(func() { exec.Command(tmux, "-L", sock, "kill-server").Run() })
	// The pane keeps the client's exit code on screen, then waits.
	start := func(name string, args ...string) {
		cmd := client + " -addr " + d.url + " " + strings.Join(args, " ") + "; echo CLIENT-EXIT=$?; read x"
		run("new-session", "-d", "-s", name, "-x", "100", "-y", "30", cmd)
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

	start("one", "--", "sh", "-i")
	keys("one", `PS1='$ '; stty size; echo ok-$((6*7))`, "Enter")
	waitPane("one", "ok-42")
	waitPane("one", "30 100")
	run("resize-window", "-t", "one", "-x", "80", "-y", "20")
	keys("one", "stty size", "Enter")
	waitPane("one", "20 80")

	// Ctrl-C ends the foreground sleep; the shell goes on.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var list struct {
		Commands []status `json:"commands"`
	}
	d.doJSON(ctx, "GET", "/v1/commands", nil, 200, &list)
	if len(list.Commands) != 1 {
		t.Fatalf("commands: %+v; want the one shell", list.Commands)
	}
	shell := list.Commands[0]
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

	// Detach, then re-attach from 0 in a new window: the screen is replayed.
	keys("one", "C-]")
	waitPane("one", "CLIENT-EXIT=0")
	if st := d.get(ctx, shell.CommandID, 0); st.State != "running" {
		t.Fatalf("after detach: %s; want running", st.State)
	}
	start("two", "-id", shell.CommandID, "-cursor", "0")
	waitPane("two", "alive-42")
	keys("two", "exit 7", "Enter")
	waitPane("two", "CLIENT-EXIT=7")
	if st := d.waitFinished(ctx, shell.CommandID); st.State != "exited" || st.ExitCode == nil || *st.ExitCode != 7 {
		t.Errorf("shell: %+v; want exited 7", st)
	}
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
