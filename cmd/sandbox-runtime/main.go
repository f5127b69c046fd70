//go:build linux

// Command sandbox-runtime is the daemon that runs inside every agent sandbox
// pod and executes commands for the clients behind the identity broker
// (docs/protocol.md). It serves the v1 API, the legacy API, files, health and
// metrics on one port, reaps every child as PID 1 or as a child subreaper,
// and shuts down gracefully on SIGTERM/SIGINT. Every other signal is logged
// and otherwise ignored (signals.go).
//
// Configuration (flag, then environment variable, then default):
//
//	--addr                        SANDBOX_RUNTIME_ADDR                127.0.0.1:8888 (the images set :8888)
//	--base-dir                    SANDBOX_BASE_DIR                    /app, or the current directory without /app
//	--token-file                  SANDBOX_RUNTIME_TOKEN_FILE          none (no auth)
//	--max-running                 SANDBOX_MAX_RUNNING                 16
//	--max-retained                SANDBOX_MAX_RETAINED                64
//	--output-limit-bytes          SANDBOX_OUTPUT_LIMIT_BYTES          1048576
//	--execute-output-limit-bytes  SANDBOX_EXECUTE_OUTPUT_LIMIT_BYTES  8388608
//	--max-executions              SANDBOX_MAX_EXECUTIONS              8
//	--stdin-limit-bytes           SANDBOX_STDIN_LIMIT_BYTES           1048576
//	--result-ttl-seconds          SANDBOX_RESULT_TTL_SECONDS          900
//	--default-timeout-seconds     SANDBOX_DEFAULT_TIMEOUT_SECONDS     60
//	--exec-timeout-seconds        SANDBOX_EXEC_TIMEOUT_SECONDS        300
//	--kill-grace-seconds          SANDBOX_KILL_GRACE_SECONDS          2
//	--shutdown-timeout-seconds    SANDBOX_SHUTDOWN_TIMEOUT_SECONDS    25
//	--heartbeat-seconds           SANDBOX_HEARTBEAT_SECONDS           10
//	--allowed-origins             SANDBOX_ALLOWED_ORIGINS             none (only the daemon's own host)
//	--sandboxd-grpc-addr          SANDBOXD_GRPC_ADDR                  none (sandboxd's gRPC not served)
//	--sandboxd-rest-addr          SANDBOXD_REST_ADDR                  none (off)
//	--max-contexts                SANDBOX_MAX_CONTEXTS                8
//	--context-idle-seconds        SANDBOX_CONTEXT_IDLE_SECONDS        900
//	--context-memory-bytes        SANDBOX_CONTEXT_MEMORY_BYTES        4294967296
//	--context-spare               SANDBOX_CONTEXT_SPARE               false
//	--python                      SANDBOX_PYTHON                      python3 on the commands' PATH
//	--log-level                   SANDBOX_LOG_LEVEL                   info
//	--log-format                  SANDBOX_LOG_FORMAT                  console on a terminal, else json
//
// Every start-up failure (a bad value, the address in use, an unusable token
// file) exits 2 with one plain line on stderr, before anything is logged.
// Unknown SANDBOX_ variables are logged as warnings.
//
// Settings are read from the environment in this package only (loadConfig;
// the CLI's SANDBOX_RUNTIME_URL and SANDBOX_RUNTIME_TOKEN[_FILE] in package
// cli, from the getenv main hands it):
// no package the daemon links reads a SANDBOX_ variable. The daemon's own
// environment is handed to runtime.Config.Env here as the one commands start
// from; the only other read is procgroup's fallback to the daemon's PATH
// when a command's environment has no PATH of its own. (The test launcher
// internal/daemontest filters the environment it starts daemons with.)
// internal/deps/env_test.go keeps this true.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"

	"github.com/sandbox-runtime/sandbox-runtime/api"
	"github.com/sandbox-runtime/sandbox-runtime/cli"
	"github.com/sandbox-runtime/sandbox-runtime/fsroot"
	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/legacy"
	"github.com/sandbox-runtime/sandbox-runtime/metrics"
	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	sandboxdprocess "github.com/sandbox-runtime/sandbox-runtime/sandboxd/process"
	"github.com/sandbox-runtime/sandbox-runtime/sandboxd/rest"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// version is stamped at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	if len(os.Args) > 1 && cli.IsCommand(os.Args[1]) { // the client (package cli)
		os.Exit(cli.Run(os.Args[1:], cli.Env{Getenv: os.Getenv, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}))
	}
	// Before anything else: no descriptor the daemon inherited reaches
	// its commands.
	inherited := procgroup.MarkInheritedFDs()
	if cli.MisplacedFlags(os.Args[1:], os.Stderr) || suggestCLICommand(os.Args[1:], os.Stderr) {
		os.Exit(cli.ExitUsage)
	}
	cfg, err := loadConfig(os.Args[1:], os.Getenv, os.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		cli.PrintHelp(os.Stdout)
		os.Exit(0)
	}
	if err != nil {
		startupFailed(err)
	}
	if cfg.ShowVersion {
		fmt.Println("sandbox-runtime", version)
		return
	}
	// Bind before the first log line: an address in use is a configuration
	// problem, answered like the others (exit 2, one plain line).
	if cfg.listener, err = net.Listen("tcp", cfg.Addr); err != nil {
		startupFailed(fmt.Errorf("listen address %s (SANDBOX_RUNTIME_ADDR): %w", cfg.Addr, errors.Unwrap(err)))
	}
	if cfg.SandboxdGRPCAddr != "" {
		if cfg.grpcListener, err = net.Listen("tcp", cfg.SandboxdGRPCAddr); err != nil {
			startupFailed(fmt.Errorf("listen address %s (SANDBOXD_GRPC_ADDR): %w", cfg.SandboxdGRPCAddr, errors.Unwrap(err)))
		}
	}
	if cfg.SandboxdRESTAddr != "" {
		if cfg.restListener, err = net.Listen("tcp", cfg.SandboxdRESTAddr); err != nil {
			startupFailed(fmt.Errorf("listen address %s (SANDBOXD_REST_ADDR): %w", cfg.SandboxdRESTAddr, errors.Unwrap(err)))
		}
	}
	log, err := newLogger(cfg.LogLevel, logFormat(cfg.LogFormat, os.Stderr), os.Stderr)
	if err != nil {
		startupFailed(err)
	}
	if len(inherited) > 0 {
		log.Info("inherited descriptors marked close-on-exec: commands do not get them", zap.Ints("fds", inherited))
	}
	for _, w := range unknownEnv(os.Environ(), cfg.settings()) {
		log.Warn("unknown SANDBOX_ variable ignored", zap.String("variable", w.name), zap.String("did_you_mean", w.suggestion))
	}
	defer catchStraySignals(log)() // every other signal a command can send is logged, never fatal
	raiseFDLimit(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, stop, cfg, log, nil); err != nil {
		var se *startError
		if errors.As(err, &se) {
			log.Sync()
			startupFailed(se.err)
		}
		log.Error("exiting", zap.Error(err))
		log.Sync()
		os.Exit(1)
	}
	log.Sync()
}

// startupFailed ends the process before it served anything: one plain line
// on stderr, exit code 2 (as for a bad flag).
func startupFailed(err error) {
	fmt.Fprintln(os.Stderr, "sandbox-runtime:", strings.ReplaceAll(err.Error(), "\n", "; "))
	os.Exit(2)
}

// startError is a failure of run before it serves: main exits 2 on it.
type startError struct{ err error }

func (e *startError) Error() string { return e.err.Error() }
func (e *startError) Unwrap() error { return e.err }

// logFormat resolves the --log-format default: console when w is a
// terminal (a person is reading), JSON otherwise (a collector is).
func logFormat(format string, w *os.File) string {
	if format != "" {
		return format
	}
	if term.IsTerminal(int(w.Fd())) {
		return "console"
	}
	return "json"
}

func newLogger(level, format string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	encoder := zapcore.NewJSONEncoder(enc)
	if format == "console" {
		enc.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	}
	core := zapcore.NewCore(encoder, zapcore.Lock(zapcore.AddSync(w)), lvl)
	return zap.New(core), nil
}

// run serves until ctx is done, then shuts down within cfg.ShutdownTimeout:
// stop admitting (health 503), end every command (state terminated), let
// streams send their final line, close the listener. ready, when non-nil,
// receives the bound address.
// A second signal during shutdown is not caught (stopSignals restores the
// default action), so it ends the process at once.
//
// long: the daemon's start-up and shutdown in their order, each step a call.
func run(ctx context.Context, stopSignals func(), cfg *config, log *zap.Logger, ready chan<- net.Addr) error {
	started := time.Now()
	reaper, err := procgroup.NewReaper(log) // it names its logger "reaper", as runtime and api name theirs
	if err != nil {
		return &startError{fmt.Errorf("starting the reaper: %w", err)}
	}
	defer reaper.Close()
	iso := isolate(reaper, cfg, log)

	rc := cfg.runtimeConfig()
	rc.Logger = log
	met := metrics.New(version)
	rc.Observer = met
	m, err := runtime.New(rc, reaper)
	if err != nil {
		return &startError{err}
	}
	defer m.Close()
	met.Watch(m)
	m.Contexts().Prestart() // the spare code-context interpreter, when configured

	// The legacy API is mounted on the one server, behind its middleware.
	lh := legacy.New(m, legacy.Options{BaseDir: cfg.BaseDir, HeartbeatInterval: cfg.HeartbeatInterval, Logger: log})
	features := []string{legacy.Feature}
	var gsrv *sandboxdprocess.Server
	var gln net.Listener
	if cfg.SandboxdGRPCAddr != "" {
		if gln = cfg.grpcListener; gln == nil {
			if gln, err = net.Listen("tcp", cfg.SandboxdGRPCAddr); err != nil {
				return &startError{fmt.Errorf("listen address %s (SANDBOXD_GRPC_ADDR): %w", cfg.SandboxdGRPCAddr, err)}
			}
		}
		defer gln.Close()
		gopts := sandboxdprocess.Options{BaseDir: cfg.BaseDir, Logger: log}
		if tokenAsked(gln) {
			gopts.Token = cachedToken(cfg.TokenFile) // loadConfig refused this address without a token file
		}
		gsrv = sandboxdprocess.New(m, gopts)
		features = append(features, wire.FeatureSandboxdGRPC)
	}
	if cfg.SandboxdRESTAddr != "" {
		features = append(features, rest.Feature)
	}
	srv := api.New(m, api.Options{
		Version:           version,
		BaseDir:           cfg.BaseDir,
		TokenFile:         cfg.TokenFile,
		HeartbeatInterval: cfg.HeartbeatInterval,
		AllowedOrigins:    cfg.AllowedOrigins,
		Logger:            log,
		Metrics:           met,

		Isolation: iso,

		Routes:   lh.Routes(),
		Features: features,
		Refuse:   legacy.Refuse,
	})
	ln := cfg.listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			return &startError{fmt.Errorf("listen address %s (SANDBOX_RUNTIME_ADDR): %w", cfg.Addr, err)}
		}
	}
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
		BaseContext:       func(net.Listener) context.Context { return context.Background() },
		ConnContext:       api.ConnContext, // streams bound what the kernel queues for a slow reader
		ConnState:         srv.ConnState,   // open connections are capped well below the fd limit
	}
	grpcAddr := ""
	if gln != nil {
		grpcAddr = gln.Addr().String()
	}
	rs, rhs, err := sandboxdREST(cfg, srv, started, log)
	if err != nil {
		ln.Close()
		return &startError{err}
	}
	restAddr := ""
	if rhs != nil {
		restAddr = cfg.restListener.Addr().String()
	}
	// Both sandboxd addresses are always in the listening line ("" when
	// off): tests and tools read the ports bound to :0 from it.
	fields := []zap.Field{
		zap.String("addr", ln.Addr().String()),
		zap.String("sandboxd_grpc_addr", grpcAddr),
		zap.String("version", version),
		zap.String("base_dir", cfg.BaseDir),
		zap.Int("pid", os.Getpid()),
		zap.Bool("auth", cfg.TokenFile != ""),
		zap.String("sandboxd_rest_addr", restAddr)}
	log.Info("listening", fields...)
	warnIfExposed(log, ln.Addr(), cfg.TokenFile)
	if ready != nil {
		ready <- ln.Addr()
	}
	serveErr := make(chan error, 3) // one per server: none blocks once run returns
	// Every write on the HTTP listeners has a deadline (httpx.BoundWrites).
	go func() { serveErr <- hs.Serve(httpx.BoundWrites(ln)) }()
	if gsrv != nil {
		log.Info("serving sandboxd's gRPC ProcessService", zap.String("addr", grpcAddr), zap.Bool("auth", tokenAsked(gln)))
		go func() {
			if err := gsrv.Serve(srv.CountListener(gln)); err != nil { // one connection cap for every listener
				serveErr <- fmt.Errorf("sandboxd gRPC: %w", err)
			}
		}()
	}
	if rhs != nil {
		go func() { serveErr <- rhs.Serve(httpx.BoundWrites(cfg.restListener)) }()
	}
	cleaned := make(chan struct{})
	stopClean := make(chan struct{})
	go func() {
		defer close(cleaned)
		cleanTemps(cfg.BaseDir, started, stopClean, log)
	}()
	defer func() { close(stopClean); <-cleaned }()

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	if stopSignals != nil {
		stopSignals()
	}
	start := time.Now()
	log.Info("shutting down", zap.Duration("budget", cfg.ShutdownTimeout))
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	srv.SetDraining()
	if rs != nil {
		rs.SetDraining()
	}
	// End commands first, keeping a little of the budget for the HTTP side:
	// their streams then finish with the exit event.
	mctx, mcancel := context.WithTimeout(sctx, cfg.ShutdownTimeout*4/5)
	merr := m.Shutdown(mctx)
	mcancel()
	srv.EndStreams()
	rdone := make(chan error, 1)
	go func() {
		if rhs == nil {
			rdone <- nil
			return
		}
		err := rhs.Shutdown(sctx)
		if err != nil {
			rhs.Close()
		}
		rdone <- err
	}()
	var gerr error
	if gsrv != nil {
		gerr = gsrv.Shutdown(sctx) // every Start stream has sent its ExitEvent by now
	}
	herr := hs.Shutdown(sctx)
	if herr != nil {
		hs.Close()
	}
	herr = errors.Join(herr, <-rdone)
	// A command that outlived the budget (say, a process stuck in the
	// kernel) is logged; the shutdown itself still succeeded: exit 0.
	log.Info("stopped", zap.Duration("took", time.Since(start)), zap.NamedError("commands", merr), zap.NamedError("http", herr), zap.NamedError("grpc", gerr))
	return nil
}

// tokenAsked reports whether the sandboxd listener ln asks for the token (it
// does beyond loopback).
func tokenAsked(ln net.Listener) bool {
	tcp, ok := ln.Addr().(*net.TCPAddr)
	return !ok || !tcp.IP.IsLoopback()
}

// cachedToken returns the token of path as api.ReadTokenFile reads it, read
// again at most every 2 s (as the HTTP side re-reads it); a failed re-read
// keeps the last good token.
func cachedToken(path string) func() ([]byte, error) {
	var mu sync.Mutex
	var tok []byte
	var at time.Time
	return func() ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		if tok == nil || time.Since(at) >= 2*time.Second {
			t, err := api.ReadTokenFile(path)
			at = time.Now()
			if err != nil && tok == nil {
				return nil, err
			}
			if err == nil {
				tok = t
			}
		}
		return tok, nil
	}
}

// sandboxdREST makes sandboxd's REST server and its http.Server when
// cfg enables it (nil, nil otherwise), on cfg.restListener (bound here
// when main did not). It is rooted at the base dir, behind the api
// server's bounds (api.Server.Guard; its connections count against the
// same cap); on an address that is not loopback every request needs the
// token (the auth rule of docs/sandboxd-rest.md).
func sandboxdREST(cfg *config, srv *api.Server, started time.Time, log *zap.Logger) (*rest.Server, *http.Server, error) {
	if cfg.SandboxdRESTAddr == "" {
		return nil, nil, nil
	}
	if cfg.restListener == nil {
		ln, err := net.Listen("tcp", cfg.SandboxdRESTAddr)
		if err != nil {
			return nil, nil, fmt.Errorf("listen address %s (SANDBOXD_REST_ADDR): %w", cfg.SandboxdRESTAddr, err)
		}
		cfg.restListener = ln
	}
	tcp, _ := cfg.restListener.Addr().(*net.TCPAddr)
	requireToken := tcp == nil || !tcp.IP.IsLoopback()
	if requireToken && cfg.TokenFile == "" {
		cfg.restListener.Close()
		return nil, nil, fmt.Errorf("SANDBOXD_REST_ADDR %s is not a loopback address: there every request needs the daemon's token, and no token file is set (SANDBOX_RUNTIME_TOKEN_FILE)", cfg.restListener.Addr())
	}
	rs := rest.New(rest.Options{BaseDir: cfg.BaseDir, Started: started, Environ: os.Environ(), IsSecret: srv.HoldsToken, Logger: log})
	rhs := &http.Server{
		Handler:           srv.Guard(rs.Handler(), api.GuardOptions{Name: "sandboxd-rest", RequireToken: requireToken, Refuse: rest.Refuse}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          zap.NewStdLog(log.Named("sandboxd-rest")),
		BaseContext:       func(net.Listener) context.Context { return context.Background() },
		ConnState:         srv.ConnState, // one connection cap for both listeners
	}
	log.Info("sandboxd REST", zap.String("addr", cfg.restListener.Addr().String()), zap.Bool("token_required", requireToken))
	return rs, rhs, nil
}

// warnIfExposed logs a warning when the daemon listens beyond loopback
// without a token: anyone who can reach the address can then run commands
// and write files in the base dir as the daemon's user (issue 20, item 18).
// In a pod that is the pod network, where a token belongs; on a shared
// machine it is every user and every host on its networks.
func warnIfExposed(log *zap.Logger, addr net.Addr, tokenFile string) {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || tokenFile != "" || tcp.IP.IsLoopback() {
		return
	}
	log.Warn("listening beyond loopback without a token: anyone who can reach this address can run commands and write files as this user; set SANDBOX_RUNTIME_TOKEN_FILE, or listen on 127.0.0.1",
		zap.String("addr", tcp.String()))
}

// isolate keeps commands from starving the daemon of processes (issue 10):
// OS threads made up front, so the Go runtime never needs a new one while
// commands hold every pid, and, where a cgroup v2 tree is writable, a tree of
// its own (the daemon in a leaf, each command in a cgroup killed with
// cgroup.kill, pids.max headroom where a pids controller exists). It logs and
// returns the mode in force, as /v1/info announces it.
func isolate(reaper *procgroup.Reaper, cfg *config, log *zap.Logger) wire.Isolation {
	threads := procgroup.ReserveThreads(procgroup.DefaultReservedThreads)
	if err := reaper.UseCgroups(procgroup.CgroupOptions{MoveSelf: true}); err != nil {
		log.Info("no cgroup tree of our own; commands are process groups", zap.Error(err))
	}
	iso := reaper.Isolation()
	log.Info("isolation",
		zap.String("mode", iso.Mode),
		zap.String("reason", iso.Reason),
		zap.String("cgroup", iso.Cgroup),
		zap.Int("threads", threads),
		zap.Bool("pidfd_signals", iso.PidfdSignals))
	if budget := cfg.ShutdownTimeout * 4 / 5; cfg.KillGrace >= budget {
		log.Warn("the kill grace does not fit the shutdown budget; at shutdown commands get SIGKILL before it has passed",
			zap.Duration("kill_grace", cfg.KillGrace), zap.Duration("shutdown_timeout", cfg.ShutdownTimeout))
	}
	out := wire.Isolation{Mode: iso.Mode, Reason: iso.Reason, Controllers: iso.Controllers,
		ReservedThreads: procgroup.DefaultReservedThreads, PidfdSignals: iso.PidfdSignals}
	if iso.Cgroup != "" {
		out.Cgroup = &iso.Cgroup
	}
	if iso.CommandsPidsMax > 0 {
		out.CommandsPidsMax = &iso.CommandsPidsMax
	}
	return out
}

// cleanTemps removes the temporary files and staged parents that writes
// cut short by a crash or a SIGKILL left in the base dir (fsroot.CleanTemps:
// only names older than this start, so a write already in progress is
// safe); it runs beside the server, since listings hide those names anyway.
func cleanTemps(base string, started time.Time, stop <-chan struct{}, log *zap.Logger) {
	root, err := os.OpenRoot(base)
	if err != nil {
		return // the file routes report a missing base dir themselves
	}
	defer root.Close()
	removed, err := fsroot.CleanTemps(root, started, stop)
	if len(removed) > 0 || err != nil {
		log.Info("removed what interrupted writes left", zap.Int("count", len(removed)),
			zap.Strings("first", removed[:min(len(removed), 10)]), zap.Error(err))
	}
}

// suggestCLICommand reports (after saying so on w) a first argument that
// looks like a mistyped subcommand ("exce", "log"): it is not a flag, and
// the daemon takes no arguments.
func suggestCLICommand(args []string, w io.Writer) bool {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return false
	}
	names := cli.Commands()
	if args[0] == "" {
		fmt.Fprintf(w, "sandbox-runtime: an empty first argument is not a subcommand (subcommands: %s; the daemon itself takes only flags: see --help)\n", strings.Join(names, ", "))
		return true
	}
	typed := strings.ToLower(args[0]) // KILL is kill mistyped
	best, bestD := "", 3
	for _, name := range names {
		if d := editDistance(typed, name); d < bestD || strings.HasPrefix(name, typed) && bestD > 1 {
			best, bestD = name, min(d, 1)
		}
	}
	if best != "" {
		fmt.Fprintf(w, "sandbox-runtime: unknown subcommand %q; did you mean %q? (subcommands: %s; see --help)\n", args[0], best, strings.Join(names, ", "))
	} else {
		fmt.Fprintf(w, "sandbox-runtime: unknown subcommand %q (subcommands: %s; the daemon itself takes only flags: see --help)\n", args[0], strings.Join(names, ", "))
	}
	return true
}
