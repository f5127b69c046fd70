// Package process serves upstream sandboxd's gRPC process.v1.ProcessService
// (sandboxd/processv1) on the runtime's one command table: Start is a managed
// command (it counts against the running limit, is listed by GET
// /v1/commands and `sandbox-runtime ps`, keeps its output in its ring and is
// killed as a group at shutdown), Execute a one-shot execution like legacy
// /execute (no handle). docs/protocol.md "sandboxd" is the contract, and
// docs/sandboxd.md the comparison with upstream.
package process

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/ringbuf"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	pb "github.com/sandbox-runtime/sandbox-runtime/sandboxd/processv1"
)

// Limits of the gRPC surface (docs/protocol.md "sandboxd").
const (
	// MaxRecvMsgSize bounds one request message: upstream's (grpc-go's)
	// default, 4 MiB. A larger WriteStdin is RESOURCE_EXHAUSTED.
	MaxRecvMsgSize = 4 << 20
	// MaxConcurrentStreams bounds the calls in flight on one connection.
	MaxConcurrentStreams = 256
	// MaxConnectionIdle closes a connection with no call in flight for
	// that long (the HTTP listeners' IdleTimeout), so that idle ones do
	// not wait for the connection cap to close them.
	MaxConnectionIdle = 2 * time.Minute
	// chunkBytes is the most stdout/stderr bytes one StartResponse carries.
	chunkBytes = 32 << 10
	// keepaliveMinTime is the shortest client ping interval allowed; a client
	// pinging more often is sent GOAWAY (ENHANCE_YOUR_CALM).
	keepaliveMinTime = 10 * time.Second
)

// Trailer and header keys the daemon adds (upstream's messages have no field
// for them). Every key is lower case, as gRPC metadata is.
const (
	// HeaderCommandID (Start's header) is the command's id in the v1 API.
	HeaderCommandID = "sandbox-command-id"
	// TrailerState (Start, Execute) is the final state: exited, timed_out,
	// terminated, cancelled (the v1 states).
	TrailerState = "sandbox-state"
	// TrailerSignal names the signal that ended the process (SIGKILL, …).
	TrailerSignal = "sandbox-signal"
	// TrailerOutputLost (Start) is how many bytes of output the stream
	// skipped because its reader fell behind the ring; the stream then ends
	// with DATA_LOSS after its ExitEvent.
	TrailerOutputLost = "sandbox-output-lost-bytes"
	// TrailerStdoutDropped and TrailerStderrDropped (Execute) are the bytes
	// past the capture bound that were read and discarded.
	TrailerStdoutDropped = "sandbox-stdout-dropped-bytes"
	TrailerStderrDropped = "sandbox-stderr-dropped-bytes"
	// TrailerPipesHeld (Execute) is "true" when a background member still
	// held stdout or stderr open after the leader's exit and the pipe grace.
	TrailerPipesHeld = "sandbox-pipes-held"
)

// Options configures a Server.
type Options struct {
	// BaseDir is the sandbox root: cwd is resolved inside it.
	BaseDir string
	// Token, when set, is asked for the bearer token every call must carry
	// in its "authorization" metadata; nil means no authentication (only
	// for a loopback listener: see RequireToken in cmd/sandbox-runtime).
	Token func() ([]byte, error)
	// Logger; nil means none.
	Logger *zap.Logger
}

// Server is the ProcessService on a runtime.Manager.
type Server struct {
	pb.UnimplementedProcessServiceServer
	m    *runtime.Manager
	opts Options
	log  *zap.Logger
	gs   *grpc.Server

	mu    sync.Mutex
	next  int32 // the last process_id given out
	procs map[int32]*runtime.Command
}

// New returns a Server for m; Serve starts it.
func New(m *runtime.Manager, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	s := &Server{m: m, opts: opts, log: opts.Logger.Named("sandboxd"), procs: map[int32]*runtime.Command{}}
	s.gs = grpc.NewServer(
		grpc.MaxRecvMsgSize(MaxRecvMsgSize),
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second, MaxConnectionIdle: MaxConnectionIdle}),
		grpc.ConnectionTimeout(10*time.Second),
		grpc.UnaryInterceptor(s.unary),
		grpc.StreamInterceptor(s.stream),
	)
	pb.RegisterProcessServiceServer(s.gs, s)
	reflection.Register(s.gs) // v1 and v1alpha, for grpcurl
	return s
}

// Serve serves on ln until Stop or GracefulStop.
func (s *Server) Serve(ln net.Listener) error {
	err := s.gs.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Shutdown waits for the calls in flight (the runtime's Shutdown has ended
// every Start stream's process by then) until ctx is done, then closes every
// connection.
func (s *Server) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.gs.GracefulStop(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.gs.Stop()
		<-done
		return ctx.Err()
	}
}

// Running is how many Start streams hold a process id.
func (s *Server) Running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.procs)
}

func (s *Server) admit(ctx context.Context) error {
	select {
	case <-s.m.ShuttingDown():
		return status.Error(codes.Unavailable, "the runtime is shutting down")
	default:
	}
	if s.opts.Token == nil {
		// No token: only a loopback :authority, as the REST listener's Host
		// (httpx.LoopbackHost; browsers cannot speak gRPC, the rule is kept
		// the same for both listeners).
		md, _ := metadata.FromIncomingContext(ctx)
		auth := md.Get(":authority")
		if len(auth) != 1 || !httpx.LoopbackHost(auth[0]) {
			return status.Errorf(codes.PermissionDenied, "this listener asks no token, so it serves only the :authority 127.0.0.1, [::1] or localhost (with any port), not %q", strings.Join(auth, ","))
		}
		return nil
	}
	want, err := s.opts.Token()
	if err != nil || len(want) == 0 {
		return status.Error(codes.Unauthenticated, "the daemon's token file is unusable: every call is refused until it is fixed")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		scheme, tok, ok := strings.Cut(strings.TrimSpace(v), " ")
		if ok && strings.EqualFold(scheme, "Bearer") && constantTimeEqual([]byte(strings.TrimSpace(tok)), want) {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "missing or wrong bearer token (metadata authorization: Bearer <token>)")
}

func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.admit(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}

// register gives c the next process id. Ids count up from 1 and are never
// given twice in a daemon's life (at 2^31-1 the table refuses new Starts);
// they name the command, never an OS pid, so a reused pid cannot reach
// another command.
func (s *Server) register(c *runtime.Command) (int32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next == math.MaxInt32 {
		return 0, status.Error(codes.ResourceExhausted, "every process_id (1 to 2^31-1) was given out; restart the daemon")
	}
	s.next++
	s.procs[s.next] = c
	return s.next, nil
}

func (s *Server) forget(id int32) {
	s.mu.Lock()
	delete(s.procs, id)
	s.mu.Unlock()
}

func (s *Server) lookup(id int32) (*runtime.Command, error) {
	s.mu.Lock()
	c, ok := s.procs[id]
	s.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "process %d not found (ids live as long as their Start stream)", id)
	}
	return c, nil
}

// resolveCwd maps a ProcessConfig cwd into the sandbox root as upstream
// does: "" is the root; a relative path is joined to it; an absolute path
// inside the root is taken as is and any other absolute path is re-rooted
// ("/etc" is <root>/etc). After symlinks the directory must still be inside
// the root (PERMISSION_DENIED) and exist (NOT_FOUND).
func (s *Server) resolveCwd(cwd string) (string, error) {
	root, err := filepath.EvalSymlinks(s.opts.BaseDir)
	if err != nil {
		return "", status.Errorf(codes.Internal, "the sandbox root %s is unusable: %v", s.opts.BaseDir, err)
	}
	if strings.IndexByte(cwd, 0) >= 0 {
		return "", status.Error(codes.InvalidArgument, "cwd contains a NUL byte")
	}
	rel := filepath.Clean(cwd)
	if cwd == "" {
		rel = "."
	}
	if filepath.IsAbs(rel) {
		for _, r := range []string{filepath.Clean(s.opts.BaseDir), root} {
			if rel == r {
				rel = "."
				break
			}
			if after, ok := strings.CutPrefix(rel, r+string(filepath.Separator)); ok {
				rel = after
				break
			}
		}
	}
	joined := filepath.Join(root, rel) // an absolute rel is re-rooted; ".." may climb out
	if !within(root, joined) {
		return "", status.Errorf(codes.PermissionDenied, "cwd %q is outside the sandbox root %s", cwd, s.opts.BaseDir)
	}
	real, err := filepath.EvalSymlinks(joined)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", status.Errorf(codes.NotFound, "cwd %q: no such directory in the sandbox root", cwd)
		}
		return "", status.Errorf(codes.InvalidArgument, "cwd %q: %v", cwd, err)
	}
	if !within(root, real) {
		return "", status.Errorf(codes.PermissionDenied, "cwd %q leads outside the sandbox root %s", cwd, s.opts.BaseDir)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return "", status.Errorf(codes.InvalidArgument, "cwd %q is not a directory", cwd)
	}
	return real, nil
}

func within(root, p string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

// timeout is the command's timeout: the call's deadline when it has one
// (capped by the runtime's maximum), else the maximum
// (SANDBOX_EXEC_TIMEOUT_SECONDS). StartRequest and ExecuteRequest have no
// timeout field, and the v1 default (60 s) would kill a Started shell.
func (s *Server) timeout(ctx context.Context) time.Duration {
	max := s.m.Config().MaxTimeout
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left > 0 && left < max {
			return left
		}
	}
	return max
}

func (s *Server) config(c *pb.ProcessConfig) ([]string, map[string]string, string, error) {
	if c == nil || len(c.GetCommand()) == 0 {
		return nil, nil, "", status.Error(codes.InvalidArgument, "config.command is required (the argv, e.g. [\"/bin/sh\", \"-c\", \"echo hi\"])")
	}
	cwd, err := s.resolveCwd(c.GetCwd())
	if err != nil {
		return nil, nil, "", err
	}
	return c.GetCommand(), c.GetEnvVars(), cwd, nil
}

// createRequest is the managed command req asks for: its config, the
// call's timeout, stdin, and the terminal (a size of 0 is 80 columns or 24
// rows).
func (s *Server) createRequest(ctx context.Context, req *pb.StartRequest) (runtime.CreateRequest, error) {
	argv, envs, cwd, err := s.config(req.GetConfig())
	if err != nil {
		return runtime.CreateRequest{}, err
	}
	secs := s.timeout(ctx).Seconds()
	cr := runtime.CreateRequest{Argv: argv, Envs: envs, Cwd: cwd, Timeout: &secs, Stdin: true}
	if p := req.Pty; p != nil {
		cols, rows := int(p.GetCols()), int(p.GetRows())
		if cols == 0 {
			cols = 80
		}
		if rows == 0 {
			rows = 24
		}
		cr.PTY = &runtime.PTYRequest{Cols: cols, Rows: rows}
	}
	return cr, nil
}

// sendOutput sends c's output from the start as stdout/stderr events until
// the ring is done, and returns how many bytes the ring dropped before they
// were read. A failed send or the end of ctx kills the group (nobody can
// reach the process again) and is the error.
func sendOutput(ctx context.Context, c *runtime.Command, stream grpc.ServerStreamingServer[pb.StartResponse]) (int64, error) {
	var (
		cursor int64
		lost   int64
		buf    []byte
		recs   []ringbuf.Record
	)
	for {
		wake := c.Notify()
		res, err := c.Read(cursor, chunkBytes, buf[:0], recs[:0])
		if err != nil {
			killQuietly(c)
			return 0, status.Errorf(codes.Internal, "reading output: %v", err)
		}
		buf, recs = res.Buf, res.Records
		if res.Gap {
			lost += res.GapFrom - cursor
		}
		for _, r := range res.Records {
			ev := &pb.StartResponse{Event: &pb.StartResponse_Stdout{Stdout: r.Data}}
			if r.Stream == ringbuf.Stderr {
				ev = &pb.StartResponse{Event: &pb.StartResponse_Stderr{Stderr: r.Data}}
			}
			if err := stream.Send(ev); err != nil {
				killQuietly(c) // the client is gone: nobody can reach the process again
				return 0, err
			}
		}
		cursor = res.Next
		if res.Done {
			break
		}
		if len(res.Records) > 0 {
			continue
		}
		select {
		case <-wake:
		case <-ctx.Done():
			// A cancelled stream kills the group: its process_id dies with
			// the stream, so no sandboxd client could signal or feed it again.
			killQuietly(c)
			return 0, status.FromContextError(ctx.Err()).Err()
		}
	}
	return lost, nil
}

// Start runs the command as a managed command and streams its output.
func (s *Server) Start(req *pb.StartRequest, stream grpc.ServerStreamingServer[pb.StartResponse]) error {
	ctx := stream.Context()
	cr, err := s.createRequest(ctx, req)
	if err != nil {
		return err
	}
	st, _, err := s.m.Create(cr)
	if err != nil {
		return toStatus(err)
	}
	c, err := s.m.Get(st.CommandID)
	if err != nil {
		return toStatus(err)
	}
	id, err := s.register(c)
	if err != nil {
		killQuietly(c)
		return err
	}
	defer s.forget(id)
	_ = stream.SendHeader(metadata.Pairs(HeaderCommandID, c.ID()))
	if err := stream.Send(&pb.StartResponse{Event: &pb.StartResponse_Init{Init: &pb.InitEvent{ProcessId: id}}}); err != nil {
		killQuietly(c)
		return err
	}
	lost, err := sendOutput(ctx, c, stream)
	if err != nil {
		return err
	}
	<-c.Done()
	fin := c.Status()
	code, tr := outcome(fin)
	if lost > 0 {
		tr.Set(TrailerOutputLost, strconv.FormatInt(lost, 10))
	}
	stream.SetTrailer(tr)
	if err := stream.Send(&pb.StartResponse{Event: &pb.StartResponse_Exit{Exit: &pb.ExitEvent{ExitCode: code}}}); err != nil {
		return err
	}
	if lost > 0 {
		return status.Errorf(codes.DataLoss, "%d bytes of output were lost: the reader fell behind the command's %d-byte ring (SANDBOX_OUTPUT_LIMIT_BYTES); the ExitEvent above is the real one",
			lost, s.m.Config().OutputLimit)
	}
	return nil
}

// outcome is the exit code and trailer of a finished command: the exit code,
// or -N for a death by signal N (as legacy /execute and Python's
// returncode say it; upstream says -1 for every signal).
func outcome(st runtime.Status) (int32, metadata.MD) {
	tr := metadata.Pairs(TrailerState, string(st.State))
	code := int32(-1)
	if st.ExitCode != nil {
		code = int32(*st.ExitCode)
	}
	if st.Signal != nil {
		tr.Set(TrailerSignal, *st.Signal)
	}
	return code, tr
}

func killQuietly(c *runtime.Command) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = c.Kill(ctx)
}

// Execute runs the command once and answers its whole output, each stream
// captured up to SANDBOX_EXECUTE_OUTPUT_LIMIT_BYTES; what was cut is said
// in the trailer.
func (s *Server) Execute(ctx context.Context, req *pb.ExecuteRequest) (*pb.ExecuteResponse, error) {
	argv, envs, cwd, err := s.config(req.GetConfig())
	if err != nil {
		return nil, err
	}
	res, err := s.m.ExecuteRequest(ctx, runtime.ExecRequest{Argv: argv, Envs: envs, Cwd: cwd, Timeout: s.timeout(ctx)})
	if err != nil {
		return nil, toStatus(err)
	}
	defer res.Release()
	switch {
	case res.Cancelled:
		return nil, status.FromContextError(ctx.Err()).Err()
	case res.Terminated:
		return nil, status.Error(codes.Unavailable, "the runtime shut down while the command ran; it was terminated")
	case res.TimedOut:
		return nil, status.Errorf(codes.DeadlineExceeded, "the command ran past the %s cap (SANDBOX_EXEC_TIMEOUT_SECONDS) and was killed", s.m.Config().MaxTimeout)
	}
	tr := metadata.Pairs(TrailerState, "exited")
	if res.ExitCode < 0 {
		tr.Set(TrailerSignal, runtime.SignalName(syscall.Signal(-res.ExitCode)))
	}
	if res.StdoutDropped > 0 {
		tr.Set(TrailerStdoutDropped, strconv.FormatInt(res.StdoutDropped, 10))
	}
	if res.StderrDropped > 0 {
		tr.Set(TrailerStderrDropped, strconv.FormatInt(res.StderrDropped, 10))
	}
	if res.Held {
		tr.Set(TrailerPipesHeld, "true")
	}
	_ = grpc.SetTrailer(ctx, tr)
	return &pb.ExecuteResponse{ExitCode: int32(res.ExitCode), Stdout: res.Stdout.Bytes(), Stderr: res.Stderr.Bytes()}, nil
}

// WriteStdin queues input (waiting while the stdin queue is full) or EOF.
func (s *Server) WriteStdin(ctx context.Context, req *pb.WriteStdinRequest) (*pb.WriteStdinResponse, error) {
	c, err := s.lookup(req.GetProcessId())
	if err != nil {
		return nil, err
	}
	switch p := req.GetPayload().(type) {
	case *pb.WriteStdinRequest_Eof:
		if _, _, err := c.WriteStdin(nil, true); err != nil {
			return nil, toStatus(err)
		}
	case *pb.WriteStdinRequest_Input:
		limit := max(s.m.Config().StdinLimit/2, 1)
		for data := p.Input; len(data) > 0; {
			n := min(len(data), limit)
			if _, _, err := c.WriteStdinWait(ctx.Done(), data[:n], false); err != nil {
				if ctx.Err() != nil {
					return nil, status.FromContextError(ctx.Err()).Err()
				}
				return nil, toStatus(err)
			}
			data = data[n:]
		}
	default:
		return nil, status.Error(codes.InvalidArgument, "give input bytes or eof")
	}
	return &pb.WriteStdinResponse{}, nil
}

// SendSignal sends SIGINT, SIGTERM or SIGKILL to the process's group.
func (s *Server) SendSignal(ctx context.Context, req *pb.SendSignalRequest) (*pb.SendSignalResponse, error) {
	var sig syscall.Signal
	switch req.GetSignal() {
	case pb.Signal_SIGNAL_SIGINT:
		sig = syscall.SIGINT
	case pb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	case pb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	default:
		return nil, status.Errorf(codes.InvalidArgument, "signal %v is not one of SIGNAL_SIGINT, SIGNAL_SIGTERM, SIGNAL_SIGKILL", req.GetSignal())
	}
	c, err := s.lookup(req.GetProcessId())
	if err != nil {
		return nil, err
	}
	if _, err := c.Signal(sig); err != nil {
		return nil, toStatus(err)
	}
	return &pb.SendSignalResponse{}, nil
}

// ResizeTTY sets the size of the process's terminal.
func (s *Server) ResizeTTY(ctx context.Context, req *pb.ResizeTTYRequest) (*pb.ResizeTTYResponse, error) {
	c, err := s.lookup(req.GetProcessId())
	if err != nil {
		return nil, err
	}
	if !c.IsTerminal() {
		return nil, status.Errorf(codes.FailedPrecondition, "process %d was started without a pty", req.GetProcessId())
	}
	if _, err := c.Resize(int(req.GetCols()), int(req.GetRows())); err != nil {
		return nil, toStatus(err)
	}
	return &pb.ResizeTTYResponse{}, nil
}

// toStatus maps a runtime error to its gRPC status, with the message the v1
// API answers (its 429 and 503 say the same words).
func toStatus(err error) error {
	if _, ok := status.FromError(err); ok {
		return err // already a status
	}
	msg := err.Error()
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.Is(err, runtime.ErrShuttingDown):
		return status.Error(codes.Unavailable, msg)
	case errors.Is(err, runtime.ErrTooManyRunning), errors.Is(err, runtime.ErrResourceExhausted), errors.Is(err, runtime.ErrStdinFull),
		errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return status.Error(codes.ResourceExhausted, msg)
	case errors.Is(err, runtime.ErrInvalid):
		return status.Error(codes.InvalidArgument, msg)
	case errors.Is(err, runtime.ErrNotFound), errors.Is(err, runtime.ErrGone):
		return status.Error(codes.NotFound, msg)
	case errors.Is(err, runtime.ErrFinished), errors.Is(err, runtime.ErrStdinClosed),
		errors.Is(err, runtime.ErrStdinNotEnabled), errors.Is(err, runtime.ErrNotTerminal):
		return status.Error(codes.FailedPrecondition, msg)
	case errors.Is(err, runtime.ErrSpawnFailed):
		f, _ := runtime.StartFailureOf(err)
		switch f.Class {
		case runtime.SpawnNotFound:
			return status.Error(codes.NotFound, msg)
		case runtime.SpawnPermission:
			return status.Error(codes.PermissionDenied, msg)
		default:
			return status.Error(codes.InvalidArgument, msg)
		}
	}
	return status.Error(codes.Internal, fmt.Sprintf("internal error: %v", err))
}

func constantTimeEqual(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	var v byte
	for i := range a {
		v |= a[i] ^ b[i]
	}
	return v == 0
}
