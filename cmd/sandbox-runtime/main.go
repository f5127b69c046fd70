// Command sandbox-runtime is the daemon that runs inside every agent sandbox
// pod and executes commands for the clients behind the identity broker
// (CONTRACT.md). It serves the v1 API, the legacy API, files, health and
// metrics on one port, reaps every child as PID 1 or as a child subreaper,
// and shuts down gracefully on SIGTERM/SIGINT.
//
// Configuration (flag, then environment variable, then default):
//
//	--addr                        SANDBOX_RUNTIME_ADDR                ":8888"
//	--base-dir                    SANDBOX_BASE_DIR                    /app, or the current directory without /app
//	--token-file                  SANDBOX_RUNTIME_TOKEN_FILE          none (no auth)
//	--max-running                 SANDBOX_MAX_RUNNING                 16
//	--max-retained                SANDBOX_MAX_RETAINED                64
//	--output-limit-bytes          SANDBOX_OUTPUT_LIMIT_BYTES          1048576
//	--execute-output-limit-bytes  SANDBOX_EXECUTE_OUTPUT_LIMIT_BYTES  8388608
//	--stdin-limit-bytes           SANDBOX_STDIN_LIMIT_BYTES           1048576
//	--result-ttl-seconds          SANDBOX_RESULT_TTL_SECONDS          900
//	--default-timeout-seconds     SANDBOX_DEFAULT_TIMEOUT_SECONDS     60
//	--exec-timeout-seconds        SANDBOX_EXEC_TIMEOUT_SECONDS        300
//	--kill-grace-seconds          SANDBOX_KILL_GRACE_SECONDS          2
//	--shutdown-timeout-seconds    SANDBOX_SHUTDOWN_TIMEOUT_SECONDS    25
//	--heartbeat-seconds           SANDBOX_HEARTBEAT_SECONDS           10
//	--log-level                   SANDBOX_LOG_LEVEL                   info
//
// No other package reads the environment.
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
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sandbox-runtime/sandbox-runtime/api"
	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// version is stamped at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	if len(os.Args) > 1 && isCLICommand(os.Args[1]) { // the client (cli.go)
		os.Exit(runCLI(os.Args[1:], os.Getenv))
	}
	cfg, err := loadConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-runtime:", err)
		os.Exit(2)
	}
	if cfg.ShowVersion {
		fmt.Println("sandbox-runtime", version)
		return
	}
	log, err := newLogger(cfg.LogLevel, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-runtime:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, stop, cfg, log, nil); err != nil {
		log.Error("exiting", zap.Error(err))
		log.Sync()
		os.Exit(1)
	}
	log.Sync()
}

func newLogger(level string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), lvl)
	return zap.New(core), nil
}

// run serves until ctx is done, then shuts down within cfg.ShutdownTimeout:
// stop admitting (health 503), end every command (state terminated), let
// streams send their final line, close the listener. ready, when non-nil,
// receives the bound address.
// A second signal during shutdown is not caught (stopSignals restores the
// default action), so it ends the process at once.
func run(ctx context.Context, stopSignals func(), cfg *config, log *zap.Logger, ready chan<- net.Addr) error {
	reaper, err := procgroup.NewReaper(log.Named("reaper"))
	if err != nil {
		return fmt.Errorf("starting the reaper: %w", err)
	}
	defer reaper.Close()

	metrics := api.NewMetrics(nil)
	rc := cfg.runtimeConfig()
	rc.Logger = log
	rc.Observer = metrics
	m, err := runtime.New(rc, reaper)
	if err != nil {
		return err
	}
	defer m.Close()
	metrics.Bind(m, reaper.OrphansReaped)

	srv := api.New(m, api.Options{
		Version:           version,
		BaseDir:           cfg.BaseDir,
		TokenFile:         cfg.TokenFile,
		HeartbeatInterval: cfg.HeartbeatInterval,
		Logger:            log,
		Metrics:           metrics,
	})
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
		BaseContext:       func(net.Listener) context.Context { return context.Background() },
	}
	log.Info("listening",
		zap.String("addr", ln.Addr().String()),
		zap.String("version", version),
		zap.String("base_dir", cfg.BaseDir),
		zap.Int("pid", os.Getpid()),
		zap.Bool("auth", cfg.TokenFile != ""))
	if ready != nil {
		ready <- ln.Addr()
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()

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
	// End commands first, keeping a little of the budget for the HTTP side:
	// their streams then finish with the exit event.
	mctx, mcancel := context.WithTimeout(sctx, cfg.ShutdownTimeout*4/5)
	merr := m.Shutdown(mctx)
	mcancel()
	srv.EndStreams()
	herr := hs.Shutdown(sctx)
	if herr != nil {
		hs.Close()
	}
	// A command that outlived the budget (say, a process stuck in the
	// kernel) is logged; the shutdown itself still succeeded: exit 0.
	log.Info("stopped", zap.Duration("took", time.Since(start)), zap.NamedError("commands", merr), zap.NamedError("http", herr))
	return nil
}
