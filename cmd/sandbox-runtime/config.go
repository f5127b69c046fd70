//go:build linux

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"regexp"
	"sort"
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
	SandboxdGRPCAddr  string // "": sandboxd's ProcessService is not served
	SandboxdRESTAddr  string // sandboxd's REST listener; "" off
	LogLevel          string
	LogFormat         string // "console", "json", or "" (console on a terminal, else JSON)
	ShowVersion       bool

	// Code contexts (docs/contexts.md).
	MaxContexts   int
	ContextIdle   time.Duration
	ContextMemory int    // RLIMIT_AS of an interpreter; <= 0: none
	Python        string // the contexts' interpreter; "": python3 on the commands' PATH
	ContextSpare  bool   // keep one interpreter started ahead of the next create

	// listener, when set, is the socket bound by main before anything is
	// logged (so that an address in use is a plain start-up error); run
	// listens on Addr itself otherwise.
	listener net.Listener
	// grpcListener is the same for SandboxdGRPCAddr.
	grpcListener net.Listener
	// restListener is the same for SandboxdRESTAddr.
	restListener net.Listener
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
		if maxSeconds := float64(math.MaxInt64 / int64(time.Second)); f > maxSeconds {
			return fmt.Errorf("%v seconds is more than the %.0f a duration can hold", f, maxSeconds)
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

func boolSetting(p *bool) func(string) error {
	return func(s string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not true or false", s)
		}
		*p = b
		return nil
	}
}

func stringSetting(p *string) func(string) error {
	return func(s string) error { *p = s; return nil }
}

// settings lists every setting. The first back-quoted word of a usage is the
// type of its value in --help (as flag.UnquoteUsage reads it), so every
// setting that is not free text must have one.
func (c *config) settings() []setting {
	return []setting{
		{"addr", "SANDBOX_RUNTIME_ADDR", "127.0.0.1:8888", "listen `address` (host:port; port 0 picks a free port, and the bound address is logged; the images set :8888); beyond loopback without a token file a warning is logged", stringSetting(&c.Addr)},
		{"base-dir", "SANDBOX_BASE_DIR", "", "base `directory`: default cwd of commands, root of /v1/files and of the legacy file routes", stringSetting(&c.BaseDir)},
		{"token-file", "SANDBOX_RUNTIME_TOKEN_FILE", "", "`file` holding the bearer token required on every route but GET / and GET /v1/health; a regular file of at most 4096 bytes, non-blank at start, re-read every 2 s (a failed re-read keeps the last good token)", stringSetting(&c.TokenFile)},
		{"max-running", "SANDBOX_MAX_RUNNING", "16", "`count` of managed commands running at once (at most --max-retained)", intSetting(&c.MaxRunning, 1)},
		{"max-retained", "SANDBOX_MAX_RETAINED", "64", "`count` of managed command handles retained (running + finished)", intSetting(&c.MaxRetained, 1)},
		{"output-limit-bytes", "SANDBOX_OUTPUT_LIMIT_BYTES", "1048576", "`bytes` of output retained per managed command (stdout+stderr, most recent)", intSetting(&c.OutputLimit, 1)},
		{"execute-output-limit-bytes", "SANDBOX_EXECUTE_OUTPUT_LIMIT_BYTES", "8388608", "`bytes` of output kept per stream of a legacy /execute", intSetting(&c.ExecuteOutput, 1)},
		{"max-executions", "SANDBOX_MAX_EXECUTIONS", "8", "`count` of legacy /execute calls running at once; more wait for a slot", intSetting(&c.MaxExecutions, 1)},
		{"stdin-limit-bytes", "SANDBOX_STDIN_LIMIT_BYTES", "1048576", "`bytes` of stdin queued per managed command", intSetting(&c.StdinLimit, 1)},
		{"result-ttl-seconds", "SANDBOX_RESULT_TTL_SECONDS", "900", "`seconds` a finished command's result is kept", secondsSetting(&c.ResultTTL, false)},
		{"default-timeout-seconds", "SANDBOX_DEFAULT_TIMEOUT_SECONDS", "60", "`seconds` of timeout for a command whose request gives none", secondsSetting(&c.DefaultTimeout, false)},
		{"exec-timeout-seconds", "SANDBOX_EXEC_TIMEOUT_SECONDS", "300", "`seconds`: the cap on every timeout, and the timeout of legacy /execute", secondsSetting(&c.MaxTimeout, false)},
		{"kill-grace-seconds", "SANDBOX_KILL_GRACE_SECONDS", "2", "`seconds` between SIGTERM and SIGKILL, and for pipes after the leader exits (0 allowed)", secondsSetting(&c.KillGrace, true)},
		{"shutdown-timeout-seconds", "SANDBOX_SHUTDOWN_TIMEOUT_SECONDS", "25", "`seconds` of budget for a graceful shutdown on SIGTERM/SIGINT", secondsSetting(&c.ShutdownTimeout, false)},
		{"heartbeat-seconds", "SANDBOX_HEARTBEAT_SECONDS", "10", "`seconds` of silence after which a stream sends a heartbeat (WebSocket: the ping period)", secondsSetting(&c.HeartbeatInterval, false)},
		{"allowed-origins", "SANDBOX_ALLOWED_ORIGINS", "", "comma-separated browser `origins` (http(s)://host[:port], or *) allowed besides the daemon's own host; any other Origin is refused with 403", originsSetting(&c.AllowedOrigins)},
		{"sandboxd-grpc-addr", "SANDBOXD_GRPC_ADDR", "", "listen `address` (host:port) of sandboxd's gRPC ProcessService (upstream's port is 9090); empty: not served. On a loopback address no token is asked; on any other every call needs the token of --token-file (metadata authorization: Bearer <token>), and without a token file the daemon refuses to start", stringSetting(&c.SandboxdGRPCAddr)},
		{"sandboxd-rest-addr", "SANDBOXD_REST_ADDR", "", "listen `address` (host:port) of sandboxd's REST API (/v1/files, /v1/health, /v1/metadata: docs/sandboxd-rest.md), off when empty; the sandboxd template sets 127.0.0.1:8080. On a loopback address it needs no token (sandboxd's SDK sends none); on any other every request needs the token, and without a token file the daemon does not start", stringSetting(&c.SandboxdRESTAddr)},
		{"max-contexts", "SANDBOX_MAX_CONTEXTS", "8", "`count` of code contexts (Python interpreters) at once; apart from --max-running", intSetting(&c.MaxContexts, 1)},
		{"context-idle-seconds", "SANDBOX_CONTEXT_IDLE_SECONDS", "900", "`seconds` a code context may stay idle before it is deleted", secondsSetting(&c.ContextIdle, false)},
		{"context-memory-bytes", "SANDBOX_CONTEXT_MEMORY_BYTES", "4294967296", "`bytes` of address space (RLIMIT_AS) of each code context's interpreter; 0 or -1: none", intSetting(&c.ContextMemory, -1)},
		{"context-spare", "SANDBOX_CONTEXT_SPARE", "false", "`bool`: keep one code-context interpreter started ahead of the next create (true or false)", boolSetting(&c.ContextSpare)},
		{"python", "SANDBOX_PYTHON", "", "the Python `interpreter` of code contexts (a path, or a name looked up on the commands' PATH)", stringSetting(&c.Python)},
		{"log-level", "SANDBOX_LOG_LEVEL", "info", "`level`: debug, info, warn or error", stringSetting(&c.LogLevel)},
		{"log-format", "SANDBOX_LOG_FORMAT", "", "`format` of the log on stderr: console or json", stringSetting(&c.LogFormat)},
	}
}

// shownDefaults are the defaults --help shows for settings whose default is
// not a plain value.
var shownDefaults = map[string]string{
	"base-dir":   "/app, or the current directory when /app does not exist",
	"token-file": "none: no authentication",
	"log-format": "console when stderr is a terminal, json otherwise",

	"sandboxd-grpc-addr": "none: not served",
	"sandboxd-rest-addr": "none: off",
	"python":             "python3 on the commands' PATH",
}

// valueName returns the type name --help shows for s and its usage without
// the back quotes (flag.UnquoteUsage's convention), "string" when the usage
// names none.
func valueName(s setting) (name, usage string) {
	name, usage = "string", s.usage
	if i := strings.IndexByte(usage, '`'); i >= 0 {
		if j := strings.IndexByte(usage[i+1:], '`'); j >= 0 {
			name = usage[i+1 : i+1+j]
			usage = usage[:i] + name + usage[i+1+j+1:]
		}
	}
	return name, usage
}

// writeHelp prints the usage: one entry per setting with its type, variable
// and one default.
func writeHelp(w io.Writer, settings []setting) {
	var b strings.Builder
	b.WriteString("Usage: sandbox-runtime [flags]\n\n")
	b.WriteString("The in-sandbox command runtime (Linux only). Every flag can also be set by its\n")
	b.WriteString("environment variable; a flag wins over its variable, a variable over the default.\n")
	b.WriteString("A bad value, an unusable token file or a listen address in use exits with code 2.\n\n")
	b.WriteString("Flags:\n")
	for _, s := range settings {
		name, usage := valueName(s)
		def, ok := shownDefaults[s.flag]
		if !ok {
			def = strconv.Quote(s.def)
		}
		fmt.Fprintf(&b, "  --%s %s\n      %s\n      env %s; default %s\n", s.flag, name, usage, s.env, def)
	}
	b.WriteString("  --version\n      print the version and exit\n")
	b.WriteString("  --help\n      print this help on stdout and exit\n")
	io.WriteString(w, b.String())
}

// rawValue is a flag that keeps its text; the setting parses it. A
// `bool` setting is a bool flag (isBool): bare --flag means true.
type rawValue struct {
	s      string
	set    bool
	isBool bool
}

// IsBoolFlag makes the flag package take a bare --flag as --flag=true.
func (v *rawValue) IsBoolFlag() bool { return v.isBool }

func (v *rawValue) String() string     { return v.s }
func (v *rawValue) Set(s string) error { v.s, v.set = s, true; return nil }

// loadConfig reads flags from args and variables through getenv. --help
// writes the usage to stdout and returns flag.ErrHelp; every other problem
// is returned as an error (one line per problem) and nothing is printed.
func loadConfig(args []string, getenv func(string) string, stdout io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("sandbox-runtime", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, the usage is printed to stdout only for --help
	fs.Usage = func() {}
	settings := c.settings()
	values := make([]rawValue, len(settings))
	for i, s := range settings {
		values[i].isBool = strings.HasPrefix(s.usage, "`bool`")
		fs.Var(&values[i], s.flag, s.usage)
	}
	fs.BoolVar(&c.ShowVersion, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeHelp(stdout, settings)
			return nil, err
		}
		return nil, fmt.Errorf("%w (see --help)", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q (see --help)", fs.Args())
	}
	var errs []error
	for i, s := range settings {
		v, from := s.def, "default"
		if e := getenv(s.env); e != "" {
			v, from = e, s.env
		}
		if values[i].set {
			v, from = values[i].s, "--"+s.flag
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
	switch c.LogFormat {
	case "", "console", "json":
	default:
		errs = append(errs, fmt.Errorf("log format %q is not one of console, json", c.LogFormat))
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
	if c.SandboxdGRPCAddr != "" {
		if err := checkSandboxdAddr("SANDBOXD_GRPC_ADDR", c.SandboxdGRPCAddr, c.TokenFile); err != nil {
			errs = append(errs, err)
		}
	}
	if c.SandboxdRESTAddr != "" {
		if err := checkSandboxdAddr("SANDBOXD_REST_ADDR", c.SandboxdRESTAddr, c.TokenFile); err != nil {
			errs = append(errs, err)
		}
	}
	if c.TokenFile != "" {
		if err := checkTokenFile(c.TokenFile); err != nil {
			errs = append(errs, err)
		}
	}
	return c, errors.Join(errs...)
}

// checkTokenFile refuses a token file that would lock every protected route
// from the start: missing, unreadable, not a regular file, larger than
// api.MaxTokenFileBytes, or blank. It applies the checks of every later
// re-read (api.ReadTokenFile).
func checkTokenFile(path string) error {
	if _, err := api.ReadTokenFile(path); err != nil {
		return fmt.Errorf("token file %q: %w", path, err)
	}
	return nil
}

// checkSandboxdAddr applies the auth rule of the sandboxd listeners
// (docs/protocol.md "sandboxd"): upstream's SDK sends no token, so on a
// loopback address (reached through kubectl port-forward) none is asked; on
// any other address every call needs the daemon's token, so there must be one.
func checkSandboxdAddr(env, addr, tokenFile string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q is not host:port: %w", env, addr, errors.Unwrap(err))
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%s %q: port %q is not a number from 0 to 65535", env, addr, port)
	}
	if !loopbackHost(host) && tokenFile == "" {
		return fmt.Errorf("%s %q is not a loopback address: there every request needs the daemon's token, and no token file is set (--token-file / SANDBOX_RUNTIME_TOKEN_FILE); listen on 127.0.0.1 or set a token file", env, addr)
	}
	return nil
}

// loopbackHost reports whether host names only loopback: localhost or a
// loopback IP literal. An empty host (":9090") is every interface.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// envWarning is a SANDBOX_* variable that is no setting, and the closest
// setting's variable ("" when none is near).
type envWarning struct{ name, suggestion string }

// unknownEnv returns every SANDBOX_* variable of environ that is no setting,
// with the closest setting's name when one is near. The
// variables Kubernetes defines for a Service named sandbox-runtime
// (SANDBOX_RUNTIME_SERVICE_HOST, SANDBOX_RUNTIME_PORT_8888_TCP, …) are not
// settings and are not warned about.
func unknownEnv(environ []string, settings []setting) []envWarning {
	known := map[string]bool{}
	for _, s := range settings {
		known[s.env] = true
	}
	var out []envWarning
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "SANDBOX_") || known[name] || serviceLink.MatchString(name) {
			continue
		}
		best, bestD := "", 4 // suggest only close names: at most 3 edits
		for _, s := range settings {
			if d := editDistance(name, s.env); d < bestD {
				best, bestD = s.env, d
			}
		}
		out = append(out, envWarning{name, best})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// serviceLink matches the variables of Kubernetes' service links.
var serviceLink = regexp.MustCompile(`^[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT|PORT_[0-9]+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)$`)

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
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
	rc.MaxContexts, rc.ContextIdle, rc.Python, rc.ContextSpare = c.MaxContexts, c.ContextIdle, c.Python, c.ContextSpare
	rc.ContextMemory = int64(c.ContextMemory)
	if c.ContextMemory <= 0 {
		rc.ContextMemory = -1 // 0 in runtime.Config means the default
	}
	rc.BaseDir = c.BaseDir
	rc.Env = os.Environ()
	return rc
}
