package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestAttachKillNotBehindStdin: a kill frame acts at once although the
// stdin frames before it wait for a command that does not read (issue 20,
// attacker D7): the feeder waits for room, the reader goes on reading.
func TestAttachKillNotBehindStdin(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	st := atCreate(t, ts, `{"argv":["sleep","60"],"stdin":true}`)
	c := atDial(t, ts, st.CommandID, "")
	chunk := strings.Repeat("x", 60000)
	for range 30 {
		c.send(map[string]any{"type": "stdin", "data": chunk})
	}
	t0 := time.Now()
	c.send(`{"type":"kill"}`)
	// The stdin frames still queued when the kill lands cannot be written
	// any more: each may be answered with an error event (finished or
	// stdin_closed) before or after the exit, and nothing else may come.
	var end atStatus
	for end.State == "" {
		switch ev := c.read(); ev.Type {
		case "output":
		case "exit":
			end = ev.status(t)
		case "error":
			if ev.Error == nil || (ev.Error.Code != "finished" && ev.Error.Code != "stdin_closed") {
				t.Fatalf("an error event %+v; want only finished or stdin_closed for stdin left behind the kill", ev.Error)
			}
			t.Logf("a stdin frame left behind the kill: %s", ev.Error.Code)
		default:
			t.Fatalf("got a %s frame; want output, exit or the error of a stdin frame left behind", ev.Type)
		}
	}
	if d := time.Since(t0); end.State != "cancelled" || d > 10*time.Second {
		t.Fatalf("kill behind 1.8 MB of stdin frames: %s after %v; want cancelled at once", end.State, d)
	}
	t.Logf("kill behind 30 stdin frames of 60 KB: exit %v after the kill frame", time.Since(t0))
}

// TestAttachStdinReadSurvivesClose: stdin frames the daemon has read are
// written to the command even when the client closes the connection
// before the command reads them (issue 20, attacker D6): a close ends the
// attachment, not the input already sent, even once the daemon has found
// the connection gone.
func TestAttachStdinReadSurvivesClose(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	gofile := filepath.Join(t.TempDir(), "go")
	st := atCreate(t, ts, string(marshal(map[string]any{
		"argv": []string{"sh", "-c", `while [ ! -e ` + gofile + ` ]; do sleep 0.01; done; ` +
			// Output after the close: the daemon's writes to the closed
			// connection fail, which ends the writer.
			`for i in 1 2 3 4 5 6 7 8 9 10; do echo out$i; sleep 0.05; done; wc -c`},
		"stdin": true,
	})))
	c := atDial(t, ts, st.CommandID, "")
	chunk := strings.Repeat("y", 60000)
	const frames = 25
	for i := range frames {
		c.send(map[string]any{"type": "stdin", "data": chunk, "eof": i == frames-1})
	}
	// A clean close: the close frame, then read to the daemon's answer
	// (closing with frames unread would reset the connection, and a reset
	// drops what the daemon's kernel holds unread). The daemon answers once
	// it has read every frame before the close.
	c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.ws.SetReadDeadline(time.Now().Add(atTimeout))
	for {
		if _, _, err := c.ws.ReadMessage(); err != nil {
			if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				t.Fatalf("waiting for the close answer: %v", err)
			}
			break
		}
	}
	c.ws.Close()
	if err := os.WriteFile(gofile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c2 := atDial(t, ts, st.CommandID, "cursor=0")
	end := c2.readExit()
	lines := strings.Fields(string(c2.out))
	if got := lines[len(lines)-1]; got != "1500000" || end.State != "exited" {
		t.Fatalf("wc -c after 25 frames of 60000 bytes and a close: %q, %s; want 1500000, exited", got, end.State)
	}
}
