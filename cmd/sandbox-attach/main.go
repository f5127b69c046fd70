// Command sandbox-attach is a terminal client of sandbox-runtime: it starts a
// command on a pseudo-terminal (or takes an existing one by id), attaches to
// it over the WebSocket, puts the local terminal in raw mode and forwards
// keys as stdin frames and window changes as resize frames. A dropped
// connection is re-dialled from the last next_cursor, so nothing is lost or
// repeated. Ctrl-] detaches and leaves the command running.
//
//	sandbox-attach [-addr http://127.0.0.1:8888] [-token-file F] -- bash -i
//	sandbox-attach [-addr …] -id COMMAND_ID [-cursor N]
//
// It exits with the command's exit code (128+N when signal N ended it).
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	"golang.org/x/term"
)

const (
	detachKey   = 0x1d // Ctrl-]
	redialPause = 500 * time.Millisecond
	maxRedials  = 20
)

type event struct {
	Type       string          `json:"type"`
	Data       string          `json:"data"`
	Encoding   string          `json:"encoding"`
	NextCursor int64           `json:"next_cursor"`
	Reason     string          `json:"reason"`
	Status     json.RawMessage `json:"status"`
	Error      *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func main() { os.Exit(run()) }

func run() int {
	addr := flag.String("addr", "http://127.0.0.1:8888", "runtime base URL")
	tokenFile := flag.String("token-file", "", "file holding the bearer token")
	id := flag.String("id", "", "attach to this command instead of starting one")
	cursor := flag.Int64("cursor", 0, "attach from this cursor (with -id)")
	timeout := flag.Float64("timeout", 3600, "timeout of a new command in seconds (clamped by the runtime)")
	flag.Parse()
	hdr := http.Header{}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-attach:", err)
			return 2
		}
		hdr.Set("Authorization", "Bearer "+strings.TrimSpace(string(b)))
	}
	fd := int(os.Stdin.Fd())
	isTerm := term.IsTerminal(fd)
	size := func() (int, int) {
		if c, r, err := term.GetSize(fd); err == nil && c > 0 && r > 0 {
			return c, r
		}
		return 80, 24
	}
	if *id == "" {
		if flag.NArg() == 0 {
			fmt.Fprintln(os.Stderr, "usage: sandbox-attach [-addr URL] -- argv… | -id ID")
			return 2
		}
		cols, rows := size()
		body, _ := json.Marshal(map[string]any{"argv": flag.Args(), "timeout": *timeout,
			"pty": map[string]any{"cols": cols, "rows": rows, "term": envOr("TERM", "xterm-256color")}})
		req, _ := http.NewRequest("POST", *addr+"/v1/commands", bytes.NewReader(body))
		req.Header = hdr.Clone()
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-attach:", err)
			return 1
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var st struct {
			CommandID string `json:"command_id"`
		}
		if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &st) != nil {
			fmt.Fprintf(os.Stderr, "sandbox-attach: create: %d %s\n", resp.StatusCode, b)
			return 1
		}
		*id = st.CommandID
	}
	if isTerm {
		old, err := term.MakeRaw(fd)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-attach:", err)
			return 1
		}
		defer term.Restore(fd, old)
	}

	// Frames for the server outlive a connection: keys typed while it is
	// re-dialled are sent on the next one.
	frames := make(chan []byte, 64)
	detach := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := os.Stdin.Read(buf)
			if i := bytes.IndexByte(buf[:n], detachKey); isTerm && i >= 0 {
				if i > 0 {
					frames <- stdinFrame(buf[:i])
				}
				close(detach)
				return
			}
			if n > 0 {
				frames <- stdinFrame(buf[:n])
			}
			if err != nil {
				frames <- []byte(`{"type":"stdin","eof":true}`)
				return
			}
		}
	}()
	resize := func() []byte {
		c, r := size()
		return []byte(fmt.Sprintf(`{"type":"resize","cols":%d,"rows":%d}`, c, r))
	}
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)

	wsURL := "ws" + strings.TrimPrefix(*addr, "http") + "/v1/commands/" + *id + "/attach?cursor="
	next := *cursor
	for redials := 0; ; redials++ {
		conn, resp, err := websocket.DefaultDialer.Dial(wsURL+strconv.FormatInt(next, 10), hdr)
		if err != nil {
			if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols || redials >= maxRedials {
				fmt.Fprintf(os.Stderr, "\r\nsandbox-attach: attach: %v\r\n", err)
				return 1
			}
			time.Sleep(redialPause)
			continue
		}
		if isTerm {
			frames <- resize() // the size may have changed while we were away
		}
		stop := make(chan struct{})
		writerDone := make(chan struct{})
		go func() { // the only writer of conn
			defer close(writerDone)
			for {
				select {
				case f := <-frames:
					if conn.WriteMessage(websocket.TextMessage, f) != nil {
						return
					}
				case <-winch:
					if conn.WriteMessage(websocket.TextMessage, resize()) != nil {
						return
					}
				case <-detach:
					conn.Close()
					return
				case <-stop:
					return
				}
			}
		}()
		code, done := readEvents(conn, &next)
		close(stop)
		conn.Close()
		<-writerDone
		select {
		case <-detach:
			fmt.Fprintf(os.Stderr, "\r\nsandbox-attach: detached from %s at cursor %d\r\n", *id, next)
			return 0
		default:
		}
		if done {
			return code
		}
		time.Sleep(redialPause)
	}
}

// readEvents writes the output of conn's events to stdout until the exit
// event (done, with the exit code) or the connection ends (re-dial from
// *next).
func readEvents(conn *websocket.Conn, next *int64) (code int, done bool) {
	for {
		_, b, err := conn.ReadMessage()
		if err != nil {
			return 0, false
		}
		var ev event
		if json.Unmarshal(b, &ev) != nil {
			continue
		}
		switch ev.Type {
		case "output":
			data := []byte(ev.Data)
			if ev.Encoding == "base64" {
				data, _ = base64.StdEncoding.DecodeString(ev.Data)
			}
			os.Stdout.Write(data)
		case "error":
			if ev.Error != nil {
				fmt.Fprintf(os.Stderr, "\r\nsandbox-attach: %s: %s\r\n", ev.Error.Code, ev.Error.Message)
			}
			continue // its next_cursor repeats the last one
		case "exit":
			var st struct {
				ExitCode int `json:"exit_code"`
			}
			json.Unmarshal(ev.Status, &st)
			if st.ExitCode < 0 {
				return 128 - st.ExitCode, true
			}
			return st.ExitCode, true
		}
		*next = ev.NextCursor
	}
}

func stdinFrame(p []byte) []byte {
	f := map[string]any{"type": "stdin", "data": string(p)}
	if !utf8.Valid(p) {
		f = map[string]any{"type": "stdin", "data": base64.StdEncoding.EncodeToString(p), "encoding": "base64"}
	}
	b, err := json.Marshal(f)
	if err != nil {
		panic(errors.New("stdin frame: " + err.Error()))
	}
	return b
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
