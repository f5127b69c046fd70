package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	goruntime "runtime"
)

// ptStatus is the terminal part of a status object.
type ptStatus struct {
	CommandID string `json:"command_id"`
	State     string `json:"state"`
	PID       int    `json:"pid"`
	ExitCode  *int   `json:"exit_code"`
	Signal    *string
	PTY       *struct {
		Cols int    `json:"cols"`
		Rows int    `json:"rows"`
		Term string `json:"term"`
	} `json:"pty"`
	PTYBytes        int64 `json:"pty_bytes"`
	StdoutBytes     int64 `json:"stdout_bytes"`
	StderrBytes     int64 `json:"stderr_bytes"`
	NextCursor      int64 `json:"next_cursor"`
	Stdin           bool  `json:"stdin"`
	StdinClosed     bool  `json:"stdin_closed"`
	WaitingForInput *bool `json:"waiting_for_input"`
}

func ptDecode(t testing.TB, b []byte) ptStatus {
	t.Helper()
	var st ptStatus
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("status %s: %v", b, err)
	}
	return st
}

// ptCreate starts a terminal command of argv with the given size.
func ptCreate(t testing.TB, ts *testServer, argv []string, cols, rows int, extra string) ptStatus {
	t.Helper()
	body := fmt.Sprintf(`{"argv":%s,"pty":{"cols":%d,"rows":%d}%s}`, marshal(argv), cols, rows, extra)
	code, b := atDo(t, "POST", ts.URL+"/v1/commands", body, nil)
	if code != http.StatusCreated {
		t.Fatalf("create %s: got %d %s; want 201", body, code, b)
	}
	return ptDecode(t, b)
}

func ptStatusOf(t testing.TB, ts *testServer, id string, wait int) ptStatus {
	t.Helper()
	code, b := atDo(t, "GET", ts.URL+"/v1/commands/"+id+"?wait="+strconv.Itoa(wait), "", nil)
	if code != http.StatusOK {
		t.Fatalf("get %s: %d %s", id, code, b)
	}
	return ptDecode(t, b)
}

// ptStdin writes data to the command's terminal over HTTP.
func ptStdin(t testing.TB, ts *testServer, id, data string, eof bool) {
	t.Helper()
	body := string(marshal(map[string]any{"data": data, "eof": eof}))
	code, b := atDo(t, "POST", ts.URL+"/v1/commands/"+id+"/stdin", body, nil)
	if code != http.StatusAccepted {
		t.Fatalf("stdin %q: got %d %s; want 202", data, code, b)
	}
	var r struct {
		StdinClosed bool `json:"stdin_closed"`
	}
	json.Unmarshal(b, &r)
	if r.StdinClosed {
		t.Errorf("stdin %q: stdin_closed true; a terminal's stdin never closes", data)
	}
}

// ptResize resizes over HTTP and returns the status.
func ptResize(t testing.TB, ts *testServer, id string, cols, rows, want int) []byte {
	t.Helper()
	code, b := atDo(t, "POST", ts.URL+"/v1/commands/"+id+"/resize", fmt.Sprintf(`{"cols":%d,"rows":%d}`, cols, rows), nil)
	if code != want {
		t.Fatalf("resize %dx%d: got %d %s; want %d", cols, rows, code, b, want)
	}
	return b
}

// readUntil reads frames until the output holds want, failing on exit.
func (c *atConn) readUntil(want string) { c.t.Helper(); c.readUntilAfter(0, want) }

// readUntilAfter reads frames until the output from offset mark on holds want.
func (c *atConn) readUntilAfter(mark int, want string) {
	c.t.Helper()
	for !bytes.Contains(c.out[mark:], []byte(want)) {
		ev := c.read()
		switch ev.Type {
		case "output":
			if ev.Stream != "pty" {
				c.t.Fatalf("output stream %q; want pty", ev.Stream)
			}
		case "exit":
			c.t.Fatalf("command exited before its output held %q; output %q", want, c.out)
		default:
			c.t.Fatalf("got a %s frame (%+v) waiting for %q; output so far %q", ev.Type, ev, want, c.out)
		}
	}
}

// readExitPTY reads to the exit event and returns its full status.
func (c *atConn) readExitPTY() ptStatus {
	c.t.Helper()
	for {
		ev := c.read()
		switch ev.Type {
		case "output":
			if ev.Stream != "pty" {
				c.t.Fatalf("output stream %q; want pty", ev.Stream)
			}
		case "exit":
			return ptDecode(c.t, ev.Status)
		default:
			c.t.Fatalf("got a %s frame (%+v); want output or exit", ev.Type, ev)
		}
	}
}

// TestPTYTtyAndSize: the program sees a terminal whose size is set before it
// starts, a resize over HTTP reaches it, and the status counts pty_bytes.
func TestPTYTtyAndSize(t *testing.T) {
	ts := newTestServer(t, nil)
	st := ptCreate(t, ts, []string{"sh", "-c", "tty; stty size; echo TERM=$TERM; read x; stty size"}, 120, 40, "")
	if st.PTY == nil || st.PTY.Cols != 120 || st.PTY.Rows != 40 || st.PTY.Term != "xterm-256color" || !st.Stdin || st.StdinClosed {
		t.Fatalf("create status: %+v pty %+v; want pty 120x40 xterm-256color, stdin open", st, st.PTY)
	}
	c := atDial(t, ts, st.CommandID, "")
	c.readUntil("TERM=xterm-256color\r\n")
	if !regexp.MustCompile(`^/dev/pts/[0-9]+\r\n40 120\r\n`).Match(c.out) {
		t.Fatalf("output %q; want a /dev/pts path, then 40 120", c.out)
	}
	b := ptResize(t, ts, st.CommandID, 100, 30, 200)
	if rs := ptDecode(t, b); rs.PTY == nil || rs.PTY.Cols != 100 || rs.PTY.Rows != 30 {
		t.Errorf("resize status %s; want pty 100x30", b)
	}
	ptStdin(t, ts, st.CommandID, "\n", false)
	c.readUntil("30 100\r\n")
	end := c.readExitPTY()
	if end.State != "exited" || end.ExitCode == nil || *end.ExitCode != 0 {
		t.Errorf("exit status %+v; want exited 0", end)
	}
	if end.PTYBytes != int64(len(c.out)) || end.PTYBytes != end.NextCursor || end.StdoutBytes != 0 || end.StderrBytes != 0 {
		t.Errorf("byte counts: pty %d stdout %d stderr %d next %d; want pty_bytes = %d output bytes, others 0",
			end.PTYBytes, end.StdoutBytes, end.StderrBytes, end.NextCursor, len(c.out))
	}
	if end.WaitingForInput == nil || *end.WaitingForInput {
		t.Errorf("finished terminal: waiting_for_input %v; want false", end.WaitingForInput)
	}
}

// TestPTYTermFromEnvs: envs wins over the default TERM; "term" sets it.
func TestPTYTermFromEnvs(t *testing.T) {
	ts := newTestServer(t, nil)
	for _, tc := range []struct{ body, want string }{
		{`{"argv":["sh","-c","echo T=$TERM"],"pty":{"cols":10,"rows":5},"envs":{"TERM":"vt100"}}`, "vt100"},
		{`{"argv":["sh","-c","echo T=$TERM"],"pty":{"cols":10,"rows":5,"term":"screen"}}`, "screen"},
	} {
		code, b := atDo(t, "POST", ts.URL+"/v1/commands?stream=true", tc.body, nil)
		if code != http.StatusCreated || !strings.Contains(string(b), `"data":"T=`+tc.want+`\r\n"`) {
			t.Errorf("%s: got %d %s; want T=%s", tc.body, code, b, tc.want)
		}
	}
}

// TestPTYCreateRefused: sizes and terms outside the limits are 400.
func TestPTYCreateRefused(t *testing.T) {
	ts := newTestServer(t, nil)
	for _, pty := range []string{
		`{"cols":0,"rows":24}`, `{"cols":80}`, `{"rows":24}`,
		`{"cols":80,"rows":24,"term":"a b"}`, `{"cols":80,"rows":24,"term":"x=y"}`,
		`{"cols":80,"rows":24,"bogus":1}`, `{"cols":-1,"rows":24}`, `{"cols":1.5,"rows":24}`, `[]`,
	} {
		code, b := atDo(t, "POST", ts.URL+"/v1/commands", `{"argv":["true"],"pty":`+pty+`}`, nil)
		if code != http.StatusBadRequest || !strings.Contains(string(b), `"invalid_request"`) {
			t.Errorf("pty %s: got %d %s; want 400 invalid_request", pty, code, b)
		}
	}
	if running, _ := ts.M.Counts(); running != 0 {
		t.Errorf("%d commands running after refused creates", running)
	}
}

// TestPTYResizeRefused: a resize of a command without a terminal is 409
// not_a_terminal; a bad size 400; a finished terminal 409 finished; the
// WebSocket frame answers the same as error events.
func TestPTYResizeRefused(t *testing.T) {
	ts := newTestServer(t, nil)
	pipe := atCreate(t, ts, `{"argv":["sleep","30"]}`)
	b := ptResize(t, ts, pipe.CommandID, 80, 24, http.StatusConflict)
	if !strings.Contains(string(b), `"not_a_terminal"`) {
		t.Errorf("resize of a pipe command: %s; want not_a_terminal", b)
	}
	c := atDial(t, ts, pipe.CommandID, "")
	c.send(`{"type":"resize","cols":80,"rows":24}`)
	c.readError("not_a_terminal")

	term := ptCreate(t, ts, []string{"cat"}, 80, 24, "")
	for _, body := range []string{`{"cols":0,"rows":24}`, `{"cols":80}`, `{}`, `{"cols":80,"rows":24,"x":1}`} {
		code, b := atDo(t, "POST", ts.URL+"/v1/commands/"+term.CommandID+"/resize", body, nil)
		if code != http.StatusBadRequest {
			t.Errorf("resize %s: got %d %s; want 400", body, code, b)
		}
	}
	tc := atDial(t, ts, term.CommandID, "")
	tc.send(`{"type":"resize","cols":0,"rows":24}`)
	tc.readError("invalid_request")
	tc.send(`{"type":"resize","rows":24}`)
	tc.readError("invalid_request")
	ptStdin(t, ts, term.CommandID, "", true)
	if end := tc.readExitPTY(); end.State != "exited" || *end.ExitCode != 0 {
		t.Fatalf("cat after eof: %+v; want exited 0", end)
	}
	b = ptResize(t, ts, term.CommandID, 80, 24, http.StatusConflict)
	if !strings.Contains(string(b), `"finished"`) {
		t.Errorf("resize after the end: %s; want finished", b)
	}
	code, b := atDo(t, "POST", ts.URL+"/v1/commands/00000000-0000-4000-8000-000000000000/resize", `{"cols":80,"rows":24}`, nil)
	if code != http.StatusNotFound {
		t.Errorf("resize of an unknown id: %d %s; want 404", code, b)
	}
}

// TestPTYWebSocketResize: a resize frame reaches the program as SIGWINCH
// (the shell's trap prints the new size), and stdin frames are raw input.
func TestPTYWebSocketResize(t *testing.T) {
	ts := newTestServer(t, nil)
	st := ptCreate(t, ts, []string{"sh", "-c", `trap 'echo WINCH $(stty size)' WINCH; echo ready
while [ "$x" != q ]; do read x && echo got:$x; done`}, 80, 24, "")
	c := atDial(t, ts, st.CommandID, "")
	c.readUntil("ready\r\n")
	// The shell runs a trap only between commands or when a signal
	// interrupts a blocking read: a SIGWINCH that lands after its last check
	// and before read(2) waits for the next line. So resize once it sleeps
	// in read.
	ptWaiting(t, ts, st.CommandID, "the shell asleep in read")
	c.send(`{"type":"resize","cols":132,"rows":50}`)
	c.readUntil("WINCH 50 132\r\n")
	if s := ptStatusOf(t, ts, st.CommandID, 0); s.PTY == nil || s.PTY.Cols != 132 || s.PTY.Rows != 50 {
		t.Errorf("status after a resize frame: %+v; want 132x50", s.PTY)
	}
	c.send(map[string]any{"type": "stdin", "data": "hi\n"})
	c.readUntil("got:hi\r\n")
	c.send(map[string]any{"type": "stdin", "data": "q\n"})
	if end := c.readExitPTY(); end.State != "exited" || *end.ExitCode != 0 {
		t.Errorf("exit after q: %+v; want exited 0", end)
	}
}

// TestPTYPythonREPL: python3 -i on a terminal evaluates what is typed.
func TestPTYPythonREPL(t *testing.T) {
	ts := newTestServer(t, nil)
	st := ptCreate(t, ts, []string{"python3", "-q", "-i"}, 80, 24, "")
	c := atDial(t, ts, st.CommandID, "")
	c.readUntil(">>> ")
	ptStdin(t, ts, st.CommandID, "1+1\n", false)
	c.readUntil("1+1\r\n2\r\n>>> ")
	ptStdin(t, ts, st.CommandID, "", true)
	if end := c.readExitPTY(); end.State != "exited" || *end.ExitCode != 0 {
		t.Errorf("python after eof: %+v; want exited 0", end)
	}
}

// sessionMembers lists the live (non-zombie) processes of session sid as
// "pid comm pgrp tpgid state".
func sessionMembers(t testing.TB, sid int) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		comm := string(b[bytes.IndexByte(b, '(')+1 : i])
		if len(f) > 5 && f[3] == strconv.Itoa(sid) && f[0] != "Z" {
			out = append(out, fmt.Sprintf("%d %s %s %s %s", pid, comm, f[2], f[5], f[0]))
		}
	}
	return out
}

// foregroundIs reports whether a process named comm of session sid is in
// the terminal's foreground group.
func foregroundIs(t testing.TB, sid int, comm string) bool {
	for _, m := range sessionMembers(t, sid) {
		f := strings.Fields(m)
		if f[1] == comm && f[2] == f[3] {
			return true
		}
	}
	return false
}

// TestPTYShellInterrupt: Ctrl-C typed into sh -i ends the foreground sleep
// (SIGINT from the line discipline), the shell survives, prompts again and
// runs the next command.
func TestPTYShellInterrupt(t *testing.T) {
	ts := newTestServer(t, nil)
	st := ptCreate(t, ts, []string{"sh", "-i"}, 80, 24, `,"envs":{"PS1":"$ "}`)
	c := atDial(t, ts, st.CommandID, "")
	c.readUntil("$ ")
	ptStdin(t, ts, st.CommandID, "sleep 100\n", false)
	atWaitFor(t, "sleep in the terminal's foreground", func() bool { return foregroundIs(t, st.PID, "sleep") })
	mark := len(c.out)
	ptStdin(t, ts, st.CommandID, "\x03", false)
	c.readUntilAfter(mark, "$ ")
	if foregroundIs(t, st.PID, "sleep") {
		t.Fatalf("sleep still in the foreground after Ctrl-C: %v", sessionMembers(t, st.PID))
	}
	ptStdin(t, ts, st.CommandID, "echo alive$((40+2))\n", false)
	c.readUntil("alive42\r\n")
	if s := ptStatusOf(t, ts, st.CommandID, 0); s.State != "running" {
		t.Fatalf("shell state %q after Ctrl-C; want running", s.State)
	}
	ptStdin(t, ts, st.CommandID, "exit 3\n", false)
	if end := c.readExitPTY(); end.State != "exited" || *end.ExitCode != 3 {
		t.Errorf("shell exit: %+v; want exited 3", end)
	}
}

// ptCursesProgram draws its window size and redraws on every KEY_RESIZE
// (which ncurses produces from SIGWINCH); "q" quits.
const ptCursesProgram = `
import curses
def main(s):
    while True:
        y, x = s.getmaxyx()
        s.clear()
        s.addstr(0, 0, "size=%dx%d" % (x, y))
        s.refresh()
        k = s.getch()
        if k == ord("q"):
            return
curses.wrapper(main)
`

// TestPTYCursesRedrawsOnResize: a Python curses program redraws with the new
// size after a resize.
func TestPTYCursesRedrawsOnResize(t *testing.T) {
	ts := newTestServer(t, nil)
	st := ptCreate(t, ts, []string{"python3", "-c", ptCursesProgram}, 120, 40, "")
	c := atDial(t, ts, st.CommandID, "")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("curses output: %q", c.out)
		}
	})
	// ncurses checks for SIGWINCH before it blocks in read: a resize that
	// lands between the two is seen only at the next key (an ncurses race),
	// so resize once the program is waiting for input.
	inGetch := func() bool { return *ptStatusOf(t, ts, st.CommandID, 0).WaitingForInput }
	c.readUntil("size=120x40")
	atWaitFor(t, "curses in getch", inGetch)
	ptResize(t, ts, st.CommandID, 100, 30, 200)
	c.readUntil("size=100x30")
	atWaitFor(t, "curses in getch", inGetch)
	c.send(`{"type":"resize","cols":60,"rows":20}`)
	c.readUntil("size=60x20")
	ptStdin(t, ts, st.CommandID, "q", false)
	if end := c.readExitPTY(); end.State != "exited" || *end.ExitCode != 0 {
		t.Errorf("curses exit: %+v; want exited 0 (output %q)", end, c.out)
	}
}

// TestPTYEOFEndsCat: "eof" on a terminal is VEOF, not a hang-up: cat ends
// with 0 whether the line before it was complete or not.
func TestPTYEOFEndsCat(t *testing.T) {
	ts := newTestServer(t, nil)
	for _, tc := range []struct{ data, want string }{
		{"hello\n", "hello\r\nhello\r\n"}, // echo, then cat's copy
		{"abc", "abcabc"},                 // the first VEOF ends the line, the second is EOF
		{"", ""},
	} {
		st := ptCreate(t, ts, []string{"cat"}, 80, 24, "")
		c := atDial(t, ts, st.CommandID, "")
		// A second VEOF is typed only for a line typed while cat was
		// asleep reading (see TestPTYEOFNeverOverSends).
		ptWaiting(t, ts, st.CommandID, "cat reading")
		ptStdin(t, ts, st.CommandID, tc.data, true)
		end := c.readExitPTY()
		if end.State != "exited" || end.ExitCode == nil || *end.ExitCode != 0 || end.Signal != nil {
			t.Errorf("cat after %q+eof: %+v; want exited 0", tc.data, end)
		}
		if !strings.HasPrefix(string(c.out), tc.want) {
			t.Errorf("cat after %q+eof: output %q; want %q first", tc.data, c.out, tc.want)
		}
		if end.StdinClosed != true { // finished: nothing more is accepted
			t.Errorf("finished cat: stdin_closed false")
		}
	}
}

// TestPTYKillEndsSessionIgnoringTermHup: kill ends a terminal whose shell
// and jobs (foreground and background, each in its own group) ignore
// SIGTERM and SIGHUP, within the grace; nothing of the session is left.
func TestPTYKillEndsSessionIgnoringTermHup(t *testing.T) {
	ts := newTestServer(t, nil)
	st := ptCreate(t, ts, []string{"sh", "-i"}, 80, 24, `,"envs":{"PS1":"$ "}`)
	c := atDial(t, ts, st.CommandID, "")
	c.readUntil("$ ")
	ptStdin(t, ts, st.CommandID, "trap '' TERM HUP; sleep 1000 & sh -c \"trap '' TERM HUP; sleep 1001\"\n", false)
	atWaitFor(t, "both jobs running", func() bool {
		n := 0
		for _, m := range sessionMembers(t, st.PID) {
			if strings.Fields(m)[1] == "sleep" {
				n++
			}
		}
		return n == 2 && foregroundIs(t, st.PID, "sleep")
	})
	before := sessionMembers(t, st.PID)
	t0 := time.Now()
	code, b := atDo(t, "POST", ts.URL+"/v1/commands/"+st.CommandID+"/kill", "", nil)
	end := ptDecode(t, b)
	if code != 200 || end.State != "cancelled" || end.Signal == nil || *end.Signal != "SIGKILL" {
		t.Fatalf("kill: %d %s; want 200 cancelled by SIGKILL", code, b)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("kill took %v; want about the 500 ms grace", d)
	}
	atWaitFor(t, "the session to be empty", func() bool { return len(sessionMembers(t, st.PID)) == 0 })
	t.Logf("killed session %v", before)
}

// TestPTYTimeoutEndsSessionIgnoringTermHup: a timeout does the same.
func TestPTYTimeoutEndsSessionIgnoringTermHup(t *testing.T) {
	ts := newTestServer(t, nil)
	st := ptCreate(t, ts, []string{"sh", "-c", "trap '' TERM HUP; echo ready; while :; do sleep 1; done"}, 80, 24, `,"timeout":1`)
	c := atDial(t, ts, st.CommandID, "")
	end := c.readExitPTY()
	if end.State != "timed_out" || end.Signal == nil || *end.Signal != "SIGKILL" {
		t.Fatalf("timeout: %+v; want timed_out by SIGKILL", end)
	}
	if !bytes.HasPrefix(c.out, []byte("ready\r\n")) {
		t.Errorf("output %q; want ready first", c.out)
	}
	atWaitFor(t, "the session to be empty", func() bool { return len(sessionMembers(t, st.PID)) == 0 })
}

// ptOutputProgram prints three known parts, waiting for a line of input
// between them, so a client can disconnect mid-output for sure.
const ptOutputProgram = `i=0; while [ $i -lt 3000 ]; do echo "part1 line $i ✓"; i=$((i+1)); done; read x
i=0; while [ $i -lt 300 ]; do echo "part2 line $i"; i=$((i+1)); done; read x
i=0; while [ $i -lt 300 ]; do echo "part3 line $i"; i=$((i+1)); done`

func ptExpectedOutput() string {
	var b strings.Builder
	for i := 0; i < 3000; i++ {
		fmt.Fprintf(&b, "part1 line %d ✓\r\n", i)
	}
	b.WriteString("a\r\n") // the echo of the first input line
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&b, "part2 line %d\r\n", i)
	}
	b.WriteString("b\r\n")
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&b, "part3 line %d\r\n", i)
	}
	return b.String()
}

// ndjsonRead reads an NDJSON output stream from cursor and hands each
// event to f until f returns false (the connection is then dropped) or the
// stream ends. It checks contiguity and returns the output bytes read and
// the last next_cursor.
func ndjsonRead(t testing.TB, ts *testServer, id string, cursor int64, f func(ev atEvent, out []byte) bool) ([]byte, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), atTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/commands/"+id+"/output?cursor="+strconv.FormatInt(cursor, 10), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []byte
	next := cursor
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev atEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		if ev.Type == "output" {
			if *ev.Cursor != next || ev.Stream != "pty" {
				t.Fatalf("output event %s: want cursor %d, stream pty", sc.Bytes(), next)
			}
			out = append(out, *ev.Data...)
		}
		if ev.Type == "gap" {
			t.Fatalf("unexpected gap %s", sc.Bytes())
		}
		next = *ev.NextCursor
		if !f(ev, out) || ev.Type == "exit" {
			break
		}
	}
	return out, next
}

// TestPTYReattachExactBytes: a client that drops mid-output and re-attaches
// from the last next_cursor, switching between NDJSON and WebSocket, gets
// exactly the terminal's bytes; a fresh attach from 0 replays them all.
func TestPTYReattachExactBytes(t *testing.T) {
	ts := newTestServer(t, nil)
	want := ptExpectedOutput()
	st := ptCreate(t, ts, []string{"sh", "-c", ptOutputProgram}, 80, 24, "")

	// 1. WebSocket: take the first frame (at most 32 KiB of the 65 KiB of
	// part 1), then drop the connection.
	c := atDial(t, ts, st.CommandID, "")
	for len(c.out) == 0 {
		c.read()
	}
	c.ws.Close()
	got := append([]byte(nil), c.out...)

	// 2. NDJSON from there: the rest of part 1; once it is all there, input
	// "a"; drop mid part 2.
	const part1End = "part1 line 2999 ✓\r\n"
	sentA := false
	sendA := func(out []byte) {
		if !sentA && strings.Contains(string(got)+string(out), part1End) {
			sentA = true
			ptStdin(t, ts, st.CommandID, "a\n", false)
		}
	}
	sendA(nil)
	out, next := ndjsonRead(t, ts, st.CommandID, c.next, func(ev atEvent, out []byte) bool {
		sendA(out)
		return !strings.Contains(string(out), "part2 line 20")
	})
	got = append(got, out...)
	t.Logf("dropped the WebSocket at %d, the NDJSON stream at %d", c.next, next)

	// 3. WebSocket again from that cursor: the rest, with more input.
	c2 := atDial(t, ts, st.CommandID, "cursor="+strconv.FormatInt(next, 10))
	for !strings.Contains(string(got)+string(c2.out), "part2 line 299\r\n") {
		if ev := c2.read(); ev.Type != "output" {
			t.Fatalf("got %+v before the end of part 2", ev)
		}
	}
	ptStdin(t, ts, st.CommandID, "b\n", false)
	end := c2.readExitPTY()
	got = append(got, c2.out...)
	if string(got) != want {
		t.Fatalf("reassembled output (%d bytes) differs from the program's (%d bytes)\n got %q\nwant %q", len(got), len(want), tail(got), tail([]byte(want)))
	}
	if end.PTYBytes != int64(len(want)) || end.State != "exited" {
		t.Errorf("exit: %+v; want exited with pty_bytes %d", end, len(want))
	}

	// 4. Fresh attaches from 0 replay everything the ring holds.
	c3 := atDial(t, ts, st.CommandID, "cursor=0")
	c3.readExitPTY()
	if string(c3.out) != want {
		t.Errorf("WebSocket replay from 0: %d bytes; want the %d of the program", len(c3.out), len(want))
	}
	all, _ := ndjsonRead(t, ts, st.CommandID, 0, func(atEvent, []byte) bool { return true })
	if string(all) != want {
		t.Errorf("NDJSON replay from 0: %d bytes; want the %d of the program", len(all), len(want))
	}
}

func tail(b []byte) []byte {
	if len(b) > 200 {
		return b[len(b)-200:]
	}
	return b
}

// TestPTYWaitingForInput: true while the foreground process blocks reading
// its terminal or stdin pipe (read, select, poll), false while it sleeps or
// writes; null for a command with neither.
func TestPTYWaitingForInput(t *testing.T) {
	ts := newTestServer(t, nil)
	create := func(body string) ptStatus {
		code, b := atDo(t, "POST", ts.URL+"/v1/commands", body, nil)
		if code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", body, code, b)
		}
		return ptDecode(t, b)
	}
	waiting := func(id string) bool {
		s := ptStatusOf(t, ts, id, 0)
		if s.WaitingForInput == nil {
			t.Fatalf("status of %s has waiting_for_input null", id)
		}
		return *s.WaitingForInput
	}
	for _, tc := range []struct{ name, body, input string }{
		{"python input() on a pty", `{"argv":["python3","-c","input()"],"pty":{"cols":80,"rows":24}}`, "x\n"},
		{"python input() on a pipe", `{"argv":["python3","-c","input()"],"stdin":true}`, "x\n"},
		{"python -i on a pty (pselect6)", `{"argv":["python3","-q","-i"],"pty":{"cols":80,"rows":24}}`, "exit()\n"},
		{"read x in sh on a pty", `{"argv":["sh","-c","read x"],"pty":{"cols":80,"rows":24}}`, "x\n"},
		{"read x in a child of sh on a pipe", `{"argv":["sh","-c","sh -c 'read x'; echo done"],"stdin":true}`, "x\n"},
		{"cat on a pipe", `{"argv":["cat"],"stdin":true}`, ""},
		// Password prompts read /dev/tty, not fd 0 (issue 20 item 2).
		{"getpass on a pty (/dev/tty)", `{"argv":["python3","-c","import getpass; getpass.getpass()"],"pty":{"cols":80,"rows":24}}`, "secret\n"},
		{"read x </dev/tty in sh on a pty", `{"argv":["sh","-c","read x </dev/tty"],"pty":{"cols":80,"rows":24}}`, "x\n"},
	} {
		st := create(tc.body)
		atWaitFor(t, tc.name+" waiting for input", func() bool { return waiting(st.CommandID) })
		if tc.input != "" {
			ptStdin(t, ts, st.CommandID, tc.input, false)
		}
		if tc.input == "" || strings.Contains(tc.body, `"stdin":true`) {
			atDo(t, "POST", ts.URL+"/v1/commands/"+st.CommandID+"/stdin", `{"eof":true}`, nil)
		}
		if end := ptStatusOf(t, ts, st.CommandID, 10); end.State != "exited" || *end.WaitingForInput {
			t.Errorf("%s after input: %+v; want exited, not waiting", tc.name, end)
		}
	}

	// Not waiting: a sleep (once it is asleep in nanosleep) and a writer.
	for _, tc := range []struct{ name, body, syscallPrefix string }{
		{"sleep on a pty", `{"argv":["sleep","5"],"pty":{"cols":80,"rows":24}}`, "230 "},
		{"sleep with a stdin pipe", `{"argv":["sleep","5"],"stdin":true}`, "230 "},
		{"writer on a pty", `{"argv":["sh","-c","while :; do echo x; done"],"pty":{"cols":80,"rows":24}}`, ""},
		{"writer with a stdin pipe", `{"argv":["sh","-c","while :; do echo x; done"],"stdin":true}`, ""},
	} {
		st := create(tc.body)
		if tc.syscallPrefix != "" && goruntime.GOARCH == "amd64" {
			atWaitFor(t, tc.name+" asleep", func() bool {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(st.PID) + "/syscall")
				return strings.HasPrefix(string(b), tc.syscallPrefix)
			})
		}
		for i := 0; i < 20; i++ {
			if waiting(st.CommandID) {
				t.Errorf("%s: waiting_for_input true; want false", tc.name)
				break
			}
		}
		atDo(t, "POST", ts.URL+"/v1/commands/"+st.CommandID+"/kill", "", nil)
	}

	// Neither a terminal nor a pipe: null.
	st := atCreate(t, ts, `{"argv":["sleep","5"]}`)
	code, b := atDo(t, "GET", ts.URL+"/v1/commands/"+st.CommandID, "", nil)
	if code != 200 || !strings.Contains(string(b), `"waiting_for_input":null`) || !strings.Contains(string(b), `"pty":null`) {
		t.Errorf("status without a terminal or pipe: %s; want waiting_for_input and pty null", b)
	}
}

// TestPTYInfoFeature: /v1/info lists pty.
func TestPTYInfoFeature(t *testing.T) {
	ts := newTestServer(t, nil)
	_, b := atDo(t, "GET", ts.URL+"/v1/info", "", nil)
	if !strings.Contains(string(b), `"pty"`) {
		t.Errorf("info %s; want feature pty", b)
	}
}

// TestPTYObjectStrict: the pty object, a resize body and every WebSocket
// frame are as strict as the top level of a create (issue 20 items 4, 6):
// case-variant, unknown and repeated keys are 400 and nothing starts; the
// messages name the JSON path, never a Go type, and a whole-number rule says
// so.
func TestPTYObjectStrict(t *testing.T) {
	ts := newTestServer(t, nil)
	for _, tc := range []struct{ body, msg string }{
		{`{"argv":["true"],"pty":{"Cols":80,"ROWS":24}}`, `unknown field \"pty.Cols\"`},
		{`{"argv":["true"],"pty":{"cols":80,"rows":24,"Term":"vt100"}}`, `unknown field \"pty.Term\"`},
		{`{"argv":["true"],"pty":{"cols":80,"rows":24,"term":"vt100","term":"dumb"}}`, `field \"pty.term\" is given more than once`},
		{`{"argv":["true"],"pty":{"cols":80,"cols":90,"rows":24}}`, `field \"pty.cols\" is given more than once`},
		{`{"argv":["true"],"envs":{"A":"1","A":"2"}}`, `field \"envs\" gives one key more than once`},
		{`{"argv":["true"],"pty":{"cols":80.5,"rows":24}}`, `field \"pty.cols\" must be a whole number, not 80.5`},
		{`{"argv":["true"],"pty":{"cols":"80","rows":24}}`, `field \"pty.cols\" must be a whole number, not a string`},
		{`{"argv":["true"],"envs":{"A":1}}`, `every value of field \"envs\" must be a string; one is a number`},
	} {
		code, b := atDo(t, "POST", ts.URL+"/v1/commands", tc.body, nil)
		if code != http.StatusBadRequest || !strings.Contains(string(b), tc.msg) {
			t.Errorf("%s: got %d %s; want 400 with %s", tc.body, code, b, tc.msg)
		}
	}
	if running, _ := ts.M.Counts(); running != 0 {
		t.Errorf("%d commands running after refused creates", running)
	}

	term := ptCreate(t, ts, []string{"cat"}, 80, 24, "")
	for _, tc := range []struct{ body, msg string }{
		{`{"cols":80.0,"rows":24}`, `field \"cols\" must be an integer written without a fraction part or exponent, not 80.0`},
		{`{"Cols":80,"rows":24}`, `unknown field \"Cols\"`},
		{`{"cols":80,"rows":24,"rows":25}`, `field \"rows\" is given more than once`},
	} {
		code, b := atDo(t, "POST", ts.URL+"/v1/commands/"+term.CommandID+"/resize", tc.body, nil)
		if code != http.StatusBadRequest || !strings.Contains(string(b), tc.msg) {
			t.Errorf("resize %s: got %d %s; want 400 with %s", tc.body, code, b, tc.msg)
		}
	}
	c := atDial(t, ts, term.CommandID, "")
	for _, tc := range []struct{ frame, msg string }{
		{`{"type":"resize","cols":80.0,"rows":24}`, `field "cols" must be an integer written without a fraction part or exponent, not 80.0`},
		{`{"type":"resize","COLS":80,"rows":24}`, `unknown field "COLS"`},
		{`{"type":"resize","cols":80,"cols":81,"rows":24}`, `field "cols" is given more than once`},
		{`{"type":"stdin","data":"x","Data":"y"}`, `unknown field "Data"`},
		{`{"type":"stdin","data":"x","data":"rm -rf"}`, `field "data" is given more than once`},
		{`{"type":"stdin","data":1}`, `field "data" must be a string, not a number`},
		{`{"type":"kill"} {"type":"kill"}`, `the frame holds more than one JSON value`},
		{`[1]`, `the frame must be a JSON object, not array`},
		{`{"type":"kill"`, `invalid JSON: the frame ends early`},
		{`{"type":"signal","signal":2.0}`, `field "signal" must be an integer written without a fraction part or exponent, not 2.0`},
		{`{"type":"stdin","data":"x","encoding":"UTF-16"}`, `encoding must be "base64", "utf-8" or "text" (or absent: utf-8), not "UTF-16"`},
	} {
		c.send(tc.frame)
		ev := c.read()
		if ev.Type != "error" || ev.Error == nil || ev.Error.Code != "invalid_request" || !strings.Contains(ev.Error.Message, tc.msg) || strings.Contains(ev.Error.Message, "Body") {
			t.Errorf("frame %s: got %+v (%+v); want invalid_request with %s", tc.frame, ev, ev.Error, tc.msg)
		}
	}
	if s := ptStatusOf(t, ts, term.CommandID, 0); s.PTY == nil || s.PTY.Cols != 80 || s.PTY.Rows != 24 || s.PTYBytes != 0 {
		t.Errorf("after refused frames: %+v, %d pty bytes; want 80x24 and nothing typed", s.PTY, s.PTYBytes)
	}
}

// ptWaiting polls the status until the command waits for input.
func ptWaiting(t testing.TB, ts *testServer, id, what string) {
	t.Helper()
	atWaitFor(t, what, func() bool {
		s := ptStatusOf(t, ts, id, 0)
		return s.WaitingForInput != nil && *s.WaitingForInput
	})
}

// TestPTYEOFAfterEditing: eof types one VEOF when the line discipline holds
// no pending line, whatever the last byte sent was: after a kill (Ctrl-U),
// after erasing every character, and after a raw-mode read took the bytes
// (issue 20 item 1). A second VEOF would end the next reader too.
func TestPTYEOFAfterEditing(t *testing.T) {
	ts := newTestServer(t, nil)
	const script = `cat; echo cat-done; read b; echo read-rc=$? b=$b`
	for _, tc := range []struct{ name, before, typed string }{
		{"kill", "", "junk\u0015"},
		{"erase", "", "ab\x7f\x7f"},
		{"erase a UTF-8 character", "", "é\x7f"},
		{"word erase", "", "one two\x17\x17"},
		{"raw read", `stty raw -echo; head -c 3 >/dev/null; stty -raw echo; `, "abc"},
	} {
		st := ptCreate(t, ts, []string{"sh", "-c", tc.before + script}, 80, 24, "")
		c := atDial(t, ts, st.CommandID, "")
		if tc.before != "" {
			ptWaiting(t, ts, st.CommandID, tc.name+": head waiting in raw mode")
			ptStdin(t, ts, st.CommandID, tc.typed, false)
			atWaitFor(t, tc.name+": cat reading", func() bool {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(st.PID) + "/task/" + strconv.Itoa(st.PID) + "/children")
				for _, pid := range strings.Fields(string(b)) {
					if comm, _ := os.ReadFile("/proc/" + pid + "/comm"); string(comm) == "cat\n" {
						s := ptStatusOf(t, ts, st.CommandID, 0)
						return *s.WaitingForInput
					}
				}
				return false
			})
		} else {
			ptWaiting(t, ts, st.CommandID, tc.name+": cat reading")
			ptStdin(t, ts, st.CommandID, tc.typed, false)
		}
		ptStdin(t, ts, st.CommandID, "", true)
		c.readUntil("cat-done\r\n")
		ptStdin(t, ts, st.CommandID, "hello\n", false)
		end := c.readExitPTY()
		if !bytes.Contains(c.out, []byte("read-rc=0 b=hello\r\n")) || end.State != "exited" {
			t.Errorf("%s: %q then eof then hello: output %q, %s; want read-rc=0 b=hello", tc.name, tc.typed, c.out, end.State)
		}
	}

	// sh -i: cat, ab, two backspaces, eof ends cat and not the shell.
	st := ptCreate(t, ts, []string{"sh", "-i"}, 80, 24, `,"envs":{"PS1":"$ "}`)
	c := atDial(t, ts, st.CommandID, "")
	c.readUntil("$ ")
	ptStdin(t, ts, st.CommandID, "cat\n", false)
	atWaitFor(t, "cat in the foreground", func() bool { return foregroundIs(t, st.PID, "cat") })
	ptWaiting(t, ts, st.CommandID, "cat waiting")
	ptStdin(t, ts, st.CommandID, "ab\x7f\x7f", false)
	ptStdin(t, ts, st.CommandID, "", true)
	mark := len(c.out)
	atWaitFor(t, "the shell in the foreground again", func() bool { return foregroundIs(t, st.PID, "sh") })
	ptStdin(t, ts, st.CommandID, "echo still-$((6*7))\n", false)
	c.readUntilAfter(mark, "still-42\r\n")
	ptStdin(t, ts, st.CommandID, "exit\n", false)
	if end := c.readExitPTY(); end.State != "exited" || *end.ExitCode != 0 {
		t.Errorf("sh -i after exit: %+v; want exited 0", end)
	}
}

// TestPTYSizeClampedAndReal: a size over 1000 is taken as 1000 at create and
// resize (never refused, never dropped), and the status reports the
// kernel's size and the TERM the command started with, not the request's
// (issue 20 items 5, 7).
func TestPTYSizeClampedAndReal(t *testing.T) {
	ts := newTestServer(t, nil)
	st := ptCreate(t, ts, []string{"sh", "-c", `trap 'echo WINCH $(stty size)' WINCH; stty size; while [ "$x" != go ]; do read x; done; stty cols 50 rows 7; echo set; read y`}, 1200, 40, `,"envs":{"TERM":"vt100"}`)
	if st.PTY == nil || st.PTY.Cols != 1000 || st.PTY.Rows != 40 || st.PTY.Term != "vt100" {
		t.Errorf("create 1200x40 with TERM=vt100 in envs: pty %+v; want 1000x40 vt100", st.PTY)
	}
	c := atDial(t, ts, st.CommandID, "")
	c.readUntil("40 1000\r\n")
	ptWaiting(t, ts, st.CommandID, "the shell asleep in read")
	b := ptResize(t, ts, st.CommandID, 1200, 1100, http.StatusOK)
	if s := ptDecode(t, b); s.PTY == nil || s.PTY.Cols != 1000 || s.PTY.Rows != 1000 {
		t.Errorf("resize 1200x1100: pty %+v; want 1000x1000", s.PTY)
	}
	c.readUntil("WINCH 1000 1000\r\n")
	mark := len(c.out)
	ptWaiting(t, ts, st.CommandID, "the shell asleep in read again")
	c.send(map[string]any{"type": "resize", "cols": 1300, "rows": 41})
	c.readUntilAfter(mark, "WINCH 41 1000\r\n")
	if s := ptStatusOf(t, ts, st.CommandID, 0); s.PTY == nil || s.PTY.Cols != 1000 || s.PTY.Rows != 41 {
		t.Errorf("status after a resize frame of 1300x41: %+v; want 1000x41", s.PTY)
	}
	ptStdin(t, ts, st.CommandID, "go\n", false)
	c.readUntil("set\r\n")
	if s := ptStatusOf(t, ts, st.CommandID, 0); s.PTY == nil || s.PTY.Cols != 50 || s.PTY.Rows != 7 {
		t.Errorf("status after the program's stty cols 50 rows 7: %+v; want 50x7", s.PTY)
	}
	ptStdin(t, ts, st.CommandID, "\n", false)
	if end := c.readExitPTY(); end.PTY == nil || end.PTY.Cols != 50 || end.PTY.Rows != 7 {
		t.Errorf("final status: %+v; want the last size, 50x7", end.PTY)
	}
}

// ptStdinBytes types raw bytes (base64 on the wire).
func ptStdinBytes(t testing.TB, ts *testServer, id string, data []byte) {
	t.Helper()
	body := string(marshal(map[string]any{"data": base64.StdEncoding.EncodeToString(data), "encoding": "base64"}))
	if code, b := atDo(t, "POST", ts.URL+"/v1/commands/"+id+"/stdin", body, nil); code != http.StatusAccepted {
		t.Fatalf("stdin %q: got %d %s; want 202", data, code, b)
	}
}

// TestPTYEOFNeverOverSends: when the program took the pending line between
// two writes (a non-canonical read -n 1, or ICANON switched off and on,
// which makes the rest a complete line), eof types one VEOF: cat ends, and
// the read after it still gets the next line. A second VEOF would end that
// read too (the attacker's repros of issue 20 item 1).
func TestPTYEOFNeverOverSends(t *testing.T) {
	ts := newTestServer(t, nil)
	const script = `cat; echo cat-done; read b; echo read-rc=$? b=$b`
	for _, tc := range []struct{ name, between, after string }{
		{"read -n 1", `read -n 1 c; echo got=$c; `, "got=a\r\n"},
		{"icanon off and on", `stty -icanon; stty icanon; `, "abab"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			go1 := filepath.Join(t.TempDir(), "go")
			p := `while [ ! -e ` + go1 + ` ]; do sleep 0.01; done; ` + tc.between + script
			st := ptCreate(t, ts, []string{"bash", "-c", p}, 80, 24, "")
			c := atDial(t, ts, st.CommandID, "")
			ptStdin(t, ts, st.CommandID, "ab", false)
			c.readUntil("ab") // the echo: the line discipline holds "ab" as a partial line
			if err := os.WriteFile(go1, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			c.readUntil(tc.after)
			ptWaiting(t, ts, st.CommandID, tc.name+": cat reading")
			ptStdin(t, ts, st.CommandID, "", true)
			c.readUntil("cat-done\r\n")
			ptStdin(t, ts, st.CommandID, "hello\n", false)
			end := c.readExitPTY()
			if !bytes.Contains(c.out, []byte("read-rc=0 b=hello\r\n")) || end.State != "exited" {
				t.Errorf("%s: output %q, %s; want read-rc=0 b=hello", tc.name, c.out, end.State)
			}
		})
	}
}

// TestPTYEOFReplayExact: the replay keeps a line where the kernel keeps one
// (issue 20 attacker items D2-D5), so eof to a cat asleep reading types the
// second VEOF that ends it: a word erase after "x é" leaves "x " (under
// IUTF8 the kernel takes a UTF-8 lead byte as a letter), Ctrl-R without ECHO
// is a plain byte, VLNEXT then CR under IGNCR stores the CR, and an erase
// of a lone continuation byte at the line's start erases nothing.
func TestPTYEOFReplayExact(t *testing.T) {
	ts := newTestServer(t, nil)
	const script = `cat; echo cat-done; read b; echo read-rc=$? b=$b`
	for _, tc := range []struct {
		name, before string
		typed        []byte
	}{
		{"word erase after a non-ASCII letter", "", []byte("x \u00e9\x17")},
		{"Ctrl-R without echo", "stty -echo; ", []byte("\x12")},
		{"VLNEXT then CR under IGNCR", "stty igncr; ", []byte("\x16\r")},
		{"erase of a lone continuation byte", "", []byte{0xa9, 0x7f}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := ptCreate(t, ts, []string{"bash", "-c", tc.before + script}, 80, 24, "")
			c := atDial(t, ts, st.CommandID, "")
			atWaitFor(t, tc.name+": cat reading", func() bool {
				s := ptStatusOf(t, ts, st.CommandID, 0)
				return foregroundIs(t, st.PID, "cat") && s.WaitingForInput != nil && *s.WaitingForInput
			})
			ptStdinBytes(t, ts, st.CommandID, tc.typed)
			ptStdin(t, ts, st.CommandID, "", true)
			c.readUntil("cat-done\r\n")
			ptStdin(t, ts, st.CommandID, "hello\n", false)
			end := c.readExitPTY()
			if !bytes.Contains(c.out, []byte("read-rc=0 b=hello\r\n")) || end.State != "exited" {
				t.Errorf("%s: %q then eof then hello: output %q, %s; want read-rc=0 b=hello", tc.name, tc.typed, c.out, end.State)
			}
		})
	}
}

// TestPTYFinalSizeIsTheLast: a program that sets its terminal's size and
// exits at once, with nobody asking for a status between, ends with that
// size in its final status (issue 20, attacker D8), not the size it
// started with.
func TestPTYFinalSizeIsTheLast(t *testing.T) {
	ts := newTestServer(t, nil)
	st := ptCreate(t, ts, []string{"sh", "-c", "stty cols 50 rows 7"}, 80, 24, "")
	c := atDial(t, ts, st.CommandID, "")
	end := c.readExitPTY()
	if end.PTY == nil || end.PTY.Cols != 50 || end.PTY.Rows != 7 {
		t.Errorf("final status after stty cols 50 rows 7: %+v; want 50x7", end.PTY)
	}
}
