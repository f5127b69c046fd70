// Command naive is the baseline of sandbox-bench: the command server a user
// would write in about fifty lines with net/http and os/exec. It buffers
// everything, has no limits, no auth, no ring, no reaper: what the daemon has
// to beat. sandbox-bench builds it and starts it as its own process, exactly
// like the daemon (SANDBOX_RUNTIME_ADDR, a "listening" log line on stderr).
//
//	POST /execute {"command":"echo hi"}              → {"stdout","stderr","exit_code"}
//	POST /v1/commands?stream=true {"argv":[…]}       → NDJSON: started, output…, exit
//	gRPC process.v1.ProcessService/Execute          → on SANDBOXD_GRPC_ADDR, when set (grpc.go)
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
)

func main() {
	ln, err := net.Listen("tcp", os.Getenv("SANDBOX_RUNTIME_ADDR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	grpcAddr := ""
	if a := os.Getenv("SANDBOXD_GRPC_ADDR"); a != "" { // sandboxd's Execute over grpc-go (grpc.go)
		if grpcAddr, err = serveGRPC(a); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	fmt.Fprintf(os.Stderr, "{\"msg\":\"listening\",\"addr\":%q,\"sandboxd_grpc_addr\":%q}\n", ln.Addr().String(), grpcAddr)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; os.Exit(0) }()
	http.HandleFunc("POST /execute", execute)
	http.HandleFunc("POST /v1/commands", commands)
	http.Serve(ln, nil)
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return 0
}

func execute(w http.ResponseWriter, r *http.Request) {
	var req struct{ Command string }
	if json.NewDecoder(r.Body).Decode(&req) != nil || len(strings.Fields(req.Command)) == 0 {
		http.Error(w, "bad request", 400)
		return
	}
	argv := strings.Fields(req.Command)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"stdout": stdout.String(), "stderr": stderr.String(), "exit_code": exitCode(err)})
}

var ids atomic.Int64

type event struct {
	Type       string         `json:"type"`
	Stream     string         `json:"stream,omitempty"`
	Cursor     *int64         `json:"cursor,omitempty"`
	NextCursor int64          `json:"next_cursor"`
	Data       string         `json:"data,omitempty"`
	Status     map[string]any `json:"status,omitempty"`
}

func commands(w http.ResponseWriter, r *http.Request) {
	var req struct{ Argv []string }
	if json.NewDecoder(r.Body).Decode(&req) != nil || len(req.Argv) == 0 {
		http.Error(w, "bad request", 400)
		return
	}
	id := fmt.Sprint("cmd-", ids.Add(1))
	pr, pw, err := os.Pipe()
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	defer pr.Close()
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	cmd.Stdout, cmd.Stderr = pw, pw
	err = cmd.Start()
	pw.Close()
	if err != nil {
		http.Error(w, err.Error(), 422)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusCreated)
	enc, flush := json.NewEncoder(w), w.(http.Flusher).Flush
	enc.Encode(event{Type: "started", Status: map[string]any{"command_id": id, "state": "running"}})
	flush()
	buf := make([]byte, 64<<10)
	var cursor int64
	for {
		n, err := pr.Read(buf)
		if n > 0 {
			c := cursor
			cursor += int64(n)
			enc.Encode(event{Type: "output", Stream: "stdout", Cursor: &c, NextCursor: cursor, Data: string(buf[:n])})
			flush()
		}
		if err != nil {
			break
		}
	}
	code := exitCode(cmd.Wait())
	enc.Encode(event{Type: "exit", NextCursor: cursor, Status: map[string]any{"command_id": id, "state": "exited",
		"exit_code": code, "stdout_bytes": cursor, "next_cursor": cursor}})
}
