package process_test

// The black-box suite of sandboxd's ProcessService, written from
// process.proto alone: a gRPC client against the real binary (built once in
// TestMain), or, with SANDBOXD_BLACKBOX_ADDR=host:port and
// SANDBOXD_BLACKBOX_ROOT=<its root dir>, against another server such as
// upstream's sandboxd (docs/sandboxd.md has both runs). Checks that need
// this daemon's own API (the v1 listing, its limits, its shutdown) are
// skipped against another server; every other check runs the same on both.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	rpbalpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sandbox-runtime/sandbox-runtime/internal/daemontest"
	pb "github.com/sandbox-runtime/sandbox-runtime/sandboxd/processv1"
)

var (
	binPath  string
	external = os.Getenv("SANDBOXD_BLACKBOX_ADDR")

	sharedOnce sync.Once
	shared     *target
	sharedErr  error
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	if external != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "sandboxd-blackbox-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if binPath, err = daemontest.Build(ctx, daemontest.BuildOptions{Dir: dir, Version: "sandboxd-test", Race: daemontest.RaceEnabled}); err != nil {
		fmt.Fprintln(os.Stderr, "building the daemon:", err)
		return 1
	}
	code := m.Run()
	if shared != nil && shared.d != nil {
		if _, _, err := shared.d.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the shared daemon:", err)
			code = 1
		}
	}
	return code
}

// target is a server under test.
type target struct {
	d      *daemontest.Daemon // nil: an external server
	addr   string             // the gRPC address
	root   string             // its sandbox root (cwd "" runs there)
	conn   *grpc.ClientConn
	client pb.ProcessServiceClient
}

// start starts a daemon of ours with env on top of the launcher's.
func start(t testing.TB, env ...string) *target {
	t.Helper()
	base := filepath.Join(t.TempDir(), "base")
	d, err := daemontest.Start(context.Background(), daemontest.Options{Bin: binPath, BaseDir: base,
		Env: append([]string{"SANDBOXD_GRPC_ADDR=127.0.0.1:0"}, env...)})
	if err != nil {
		t.Fatalf("%v", err)
	}
	addr, _ := d.Listening["sandboxd_grpc_addr"].(string)
	if addr == "" {
		d.Stop()
		t.Fatalf("the listening line names no sandboxd_grpc_addr: %v", d.Listening)
	}
	return dialTarget(t, d, strings.Replace(addr, "0.0.0.0", "127.0.0.1", 1), base)
}

func dialTarget(t testing.TB, d *daemontest.Daemon, addr, root string, opts ...grpc.DialOption) *target {
	t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(root)
	if err == nil {
		root = real
	}
	return &target{d: d, addr: addr, root: root, conn: conn, client: pb.NewProcessServiceClient(conn)}
}

// sharedTarget is the daemon most checks share (or the external server).
func sharedTarget(t *testing.T) *target {
	t.Helper()
	sharedOnce.Do(func() {
		if external != "" {
			root := os.Getenv("SANDBOXD_BLACKBOX_ROOT")
			if root == "" {
				sharedErr = errors.New("SANDBOXD_BLACKBOX_ADDR needs SANDBOXD_BLACKBOX_ROOT (the server's root dir)")
				return
			}
			shared = dialTarget(t, nil, external, root)
			return
		}
		base := filepath.Join(os.TempDir(), fmt.Sprintf("sandboxd-blackbox-%d", os.Getpid()), "base")
		d, err := daemontest.Start(context.Background(), daemontest.Options{Bin: binPath, BaseDir: base,
			Env: []string{"SANDBOXD_GRPC_ADDR=127.0.0.1:0"}})
		if err != nil {
			sharedErr = err
			return
		}
		addr, _ := d.Listening["sandboxd_grpc_addr"].(string)
		shared = dialTarget(t, d, addr, base)
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

// ours skips a check that needs this daemon's own API.
func ours(t *testing.T) {
	t.Helper()
	if external != "" {
		t.Skip("needs sandbox-runtime's own API; SANDBOXD_BLACKBOX_ADDR points this run at another server")
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func argv(script string) *pb.ProcessConfig {
	return &pb.ProcessConfig{Command: []string{"/bin/sh", "-c", script}}
}

func wantCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("status %v (%v), want %v", got, err, want)
	}
}

// run is what a Start stream delivered.
type run struct {
	id             int32
	stdout, stderr bytes.Buffer
	exit           *int32
	err            error // the stream's final status (nil: OK)
	header         metadata.MD
	trailer        metadata.MD
}

// exitString shows the exit code, or that none came.
func (r *run) exitString() string {
	if r.exit == nil {
		return "none"
	}
	return strconv.Itoa(int(*r.exit))
}

// collect reads s to its end (or until ctx ends).
func collect(s grpc.ServerStreamingClient[pb.StartResponse]) *run {
	r := &run{}
	for {
		msg, err := s.Recv()
		if err != nil {
			if err != io.EOF {
				r.err = err
			}
			r.header, _ = s.Header()
			r.trailer = s.Trailer()
			return r
		}
		switch ev := msg.Event.(type) {
		case *pb.StartResponse_Init:
			r.id = ev.Init.ProcessId
		case *pb.StartResponse_Stdout:
			r.stdout.Write(ev.Stdout)
		case *pb.StartResponse_Stderr:
			r.stderr.Write(ev.Stderr)
		case *pb.StartResponse_Exit:
			code := ev.Exit.ExitCode
			r.exit = &code
		}
	}
}

// startInit starts req and returns the stream once its InitEvent came.
func startInit(t *testing.T, ctx context.Context, c pb.ProcessServiceClient, req *pb.StartRequest) (grpc.ServerStreamingClient[pb.StartResponse], int32) {
	t.Helper()
	s, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.Recv()
	if err != nil {
		t.Fatalf("first event: %v", err)
	}
	init, ok := msg.Event.(*pb.StartResponse_Init)
	if !ok {
		t.Fatalf("first event is %T, want InitEvent", msg.Event)
	}
	return s, init.Init.ProcessId
}

// readUntil reads stdout events of s until out contains want.
func readUntil(t *testing.T, s grpc.ServerStreamingClient[pb.StartResponse], out *bytes.Buffer, want string) {
	t.Helper()
	for !strings.Contains(out.String(), want) {
		msg, err := s.Recv()
		if err != nil {
			t.Fatalf("stream ended (%v) before %q; stdout so far %q", err, want, out.String())
		}
		switch ev := msg.Event.(type) {
		case *pb.StartResponse_Stdout:
			out.Write(ev.Stdout)
		case *pb.StartResponse_Exit:
			t.Fatalf("exited %d before %q; stdout %q", ev.Exit.ExitCode, want, out.String())
		}
	}
}

func TestExecuteOutputAndExitCode(t *testing.T) {
	tg := sharedTarget(t)
	res, err := tg.client.Execute(ctxT(t, 30*time.Second), &pb.ExecuteRequest{Config: argv("echo hi; echo err >&2; exit 3")})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "hi\n" || string(res.Stderr) != "err\n" || res.ExitCode != 3 {
		t.Fatalf("got stdout %q stderr %q exit %d", res.Stdout, res.Stderr, res.ExitCode)
	}
}

func TestExecuteEnvAndRelativeCwd(t *testing.T) {
	tg := sharedTarget(t)
	if err := os.MkdirAll(filepath.Join(tg.root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := argv(`pwd; echo "$FOO"`)
	cfg.EnvVars = map[string]string{"FOO": "bar baz"}
	sub := "sub"
	cfg.Cwd = &sub
	res, err := tg.client.Execute(ctxT(t, 30*time.Second), &pb.ExecuteRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(tg.root, "sub") + "\nbar baz\n"; string(res.Stdout) != want {
		t.Fatalf("stdout %q, want %q", res.Stdout, want)
	}
}

// TestExecuteAbsoluteCwdIsReRooted: an absolute cwd names a directory of
// the sandbox root ("/sub" is <root>/sub), as upstream's; one already under
// the root is taken as is.
func TestExecuteAbsoluteCwdIsReRooted(t *testing.T) {
	tg := sharedTarget(t)
	if err := os.MkdirAll(filepath.Join(tg.root, "abs", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, cwd := range []string{"/abs/x", filepath.Join(tg.root, "abs", "x"), "/abs/../abs/x"} {
		cfg := argv("pwd")
		cfg.Cwd = &cwd
		res, err := tg.client.Execute(ctxT(t, 30*time.Second), &pb.ExecuteRequest{Config: cfg})
		if err != nil {
			t.Fatalf("cwd %q: %v", cwd, err)
		}
		if want := filepath.Join(tg.root, "abs", "x") + "\n"; string(res.Stdout) != want {
			t.Errorf("cwd %q: pwd %q, want %q", cwd, res.Stdout, want)
		}
	}
}

func TestCwdOutsideRootIsPermissionDenied(t *testing.T) {
	tg := sharedTarget(t)
	link := filepath.Join(tg.root, "escape")
	os.Remove(link)
	if err := os.Symlink("/", link); err != nil {
		t.Fatal(err)
	}
	for _, cwd := range []string{"..", "../..", "escape", "escape/etc"} {
		cfg := argv("pwd")
		cfg.Cwd = &cwd
		_, err := tg.client.Execute(ctxT(t, 30*time.Second), &pb.ExecuteRequest{Config: cfg})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("cwd %q: %v, want PERMISSION_DENIED", cwd, err)
		}
	}
}

func TestBadRequestsHaveClearStatuses(t *testing.T) {
	tg := sharedTarget(t)
	ctx := ctxT(t, 30*time.Second)
	_, err := tg.client.Execute(ctx, &pb.ExecuteRequest{})
	wantCode(t, err, codes.InvalidArgument)
	_, err = tg.client.Execute(ctx, &pb.ExecuteRequest{Config: &pb.ProcessConfig{Command: []string{"/no/such/binary"}}})
	wantCode(t, err, codes.NotFound)
	missing := "no-such-dir"
	cfg := argv("true")
	cfg.Cwd = &missing
	_, err = tg.client.Execute(ctx, &pb.ExecuteRequest{Config: cfg})
	wantCode(t, err, codes.NotFound)
	s, err := tg.client.Start(ctx, &pb.StartRequest{})
	if err == nil {
		_, err = s.Recv()
	}
	wantCode(t, err, codes.InvalidArgument)
}

func TestUnknownProcessIsNotFound(t *testing.T) {
	tg := sharedTarget(t)
	ctx := ctxT(t, 30*time.Second)
	for _, id := range []int32{0, -1, 1 << 30} {
		_, err := tg.client.WriteStdin(ctx, &pb.WriteStdinRequest{ProcessId: id, Payload: &pb.WriteStdinRequest_Input{Input: []byte("x")}})
		wantCode(t, err, codes.NotFound)
		_, err = tg.client.SendSignal(ctx, &pb.SendSignalRequest{ProcessId: id, Signal: pb.Signal_SIGNAL_SIGTERM})
		wantCode(t, err, codes.NotFound)
		_, err = tg.client.ResizeTTY(ctx, &pb.ResizeTTYRequest{ProcessId: id, Cols: 10, Rows: 10})
		wantCode(t, err, codes.NotFound)
	}
}

// TestExecuteBackgroundChildHoldingStdout: the leader exits at once while
// a background child keeps stdout open; the answer comes after the pipe
// grace with the leader's output and exit code (upstream: INTERNAL after
// its 10 s WaitDelay, output lost).
func TestExecuteBackgroundChildHoldingStdout(t *testing.T) {
	tg := sharedTarget(t)
	t0 := time.Now()
	res, err := tg.client.Execute(ctxT(t, 60*time.Second), &pb.ExecuteRequest{Config: argv("sleep 11 & echo started")})
	if err != nil {
		t.Fatalf("after %v: %v", time.Since(t0), err)
	}
	if string(res.Stdout) != "started\n" || res.ExitCode != 0 {
		t.Fatalf("stdout %q exit %d", res.Stdout, res.ExitCode)
	}
	if took := time.Since(t0); took > 9*time.Second {
		t.Errorf("the answer took %v: it waited for the background child", took)
	}
}

func TestExecuteLargeOutput(t *testing.T) {
	tg := sharedTarget(t)
	const n = 5 << 20
	res, err := tg.client.Execute(ctxT(t, 60*time.Second), &pb.ExecuteRequest{Config: argv(fmt.Sprintf("head -c %d /dev/zero", n))},
		grpc.MaxCallRecvMsgSize(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != n || res.ExitCode != 0 {
		t.Fatalf("%d bytes of stdout, exit %d; want %d, 0", len(res.Stdout), res.ExitCode, n)
	}
	// A client that keeps grpc's default 4 MiB receive limit (upstream's SDK
	// does) is refused by its own side.
	_, err = tg.client.Execute(ctxT(t, 60*time.Second), &pb.ExecuteRequest{Config: argv(fmt.Sprintf("head -c %d /dev/zero", n))})
	wantCode(t, err, codes.ResourceExhausted)
}

// TestSignalDeathExitCode: our exit_code for a death by signal N is -N
// (upstream: -1 for every signal).
func TestSignalDeathExitCode(t *testing.T) {
	tg := sharedTarget(t)
	res, err := tg.client.Execute(ctxT(t, 30*time.Second), &pb.ExecuteRequest{Config: argv("kill -KILL $$")})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != -9 {
		t.Fatalf("exit code %d for SIGKILL, want -9", res.ExitCode)
	}
}

func TestStartStreamsOutputAndExit(t *testing.T) {
	tg := sharedTarget(t)
	s, err := tg.client.Start(ctxT(t, 30*time.Second), &pb.StartRequest{Config: argv("echo out; echo err >&2; exit 4")})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(s)
	if r.err != nil || r.id <= 0 || r.stdout.String() != "out\n" || r.stderr.String() != "err\n" || r.exit == nil || *r.exit != 4 {
		t.Fatalf("id %d stdout %q stderr %q exit %s err %v", r.id, r.stdout.String(), r.stderr.String(), r.exitString(), r.err)
	}
	// The id is forgotten once the stream has ended.
	_, err = tg.client.WriteStdin(ctxT(t, 10*time.Second), &pb.WriteStdinRequest{ProcessId: r.id, Payload: &pb.WriteStdinRequest_Eof{Eof: &emptypb.Empty{}}})
	wantCode(t, err, codes.NotFound)
}

func TestStartStdinAndEOF(t *testing.T) {
	tg := sharedTarget(t)
	ctx := ctxT(t, 30*time.Second)
	s, id := startInit(t, ctx, tg.client, &pb.StartRequest{Config: &pb.ProcessConfig{Command: []string{"cat"}}})
	if _, err := tg.client.WriteStdin(ctx, &pb.WriteStdinRequest{ProcessId: id, Payload: &pb.WriteStdinRequest_Input{Input: []byte("hello\n")}}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	readUntil(t, s, &out, "hello\n")
	if _, err := tg.client.WriteStdin(ctx, &pb.WriteStdinRequest{ProcessId: id, Payload: &pb.WriteStdinRequest_Eof{Eof: &emptypb.Empty{}}}); err != nil {
		t.Fatal(err)
	}
	r := collect(s)
	if r.err != nil || r.exit == nil || *r.exit != 0 {
		t.Fatalf("after EOF: exit %s err %v", r.exitString(), r.err)
	}
}

func TestProcessIDsAreDistinct(t *testing.T) {
	tg := sharedTarget(t)
	seen := map[int32]bool{}
	for range 3 {
		s, err := tg.client.Start(ctxT(t, 30*time.Second), &pb.StartRequest{Config: argv("true")})
		if err != nil {
			t.Fatal(err)
		}
		r := collect(s)
		if r.id <= 0 || seen[r.id] {
			t.Fatalf("process id %d (seen %v)", r.id, seen)
		}
		seen[r.id] = true
	}
}

// gone polls until pid no longer exists (or is a zombie), at most d.
func gone(pid int, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return true
		}
	}
	return false
}

func childPID(t *testing.T, s grpc.ServerStreamingClient[pb.StartResponse]) int {
	t.Helper()
	var out bytes.Buffer
	readUntil(t, s, &out, "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("no pid in %q", out.String())
	}
	return pid
}

func TestSendSignalReachesTheGroup(t *testing.T) {
	tg := sharedTarget(t)
	ctx := ctxT(t, 30*time.Second)
	s, id := startInit(t, ctx, tg.client, &pb.StartRequest{Config: argv("sleep 60 & echo $!; wait")})
	child := childPID(t, s)
	_, err := tg.client.SendSignal(ctx, &pb.SendSignalRequest{ProcessId: id, Signal: pb.Signal_SIGNAL_SIGKILL})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(s)
	if r.exit == nil || *r.exit == 0 {
		t.Fatalf("exit %s err %v", r.exitString(), r.err)
	}
	if !gone(child, 10*time.Second) {
		t.Fatalf("the background child %d outlived SIGKILL to the group", child)
	}
	_, err = tg.client.SendSignal(ctx, &pb.SendSignalRequest{ProcessId: id, Signal: pb.Signal_SIGNAL_UNSPECIFIED})
	if c := status.Code(err); c != codes.InvalidArgument && c != codes.NotFound {
		t.Fatalf("SIGNAL_UNSPECIFIED: %v", err)
	}
}

func TestSendSignalUnspecifiedIsInvalid(t *testing.T) {
	tg := sharedTarget(t)
	ctx := ctxT(t, 30*time.Second)
	s, id := startInit(t, ctx, tg.client, &pb.StartRequest{Config: argv("sleep 30")})
	for _, sig := range []pb.Signal{pb.Signal_SIGNAL_UNSPECIFIED, pb.Signal(1), pb.Signal(99)} {
		_, err := tg.client.SendSignal(ctx, &pb.SendSignalRequest{ProcessId: id, Signal: sig})
		wantCode(t, err, codes.InvalidArgument)
	}
	_, err := tg.client.SendSignal(ctx, &pb.SendSignalRequest{ProcessId: id, Signal: pb.Signal_SIGNAL_SIGTERM})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(s)
	if r.exit == nil {
		t.Fatalf("no exit event: %v", r.err)
	}
	if external == "" && *r.exit != -15 {
		t.Errorf("exit code %d for SIGTERM, want -15", *r.exit)
	}
}

// TestCancelledStartKillsTheGroup: a client that goes away takes its
// process group with it (its process_id died with the stream).
func TestCancelledStartKillsTheGroup(t *testing.T) {
	tg := sharedTarget(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, _ := startInit(t, ctx, tg.client, &pb.StartRequest{Config: argv("sleep 60 & echo $!; sleep 60")})
	child := childPID(t, s)
	cancel()
	if !gone(child, 15*time.Second) {
		t.Fatalf("the background child %d outlived the cancelled stream", child)
	}
}

func TestPTYSizeIsSetBeforeTheProgramStarts(t *testing.T) {
	tg := sharedTarget(t)
	for range 3 { // a race would show in some runs
		s, err := tg.client.Start(ctxT(t, 30*time.Second), &pb.StartRequest{
			Config: &pb.ProcessConfig{Command: []string{"stty", "size"}}, Pty: &pb.PTY{Cols: 123, Rows: 45}})
		if err != nil {
			t.Fatal(err)
		}
		r := collect(s)
		if got := strings.TrimSpace(r.stdout.String()); got != "45 123" || r.exit == nil || *r.exit != 0 {
			t.Fatalf("stty size said %q (exit %s, err %v), want \"45 123\"", got, r.exitString(), r.err)
		}
	}
}

func TestResizeTTY(t *testing.T) {
	tg := sharedTarget(t)
	ctx := ctxT(t, 30*time.Second)
	s, id := startInit(t, ctx, tg.client, &pb.StartRequest{Config: argv("echo ready; read x; stty size"), Pty: &pb.PTY{Cols: 80, Rows: 24}})
	var out bytes.Buffer
	readUntil(t, s, &out, "ready")
	if _, err := tg.client.ResizeTTY(ctx, &pb.ResizeTTYRequest{ProcessId: id, Cols: 132, Rows: 50}); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.client.WriteStdin(ctx, &pb.WriteStdinRequest{ProcessId: id, Payload: &pb.WriteStdinRequest_Input{Input: []byte("\n")}}); err != nil {
		t.Fatal(err)
	}
	readUntil(t, s, &out, "50 132")
	collect(s)
}

func TestResizeWithoutPTYIsFailedPrecondition(t *testing.T) {
	tg := sharedTarget(t)
	ctx := ctxT(t, 30*time.Second)
	s, id := startInit(t, ctx, tg.client, &pb.StartRequest{Config: &pb.ProcessConfig{Command: []string{"cat"}}})
	_, err := tg.client.ResizeTTY(ctx, &pb.ResizeTTYRequest{ProcessId: id, Cols: 10, Rows: 10})
	wantCode(t, err, codes.FailedPrecondition)
	tg.client.WriteStdin(ctx, &pb.WriteStdinRequest{ProcessId: id, Payload: &pb.WriteStdinRequest_Eof{Eof: &emptypb.Empty{}}})
	collect(s)
}

// TestPTYStdinEOF: EOF on a terminal ends a reader of it (upstream
// acknowledges it and does nothing).
func TestPTYStdinEOF(t *testing.T) {
	tg := sharedTarget(t)
	ctx := ctxT(t, 30*time.Second)
	s, id := startInit(t, ctx, tg.client, &pb.StartRequest{Config: argv("echo ready; cat; echo done"), Pty: &pb.PTY{Cols: 80, Rows: 24}})
	var out bytes.Buffer
	readUntil(t, s, &out, "ready")
	if _, err := tg.client.WriteStdin(ctx, &pb.WriteStdinRequest{ProcessId: id, Payload: &pb.WriteStdinRequest_Input{Input: []byte("abc\n")}}); err != nil {
		t.Fatal(err)
	}
	readUntil(t, s, &out, "abc\r\nabc\r\n") // the echo of the terminal, then cat's
	if _, err := tg.client.WriteStdin(ctx, &pb.WriteStdinRequest{ProcessId: id, Payload: &pb.WriteStdinRequest_Eof{Eof: &emptypb.Empty{}}}); err != nil {
		t.Fatal(err)
	}
	readUntil(t, s, &out, "done")
	r := collect(s)
	if r.exit == nil || *r.exit != 0 {
		t.Fatalf("exit %s err %v", r.exitString(), r.err)
	}
}

// TestShortPTYOutputIsKept: a process on a terminal that prints and exits
// at once loses nothing.
func TestShortPTYOutputIsKept(t *testing.T) {
	tg := sharedTarget(t)
	for i := range 5 {
		s, err := tg.client.Start(ctxT(t, 30*time.Second), &pb.StartRequest{Config: argv("echo quick"), Pty: &pb.PTY{Cols: 80, Rows: 24}})
		if err != nil {
			t.Fatal(err)
		}
		r := collect(s)
		if !strings.Contains(r.stdout.String(), "quick") || r.exit == nil || *r.exit != 0 {
			t.Fatalf("run %d: stdout %q exit %s err %v", i, r.stdout.String(), r.exitString(), r.err)
		}
	}
}

func TestStartBackgroundChildHoldingStdout(t *testing.T) {
	tg := sharedTarget(t)
	t0 := time.Now()
	s, err := tg.client.Start(ctxT(t, 60*time.Second), &pb.StartRequest{Config: argv("sleep 11 & echo started")})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(s)
	if r.stdout.String() != "started\n" || r.exit == nil || *r.exit != 0 || r.err != nil {
		t.Fatalf("stdout %q exit %s err %v", r.stdout.String(), r.exitString(), r.err)
	}
	if took := time.Since(t0); took > 9*time.Second {
		t.Errorf("the stream took %v: it waited for the background child", took)
	}
}

func TestWriteStdinTooLargeMessage(t *testing.T) {
	tg := sharedTarget(t)
	ctx := ctxT(t, 30*time.Second)
	s, id := startInit(t, ctx, tg.client, &pb.StartRequest{Config: argv("cat >/dev/null")})
	_, err := tg.client.WriteStdin(ctx, &pb.WriteStdinRequest{ProcessId: id, Payload: &pb.WriteStdinRequest_Input{Input: make([]byte, 5<<20)}})
	wantCode(t, err, codes.ResourceExhausted)
	// 3 MiB fits a message and is fed through the 1 MiB stdin queue.
	if _, err := tg.client.WriteStdin(ctx, &pb.WriteStdinRequest{ProcessId: id, Payload: &pb.WriteStdinRequest_Input{Input: make([]byte, 3<<20)}}); err != nil {
		t.Fatal(err)
	}
	tg.client.WriteStdin(ctx, &pb.WriteStdinRequest{ProcessId: id, Payload: &pb.WriteStdinRequest_Eof{Eof: &emptypb.Empty{}}})
	if r := collect(s); r.exit == nil || *r.exit != 0 {
		t.Fatalf("exit %s err %v", r.exitString(), r.err)
	}
}

func TestReflection(t *testing.T) {
	tg := sharedTarget(t)
	ctx := ctxT(t, 30*time.Second)
	v1, err := rpb.NewServerReflectionClient(tg.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := v1.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := v1.Recv()
	if err != nil {
		t.Fatalf("reflection v1: %v", err)
	}
	if !strings.Contains(resp.String(), "process.v1.ProcessService") {
		t.Fatalf("reflection v1 lists %v", resp)
	}
	alpha, err := rpbalpha.NewServerReflectionClient(tg.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := alpha.Send(&rpbalpha.ServerReflectionRequest{MessageRequest: &rpbalpha.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	aresp, err := alpha.Recv()
	if err != nil {
		t.Fatalf("reflection v1alpha: %v", err)
	}
	if !strings.Contains(aresp.String(), "process.v1.ProcessService") {
		t.Fatalf("reflection v1alpha lists %v", aresp)
	}
}

// v1 is a GET of our v1 API on d.
func v1(t *testing.T, d *daemontest.Daemon, path string, out any) {
	t.Helper()
	resp, err := http.Get(d.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %s", path, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

// TestStartIsAManagedCommand: a Started process is in GET /v1/commands while
// it runs, with the timeout cap (not the 60 s default); an Execute is not.
func TestStartIsAManagedCommand(t *testing.T) {
	ours(t)
	tg := sharedTarget(t)
	ctx, cancel := context.WithCancel(context.Background()) // no deadline: the timeout is the cap
	defer cancel()
	s, id := startInit(t, ctx, tg.client, &pb.StartRequest{Config: argv("sleep 30")})
	hdr, err := s.Header()
	if err != nil {
		t.Fatal(err)
	}
	cid := hdr.Get("sandbox-command-id")
	if len(cid) != 1 {
		t.Fatalf("header %v names no command id", hdr)
	}
	var st struct {
		State          string  `json:"state"`
		TimeoutSeconds float64 `json:"timeout_seconds"`
	}
	v1(t, tg.d, "/v1/commands/"+cid[0], &st)
	if st.State != "running" || st.TimeoutSeconds != 300 {
		t.Fatalf("v1 status %+v, want running with the 300 s cap", st)
	}
	var list struct {
		Commands []struct {
			CommandID string `json:"command_id"`
		} `json:"commands"`
	}
	v1(t, tg.d, "/v1/commands?state=running", &list) // what `sandbox-runtime ps` shows
	listed := false
	for _, c := range list.Commands {
		listed = listed || c.CommandID == cid[0]
	}
	if !listed {
		t.Errorf("GET /v1/commands?state=running lacks the Started command %s: %+v", cid[0], list.Commands)
	}
	var info struct {
		Features []string `json:"features"`
	}
	v1(t, tg.d, "/v1/info", &info)
	if !strings.Contains(strings.Join(info.Features, ","), "sandboxd_grpc") {
		t.Errorf("/v1/info features %v lack sandboxd_grpc", info.Features)
	}
	tg.client.SendSignal(ctx, &pb.SendSignalRequest{ProcessId: id, Signal: pb.Signal_SIGNAL_SIGKILL})
	r := collect(s)
	if r.exit == nil || *r.exit != -9 || r.trailer.Get("sandbox-state")[0] != "exited" || r.trailer.Get("sandbox-signal")[0] != "SIGKILL" {
		t.Fatalf("exit %s trailer %v err %v", r.exitString(), r.trailer, r.err)
	}
}

// TestStartDeadlineIsTheTimeout: a Start call's deadline becomes the
// command's timeout (the v1 status shows it).
func TestStartDeadlineIsTheTimeout(t *testing.T) {
	ours(t)
	tg := sharedTarget(t)
	ctx := ctxT(t, 20*time.Second)
	s, _ := startInit(t, ctx, tg.client, &pb.StartRequest{Config: argv("sleep 30")})
	hdr, _ := s.Header()
	var st struct {
		TimeoutSeconds float64 `json:"timeout_seconds"`
	}
	v1(t, tg.d, "/v1/commands/"+hdr.Get("sandbox-command-id")[0], &st)
	if st.TimeoutSeconds > 20 || st.TimeoutSeconds < 15 {
		t.Fatalf("timeout %v s, want the call's 20 s deadline", st.TimeoutSeconds)
	}
}

// TestRunningLimitIsResourceExhausted: Start counts against the running
// limit, and the refusal says what the v1 429 says; Execute does not.
func TestRunningLimitIsResourceExhausted(t *testing.T) {
	ours(t)
	tg := start(t, "SANDBOX_MAX_RUNNING=2", "SANDBOX_MAX_RETAINED=4")
	defer tg.d.Stop()
	ctx := ctxT(t, 30*time.Second)
	for range 2 {
		startInit(t, ctx, tg.client, &pb.StartRequest{Config: argv("sleep 30")})
	}
	s, err := tg.client.Start(ctx, &pb.StartRequest{Config: argv("true")})
	if err == nil {
		_, err = s.Recv()
	}
	wantCode(t, err, codes.ResourceExhausted)
	if want := "2 managed commands are running (limit 2)"; status.Convert(err).Message() != want {
		t.Errorf("message %q, want the v1 429's %q", status.Convert(err).Message(), want)
	}
	res, err := tg.client.Execute(ctx, &pb.ExecuteRequest{Config: argv("echo still")})
	if err != nil || string(res.Stdout) != "still\n" {
		t.Fatalf("Execute at the running limit: %v %v", res, err)
	}
}

// TestExecuteIsNoHandle: a loop of Executes evicts no v1 handle.
func TestExecuteIsNoHandle(t *testing.T) {
	ours(t)
	tg := start(t, "SANDBOX_MAX_RUNNING=2", "SANDBOX_MAX_RETAINED=2")
	defer tg.d.Stop()
	resp, err := http.Post(tg.d.URL+"/v1/commands", "application/json", strings.NewReader(`{"argv":["true"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		CommandID string `json:"command_id"`
	}
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	for range 5 {
		if _, err := tg.client.Execute(ctxT(t, 30*time.Second), &pb.ExecuteRequest{Config: argv("true")}); err != nil {
			t.Fatal(err)
		}
	}
	var list struct {
		Commands []json.RawMessage `json:"commands"`
	}
	v1(t, tg.d, "/v1/commands", &list)
	v1(t, tg.d, "/v1/commands/"+st.CommandID, &struct{}{})
	if len(list.Commands) != 1 {
		t.Fatalf("%d handles after 5 Executes, want the one v1 handle", len(list.Commands))
	}
}

// TestStartReaderBehindTheRingLearnsOfTheLoss: a reader that does not read
// while more than the ring's bytes are written gets what is retained, the
// real ExitEvent, and then DATA_LOSS with the count in the trailer.
func TestStartReaderBehindTheRingLearnsOfTheLoss(t *testing.T) {
	ours(t)
	tg := start(t, "SANDBOX_OUTPUT_LIMIT_BYTES=65536")
	defer tg.d.Stop()
	ctx := ctxT(t, 60*time.Second)
	const n = 16 << 20
	s, _ := startInit(t, ctx, tg.client, &pb.StartRequest{Config: argv(fmt.Sprintf("head -c %d /dev/zero; echo end >&2", n))})
	hdr, _ := s.Header()
	id := hdr.Get("sandbox-command-id")[0]
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var st struct {
			State string `json:"state"`
		}
		v1(t, tg.d, "/v1/commands/"+id, &st)
		if st.State != "running" {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the writer did not finish while the reader stood still")
		}
	}
	r := collect(s)
	if r.exit == nil || *r.exit != 0 {
		t.Fatalf("exit %s err %v", r.exitString(), r.err)
	}
	wantCode(t, r.err, codes.DataLoss)
	lost, _ := strconv.Atoi(strings.Join(r.trailer.Get("sandbox-output-lost-bytes"), ""))
	if got := int(r.stdout.Len()) + r.stderr.Len() + lost; lost == 0 || got != n+4 {
		t.Fatalf("received %d + %d, lost %d: want a loss, and all three to add up to %d", r.stdout.Len(), r.stderr.Len(), lost, n+4)
	}
}

// TestAuthBeyondLoopback: on a non-loopback listener every call needs the
// token.
func TestAuthBeyondLoopback(t *testing.T) {
	ours(t)
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tg := start(t, "SANDBOXD_GRPC_ADDR=0.0.0.0:0", "SANDBOX_RUNTIME_TOKEN_FILE="+tok)
	defer tg.d.Stop()
	ctx := ctxT(t, 30*time.Second)
	_, err := tg.client.Execute(ctx, &pb.ExecuteRequest{Config: argv("true")})
	wantCode(t, err, codes.Unauthenticated)
	bad := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer wrong")
	_, err = tg.client.Execute(bad, &pb.ExecuteRequest{Config: argv("true")})
	wantCode(t, err, codes.Unauthenticated)
	good := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")
	if _, err := tg.client.Execute(good, &pb.ExecuteRequest{Config: argv("true")}); err != nil {
		t.Fatal(err)
	}
	s, err := tg.client.Start(ctx, &pb.StartRequest{Config: argv("true")})
	if err == nil {
		_, err = s.Recv()
	}
	wantCode(t, err, codes.Unauthenticated)
}

// TestShutdownEndsStreamsAndRefuses: SIGTERM ends a Start stream with its
// ExitEvent (state terminated) and the daemon exits 0; calls during the
// shutdown are UNAVAILABLE.
func TestShutdownEndsStreamsAndRefuses(t *testing.T) {
	ours(t)
	tg := start(t, "SANDBOX_KILL_GRACE_SECONDS=1")
	ctx := ctxT(t, 60*time.Second)
	s, _ := startInit(t, ctx, tg.client, &pb.StartRequest{Config: argv("trap 'sleep 0.5; exit 7' TERM; echo ready; while :; do sleep 0.1; done")})
	var out bytes.Buffer
	readUntil(t, s, &out, "ready")
	if err := tg.d.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// While the trap runs, the daemon is shutting down: new calls are refused.
	for end := time.Now().Add(10 * time.Second); ; {
		_, err := tg.client.Execute(ctx, &pb.ExecuteRequest{Config: argv("true")})
		if status.Code(err) == codes.Unavailable {
			break
		}
		if err != nil || time.Now().After(end) {
			t.Fatalf("Execute during the shutdown: %v, want UNAVAILABLE", err)
		}
	}
	r := collect(s)
	if r.exit == nil || r.trailer.Get("sandbox-state")[0] != "terminated" {
		t.Fatalf("exit %s trailer %v err %v", r.exitString(), r.trailer, r.err)
	}
	if code, ok := tg.d.Wait(30 * time.Second); !ok || code != 0 {
		t.Fatalf("the daemon exited %d (%v)", code, ok)
	}
}

// TestExecuteDeadlineKillsTheGroup: when an Execute's deadline passes (the
// SDK's timeout), the client gets DEADLINE_EXCEEDED and nothing the command
// started is left running.
func TestExecuteDeadlineKillsTheGroup(t *testing.T) {
	tg := sharedTarget(t)
	pidfile := filepath.Join(tg.root, fmt.Sprintf("execute-deadline-%d.pid", time.Now().UnixNano()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := tg.client.Execute(ctx, &pb.ExecuteRequest{Config: argv(fmt.Sprintf("sleep 60 & echo $! > %s; sleep 60", pidfile))})
	wantCode(t, err, codes.DeadlineExceeded)
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q", b)
	}
	if !gone(pid, 10*time.Second) {
		t.Fatalf("the background child %d outlived the Execute's deadline", pid)
	}
}

// TestStartDeadlineKillsTheGroup: the same for a Start stream's deadline.
func TestStartDeadlineKillsTheGroup(t *testing.T) {
	tg := sharedTarget(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s, _ := startInit(t, ctx, tg.client, &pb.StartRequest{Config: argv("sleep 60 & echo $!; sleep 60")})
	child := childPID(t, s)
	r := collect(s)
	if r.exit == nil {
		wantCode(t, r.err, codes.DeadlineExceeded)
	}
	if !gone(child, 10*time.Second) {
		t.Fatalf("the background child %d outlived the stream's deadline", child)
	}
}

// TestExecuteCaptureBoundIsSaid: output past the capture bound is cut, and
// the trailers say how much.
func TestExecuteCaptureBoundIsSaid(t *testing.T) {
	ours(t)
	tg := start(t, "SANDBOX_EXECUTE_OUTPUT_LIMIT_BYTES=1000")
	defer tg.d.Stop()
	var tr metadata.MD
	res, err := tg.client.Execute(ctxT(t, 30*time.Second), &pb.ExecuteRequest{Config: argv("head -c 5000 /dev/zero; head -c 1500 /dev/zero >&2")}, grpc.Trailer(&tr))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 1000 || len(res.Stderr) != 1000 || res.ExitCode != 0 {
		t.Fatalf("%d bytes of stdout, %d of stderr, exit %d", len(res.Stdout), len(res.Stderr), res.ExitCode)
	}
	if got := tr.Get("sandbox-stdout-dropped-bytes"); len(got) != 1 || got[0] != "4000" {
		t.Errorf("stdout dropped %v, want 4000 (trailer %v)", got, tr)
	}
	if got := tr.Get("sandbox-stderr-dropped-bytes"); len(got) != 1 || got[0] != "500" {
		t.Errorf("stderr dropped %v, want 500 (trailer %v)", got, tr)
	}
}
