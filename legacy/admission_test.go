package legacy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/api"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// postCommand sends POST /v1/commands with body and returns the status,
// the Retry-After header and the body.
func postCommand(t *testing.T, serverURL, body string) (int, string, string) {
	t.Helper()
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Post(serverURL+"/v1/commands", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(data)
}

// readExecAnswer reads the rest of an /execute answer (heartbeat spaces,
// then the JSON) from resp.
func readExecAnswer(t *testing.T, resp *http.Response) legacyExecResponse {
	t.Helper()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	var out legacyExecResponse
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("answer %q: %v", data, err)
	}
	return out
}

// TestAdmissionClassesOverHTTP: legacy /execute and managed commands
// count apart, each with its own answer when full, exactly as before
// (protocol.md §2 "Admission", §5 "Slots"): with every execution place
// taken, managed commands still start up to their own limit, and the
// create past it is 429 too_many_running with Retry-After: 1 and the
// running count; a further /execute is 200 at once, heartbeats while it
// waits, runs nothing until a place frees, then runs and answers.
func TestAdmissionClassesOverHTTP(t *testing.T) {
	ts := newTestServer(t, func(c *runtime.Config, o *api.Options) {
		c.MaxRunning, c.MaxRetained, c.MaxExecutions = 2, 4, 2
		o.HeartbeatInterval = 20 * time.Millisecond
	})
	var writers []*os.File
	var answers []*http.Response
	for _, name := range []string{"fifo1", "fifo2"} {
		if err := syscall.Mkfifo(filepath.Join(ts.BaseDir, name), 0o600); err != nil {
			t.Fatal(err)
		}
		resp, _ := legacyPost(t, ts.URL, "cat "+name, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("/execute cat %s: %d", name, resp.StatusCode)
		}
		writers = append(writers, legacyOpenFIFO(t, filepath.Join(ts.BaseDir, name))) // it runs
		answers = append(answers, resp)
	}
	marker := filepath.Join(ts.BaseDir, "third-ran")
	third, _ := legacyPost(t, ts.URL, "touch "+marker, nil)
	if third.StatusCode != 200 {
		t.Fatalf("/execute past the places: %d; want 200 at once", third.StatusCode)
	}

	// The execution places are all taken: managed commands have their own.
	for i := range 2 {
		if code, _, body := postCommand(t, ts.URL, `{"argv":["sleep","30"]}`); code != 201 {
			t.Fatalf("create %d with every execution place taken: %d %s", i+1, code, body)
		}
	}
	code, retry, body := postCommand(t, ts.URL, `{"argv":["true"]}`)
	want := `{"error":{"code":"too_many_running","message":"2 managed commands are running (limit 2)"}}`
	if code != 429 || retry != "1" || strings.TrimSpace(body) != want {
		t.Fatalf("create past the running limit: %d Retry-After %q %s; want 429, 1, %s", code, retry, body, want)
	}
	// …and managed commands take no execution place: the third call
	// still waits (both places are held by the blocked cats).
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the call past the execution places ran: %v", err)
	}

	writers[0].Close() // the first cat ends; its place goes to the third call
	if out := readExecAnswer(t, answers[0]); out != (legacyExecResponse{}) {
		t.Errorf("first call: %+v; want empty output, exit 0", out)
	}
	if out := readExecAnswer(t, third); out != (legacyExecResponse{}) {
		t.Errorf("third call once a place freed: %+v; want empty output, exit 0", out)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the third call answered without running: %v", err)
	}
	writers[1].Close()
	if out := readExecAnswer(t, answers[1]); out != (legacyExecResponse{}) {
		t.Errorf("second call: %+v", out)
	}
}

// TestExecuteWaitingAtShutdown: a call waiting for an execution place when
// shutdown begins is answered as before: 200, exit 1, "Failed to execute
// command: the sandbox runtime is shutting down", and its command never
// runs; the call that held the place is ended like a signal death.
func TestExecuteWaitingAtShutdown(t *testing.T) {
	for _, large := range []bool{false, true} {
		t.Run(map[bool]string{false: "small", true: "large"}[large], func(t *testing.T) {
			ts := newTestServer(t, func(c *runtime.Config, o *api.Options) {
				c.MaxExecutions = 1
				o.HeartbeatInterval = 20 * time.Millisecond
			})
			fifo := filepath.Join(ts.BaseDir, "fifo")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			first, _ := legacyPost(t, ts.URL, "cat fifo", nil)
			w := legacyOpenFIFO(t, fifo)
			defer w.Close()
			marker := filepath.Join(ts.BaseDir, "ran")
			cmd := "touch " + marker
			if large { // over runtime.LargeBody: it waits with its command only
				cmd += strings.Repeat(" "+marker, runtime.LargeBody/len(marker)+1)
			}
			second, _ := legacyPost(t, ts.URL, cmd, nil)
			if second.StatusCode != 200 {
				t.Fatalf("waiting call: %d", second.StatusCode)
			}
			// The second call is in the server (its 200 came); shut down.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			shut := make(chan error, 1)
			go func() { shut <- ts.M.Shutdown(ctx) }()
			want := legacyExecResponse{Stderr: "Failed to execute command: the sandbox runtime is shutting down", ExitCode: 1}
			if out := readExecAnswer(t, second); out != want {
				t.Errorf("waiting call at shutdown: %+v; want %+v", out, want)
			}
			out := readExecAnswer(t, first)
			if out.ExitCode != -15 || !strings.Contains(out.Stderr, "[terminated: the sandbox runtime is shutting down]") {
				t.Errorf("running call at shutdown: %+v; want exit -15 and the note", out)
			}
			if err := <-shut; err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the waiting call ran: %v", err)
			}
		})
	}
}

// TestDecodeTurnsAreTheManagers: a large /execute and a large create wait
// for a decode turn of their own server's Manager only: with every turn of
// one Manager held, another server's large requests are answered (before,
// one process-wide gate, httpx.bigDecodes, made them wait), and the first
// server's are answered once its turns are given back.
func TestDecodeTurnsAreTheManagers(t *testing.T) {
	held := newTestServer(t, nil)
	free := newTestServer(t, nil)
	var leaves []func()
	for {
		// Take every turn: the next large decode would wait.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		leave, err := held.M.EnterDecode(ctx, runtime.LargeBody+1)
		cancel()
		if err != nil {
			break
		}
		leaves = append(leaves, leave)
		if len(leaves) > 64 {
			t.Fatal("the large-decode turns have no limit")
		}
	}
	defer func() {
		for _, l := range leaves {
			l()
		}
	}()
	big := strings.Repeat(" x", runtime.LargeBody)
	if code, out := legacyExec(t, free.URL, "echo"+big, nil); code != 200 || len(out.Stdout) != len(big) {
		t.Fatalf("large /execute on another server: %d, %d bytes", code, len(out.Stdout))
	}
	createBody := `{"argv":["true"],"envs":{"PAD":"` + strings.Repeat("p", runtime.LargeBody) + `"}}`
	if code, _, body := postCommand(t, free.URL, createBody); code != 201 {
		t.Fatalf("large create on another server: %d %.200s", code, body)
	}

	// The held server's large requests wait for its own turns.
	done := make(chan int, 2)
	post := func(path, body string) {
		c := &http.Client{Timeout: 30 * time.Second}
		resp, err := c.Post(held.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			done <- -1
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}
	execBody, _ := json.Marshal(map[string]string{"command": "echo" + big})
	go post("/execute", string(execBody))
	go post("/v1/commands", createBody)
	select {
	case code := <-done:
		t.Fatalf("a large request was answered (%d) with every decode turn of its Manager held", code)
	case <-time.After(300 * time.Millisecond):
	}
	for _, l := range leaves {
		l()
	}
	leaves = nil
	for range 2 {
		select {
		case code := <-done:
			if code != 200 && code != 201 {
				t.Errorf("large request once the turns were back: %d", code)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a large request was not answered once the turns were given back")
		}
	}
}
