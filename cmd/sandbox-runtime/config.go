package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/api"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// config is every setting of the daemon, read once from flags and the
// environment (a flag wins over its variable) and validated.
type config struct {
	Addr              string
	BaseDir           string
	TokenFile         string
	MaxRunning        int
	MaxRetained       int
	OutputLimit       int
	ExecuteOutput     int
	MaxExecutions     int
	StdinLimit        int
	ResultTTL         time.Duration
	DefaultTimeout    time.Duration
	MaxTimeout        time.Duration
	KillGrace         time.Duration
	ShutdownTimeout   time.Duration
	HeartbeatInterval time.Duration
	AllowedOrigins    string // comma-separated, canonical (api.ParseAllowedOrigins)
	LogLevel          string
	ShowVersion       bool
}

// setting is one configurable value: its flag, its variable and its default.
type setting struct {
	flag, env, def, usage string
	set                   func(string) error
}

func intSetting(p *int, min int) func(string) error {
	return func(s string) error {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not a whole number", s)
		}
		if n < min {
			return fmt.Errorf("%d is below the minimum %d", n, min)
		}
		*p = n
		return nil
	}
}

func secondsSetting(p *time.Duration, allowZero bool) func(string) error {
	return func(s string) error {
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%q is not a number of seconds", s)
		}
		if f < 0 || (f == 0 && !allowZero) {
			return fmt.Errorf("%v seconds is out of range", f)
		}
		*p = time.Duration(f * float64(time.Second))
		return nil
	}
}

// originsSetting reads a comma-separated list of browser origins.
func originsSetting(p *string) func(string) error {
	return func(s string) error {
		o, err := api.ParseAllowedOrigins(s)
		*p = strings.Join(o, ",")
		return err
	}
}

func stringSetting(p *string) func(string) error {
	return func(s string) error { *p = s; return nil }
}

func (c *config) settings() []setting {
	return []setting{
		{"addr", "SANDBOX_RUNTIME_ADDR", ":8888", "listen address (port 0 picks a free port; the bound address is logged)", stringSetting(&c.Addr)},
		{"base-dir", "SANDBOX_BASE_DIR", "", "base directory: default cwd of commands, root of files and legacy paths (default /app, or the current directory when /app does not exist)", stringSetting(&c.BaseDir)},
		{"token-file", "SANDBOX_RUNTIME_TOKEN_FILE", "", "file holding a bearer token required on every route but GET / and GET /v1/health (re-read when it changes)", stringSetting(&c.TokenFile)},
		{"max-running", "SANDBOX_MAX_RUNNING", "16", "managed commands running at once", intSetting(&c.MaxRunning, 1)},
		{"max-retained", "SANDBOX_MAX_RETAINED", "64", "managed command handles retained (running + finished)", intSetting(&c.MaxRetained, 1)},
		{"output-limit-bytes", "SANDBOX_OUTPUT_LIMIT_BYTES", "1048576", "output retained per managed command (stdout+stderr)", intSetting(&c.OutputLimit, 1)},
		{"execute-output-limit-bytes", "SANDBOX_EXECUTE_OUTPUT_LIMIT_BYTES", "8388608", "output kept per stream of a legacy /execute", intSetting(&c.ExecuteOutput, 1)},
		{"max-executions", "SANDBOX_MAX_EXECUTIONS", "8", "legacy /execute calls running at once; more wait for a slot", intSetting(&c.MaxExecutions, 1)},
		{"stdin-limit-bytes", "SANDBOX_STDIN_LIMIT_BYTES", "1048576", "stdin bytes queued per managed command", intSetting(&c.StdinLimit, 1)},
		{"result-ttl-seconds", "SANDBOX_RESULT_TTL_SECONDS", "900", "lifetime of a finished command's result", secondsSetting(&c.ResultTTL, false)},
		{"default-timeout-seconds", "SANDBOX_DEFAULT_TIMEOUT_SECONDS", "60", "timeout of a command whose request gives none", secondsSetting(&c.DefaultTimeout, false)},
		{"exec-timeout-seconds", "SANDBOX_EXEC_TIMEOUT_SECONDS", "300", "cap on every timeout, and the timeout of legacy /execute", secondsSetting(&c.MaxTimeout, false)},
		{"kill-grace-seconds", "SANDBOX_KILL_GRACE_SECONDS", "2", "grace between SIGTERM and SIGKILL, and for pipes after the leader exits", secondsSetting(&c.KillGrace, true)},
		{"shutdown-timeout-seconds", "SANDBOX_SHUTDOWN_TIMEOUT_SECONDS", "25", "budget for a graceful shutdown on SIGTERM/SIGINT", secondsSetting(&c.ShutdownTimeout, false)},
		{"heartbeat-seconds", "SANDBOX_HEARTBEAT_SECONDS", "10", "silence after which a stream sends a heartbeat (WebSocket: ping period)", secondsSetting(&c.HeartbeatInterval, false)},
		{"allowed-origins", "SANDBOX_ALLOWED_ORIGINS", "", "comma-separated browser origins (http(s)://host[:port], or *) allowed besides the daemon's own host; any other Origin is refused with 403", originsSetting(&c.AllowedOrigins)},
		{"log-level", "SANDBOX_LOG_LEVEL", "info", "debug, info, warn or error", stringSetting(&c.LogLevel)},
	}
}

// loadConfig reads flags from args and variables through getenv.
func loadConfig(args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("sandbox-runtime", flag.ContinueOnError)
	fs.SetOutput(stderr)
	settings := c.settings()
	for _, s := range settings {
		fs.String(s.flag, "", fmt.Sprintf("%s (env %s, default %q)", s.usage, s.env, s.def))
	}
	fs.BoolVar(&c.ShowVersion, "version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sandbox-runtime [flags]\n\nThe in-sandbox command runtime. Every flag can also be set by its environment variable; a flag wins.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var errs []error
	for _, s := range settings {
		v, from := s.def, "default"
		if e := getenv(s.env); e != "" {
			v, from = e, s.env
		}
		if f := fs.Lookup(s.flag); f.Value.String() != "" {
			v, from = f.Value.String(), "--"+s.flag
		}
		if err := s.set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", from, err))
		}
	}
	if c.MaxRunning > c.MaxRetained {
		errs = append(errs, fmt.Errorf("SANDBOX_MAX_RUNNING (%d) must not exceed SANDBOX_MAX_RETAINED (%d)", c.MaxRunning, c.MaxRetained))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log level %q is not one of debug, info, warn, error", c.LogLevel))
	}
	if c.BaseDir == "" {
		c.BaseDir = "/app"
		if _, err := os.Stat("/app"); err != nil {
			wd, err := os.Getwd()
			if err != nil {
				errs = append(errs, fmt.Errorf("base dir: %w", err))
			}
			c.BaseDir = wd
		}
	}
	if fi, err := os.Stat(c.BaseDir); err != nil || !fi.IsDir() {
		errs = append(errs, fmt.Errorf("base dir %q is not an existing directory", c.BaseDir))
	}
	return c, errors.Join(errs...)
}

// runtimeConfig converts c into the Manager's configuration.
func (c *config) runtimeConfig() runtime.Config {
	rc := runtime.DefaultConfig()
	rc.MaxRunning = c.MaxRunning
	rc.MaxRetained = c.MaxRetained
	rc.OutputLimit = c.OutputLimit
	rc.LegacyOutputLimit = c.ExecuteOutput
	rc.MaxExecutions = c.MaxExecutions
	rc.StdinLimit = c.StdinLimit
	rc.ResultTTL = c.ResultTTL
	rc.DefaultTimeout = c.DefaultTimeout
	rc.MaxTimeout = c.MaxTimeout
	rc.KillGrace = c.KillGrace
	if c.KillGrace == 0 {
		rc.KillGrace = runtime.NoKillGrace // 0 in runtime.Config means the default
	}
	rc.BaseDir = c.BaseDir
	rc.Env = os.Environ()
	return rc
}
