//go:build linux

package main

import (
	"bytes"
	"errors"
	"flag"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// envMap is a getenv over a fixed map.
func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadConfigDefaults(t *testing.T) {
	base := t.TempDir()
	c, err := loadConfig(nil, envMap(map[string]string{"SANDBOX_BASE_DIR": base}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	// The defaults of protocol.md §2 and §6.
	want := config{
		Addr:              "127.0.0.1:8888", // loopback: the images set :8888 (issue 20, item 18)
		BaseDir:           base,
		MaxRunning:        16,
		MaxRetained:       64,
		OutputLimit:       1 << 20,
		ExecuteOutput:     8 << 20,
		MaxExecutions:     8,
		StdinLimit:        1 << 20,
		ResultTTL:         15 * time.Minute,
		DefaultTimeout:    60 * time.Second,
		MaxTimeout:        300 * time.Second,
		KillGrace:         2 * time.Second,
		ShutdownTimeout:   25 * time.Second,
		HeartbeatInterval: 10 * time.Second,
		LogLevel:          "info",
		MaxContexts:       8,
		ContextIdle:       15 * time.Minute,
		ContextMemory:     4 << 30,
	}
	if *c != want {
		t.Errorf("defaults:\n got %+v\nwant %+v", *c, want)
	}
	rc := c.runtimeConfig()
	if rc.MaxRunning != 16 || rc.MaxRetained != 64 || rc.OutputLimit != 1<<20 || rc.LegacyOutputLimit != 8<<20 ||
		rc.ResultTTL != 15*time.Minute || rc.KillGrace != 2*time.Second || rc.BaseDir != base || rc.MaxTimeout != 300*time.Second {
		t.Errorf("runtimeConfig: %+v", rc)
	}
}

func TestLoadConfigBaseDirDefault(t *testing.T) {
	c, err := loadConfig(nil, envMap(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := "/app"
	if _, err := os.Stat("/app"); err != nil {
		want, _ = os.Getwd()
	}
	if c.BaseDir != want {
		t.Errorf("base dir %q, want %q", c.BaseDir, want)
	}
}

// TestLoadConfigPrecedence: a flag beats its variable, which beats the
// default, for every setting.
func TestLoadConfigPrecedence(t *testing.T) {
	base, other := t.TempDir(), t.TempDir()
	envToken, flagToken := other+"/env-token", base+"/flag-token"
	os.WriteFile(envToken, []byte("e"), 0o600)
	os.WriteFile(flagToken, []byte("f"), 0o600)
	env := map[string]string{
		"SANDBOX_RUNTIME_ADDR":               "127.0.0.1:1",
		"SANDBOX_BASE_DIR":                   other,
		"SANDBOX_RUNTIME_TOKEN_FILE":         envToken,
		"SANDBOX_MAX_RUNNING":                "3",
		"SANDBOX_MAX_RETAINED":               "5",
		"SANDBOX_OUTPUT_LIMIT_BYTES":         "100",
		"SANDBOX_EXECUTE_OUTPUT_LIMIT_BYTES": "200",
		"SANDBOX_MAX_EXECUTIONS":             "2",
		"SANDBOX_STDIN_LIMIT_BYTES":          "300",
		"SANDBOX_RESULT_TTL_SECONDS":         "1.5",
		"SANDBOX_DEFAULT_TIMEOUT_SECONDS":    "7",
		"SANDBOX_EXEC_TIMEOUT_SECONDS":       "8",
		"SANDBOX_KILL_GRACE_SECONDS":         "0",
		"SANDBOX_SHUTDOWN_TIMEOUT_SECONDS":   "9",
		"SANDBOX_HEARTBEAT_SECONDS":          "0.25",
		"SANDBOX_LOG_LEVEL":                  "warn",
		"SANDBOX_ALLOWED_ORIGINS":            "HTTPS://UI.example:443/, http://127.0.0.1:3000",
		"SANDBOX_LOG_FORMAT":                 "console",
		"SANDBOXD_GRPC_ADDR":                 "0.0.0.0:9090", // beyond loopback: allowed, since a token file is set
		"SANDBOXD_REST_ADDR":                 "0.0.0.0:8080", // the same
		"SANDBOX_MAX_CONTEXTS":               "2",
		"SANDBOX_CONTEXT_IDLE_SECONDS":       "60",
		"SANDBOX_CONTEXT_MEMORY_BYTES":       "-1",
		"SANDBOX_PYTHON":                     "/usr/bin/python3",
		"SANDBOX_CONTEXT_SPARE":              "true",
	}
	// Environment only.
	c, err := loadConfig(nil, envMap(env), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := config{
		Addr: "127.0.0.1:1", BaseDir: other, TokenFile: envToken,
		MaxRunning: 3, MaxRetained: 5, OutputLimit: 100, ExecuteOutput: 200, MaxExecutions: 2, StdinLimit: 300,
		ResultTTL: 1500 * time.Millisecond, DefaultTimeout: 7 * time.Second, MaxTimeout: 8 * time.Second,
		KillGrace: 0, ShutdownTimeout: 9 * time.Second, HeartbeatInterval: 250 * time.Millisecond,
		LogLevel: "warn", LogFormat: "console", AllowedOrigins: "https://ui.example,http://127.0.0.1:3000",
		SandboxdGRPCAddr: "0.0.0.0:9090", SandboxdRESTAddr: "0.0.0.0:8080",
		MaxContexts: 2, ContextIdle: time.Minute, ContextMemory: -1, Python: "/usr/bin/python3", ContextSpare: true,
	}
	if *c != want {
		t.Errorf("from the environment:\n got %+v\nwant %+v", *c, want)
	}

	// Flags beat the environment.
	args := []string{
		"--addr", "127.0.0.1:2", "--base-dir", base, "--token-file=" + flagToken,
		"--max-running=4", "--max-retained=6", "--output-limit-bytes=101",
		"--execute-output-limit-bytes=201", "--max-executions=3", "--stdin-limit-bytes=301",
		"--result-ttl-seconds=2", "--default-timeout-seconds=0.5", "--exec-timeout-seconds=10",
		"--kill-grace-seconds=1", "--shutdown-timeout-seconds=3", "--heartbeat-seconds=4",
		"--log-level=debug", "--log-format=json", "--allowed-origins=*", "--sandboxd-grpc-addr=127.0.0.1:9091",
		"--sandboxd-rest-addr=127.0.0.1:8081",
		"--max-contexts=3", "--context-idle-seconds=61", "--context-memory-bytes=1000000000", "--python=python3", "--context-spare=false",
	}
	c, err = loadConfig(args, envMap(env), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want = config{
		Addr: "127.0.0.1:2", BaseDir: base, TokenFile: flagToken,
		MaxRunning: 4, MaxRetained: 6, OutputLimit: 101, ExecuteOutput: 201, MaxExecutions: 3, StdinLimit: 301,
		ResultTTL: 2 * time.Second, DefaultTimeout: 500 * time.Millisecond, MaxTimeout: 10 * time.Second,
		KillGrace: time.Second, ShutdownTimeout: 3 * time.Second, HeartbeatInterval: 4 * time.Second,
		LogLevel: "debug", LogFormat: "json", AllowedOrigins: "*", SandboxdGRPCAddr: "127.0.0.1:9091",
		SandboxdRESTAddr: "127.0.0.1:8081",
		MaxContexts:      3, ContextIdle: 61 * time.Second, ContextMemory: 1000000000, Python: "python3",
	}
	if *c != want {
		t.Errorf("flags over the environment:\n got %+v\nwant %+v", *c, want)
	}

	// Every setting is covered above.
	if n := len((&config{}).settings()); n != len(env) {
		t.Errorf("%d settings, but the test sets %d variables: update the test", n, len(env))
	}

	// A flag also beats a bad variable: the variable is not looked at.
	c, err = loadConfig([]string{"--max-running=2", "--base-dir", base}, envMap(map[string]string{"SANDBOX_MAX_RUNNING": "many"}), &bytes.Buffer{})
	if err != nil || c.MaxRunning != 2 {
		t.Errorf("flag over a bad variable: %v, %v", c, err)
	}
}

// TestSandboxdAddrNeedsTokenBeyondLoopback: sandboxd's listener asks no
// token on loopback, so beyond loopback the daemon refuses to start without
// a token file, naming the setting.
func TestSandboxdAddrNeedsTokenBeyondLoopback(t *testing.T) {
	base := t.TempDir()
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:9090", true}, {"[::1]:9090", true}, {"localhost:9090", true},
		{"0.0.0.0:9090", false}, {":9090", false}, {"10.1.2.3:9090", false},
	} {
		_, err := loadConfig([]string{"--base-dir", base, "--sandboxd-grpc-addr", tc.addr}, envMap(nil), &bytes.Buffer{})
		if tc.ok && err != nil {
			t.Errorf("%s: %v", tc.addr, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "SANDBOXD_GRPC_ADDR") || !strings.Contains(err.Error(), "SANDBOX_RUNTIME_TOKEN_FILE")) {
			t.Errorf("%s without a token file: %v; want a refusal naming SANDBOXD_GRPC_ADDR and SANDBOX_RUNTIME_TOKEN_FILE", tc.addr, err)
		}
	}
	if _, err := loadConfig([]string{"--base-dir", base, "--sandboxd-grpc-addr", "nonsense"}, envMap(nil), &bytes.Buffer{}); err == nil {
		t.Error("an address without a port was accepted")
	}
}

func TestLoadConfigErrorsAggregated(t *testing.T) {
	env := map[string]string{
		"SANDBOX_BASE_DIR":           "/nonexistent/sandbox-runtime-test",
		"SANDBOX_MAX_RUNNING":        "many",
		"SANDBOX_RESULT_TTL_SECONDS": "-1",
		"SANDBOX_LOG_LEVEL":          "loud",
	}
	_, err := loadConfig([]string{"--kill-grace-seconds=NaN", "--output-limit-bytes=0"}, envMap(env), &bytes.Buffer{})
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{
		`SANDBOX_MAX_RUNNING: "many" is not a whole number`,
		"SANDBOX_RESULT_TTL_SECONDS",
		"--kill-grace-seconds",
		"--output-limit-bytes",
		`"loud"`,
		"/nonexistent/sandbox-runtime-test",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not mention %q:\n%s", want, msg)
		}
	}
	if n := strings.Count(msg, "\n") + 1; n < 6 {
		t.Errorf("%d error lines, want one per problem (6):\n%s", n, msg)
	}
}

func TestLoadConfigRefusals(t *testing.T) {
	base := t.TempDir()
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"running above retained", nil, map[string]string{"SANDBOX_MAX_RUNNING": "65"}, "SANDBOX_MAX_RUNNING (65) must not exceed SANDBOX_MAX_RETAINED (64)"},
		{"running above retained by flags", []string{"--max-running=3", "--max-retained=2"}, nil, "must not exceed"},
		{"zero ttl", nil, map[string]string{"SANDBOX_RESULT_TTL_SECONDS": "0"}, "SANDBOX_RESULT_TTL_SECONDS"},
		{"zero timeout", []string{"--default-timeout-seconds=0"}, nil, "--default-timeout-seconds"},
		{"infinite seconds", nil, map[string]string{"SANDBOX_EXEC_TIMEOUT_SECONDS": "Inf"}, "SANDBOX_EXEC_TIMEOUT_SECONDS"},
		{"fractional count", nil, map[string]string{"SANDBOX_MAX_RETAINED": "1.5"}, "SANDBOX_MAX_RETAINED"},
		{"seconds past a duration", []string{"--result-ttl-seconds=1e10"}, nil, "--result-ttl-seconds: 1e+10 seconds is more than the 9223372036 a duration can hold"},
		{"zero running", []string{"--max-running=0"}, nil, "--max-running"},
		{"base dir is a file", []string{"--base-dir=/dev/null"}, nil, "/dev/null"},
		{"positional argument", []string{"serve"}, nil, "unexpected arguments"},
		{"origin with a path", nil, map[string]string{"SANDBOX_ALLOWED_ORIGINS": "https://ui.example/app"}, `SANDBOX_ALLOWED_ORIGINS: origin "https://ui.example/app" is not of the form`},
		{"origin without a scheme", []string{"--allowed-origins=ui.example"}, nil, "--allowed-origins"},
		{"sandboxd REST on every interface without a token", nil, map[string]string{"SANDBOXD_REST_ADDR": "0.0.0.0:8080"},
			`SANDBOXD_REST_ADDR "0.0.0.0:8080" is not a loopback address: there every request needs the daemon's token, and no token file is set (--token-file / SANDBOX_RUNTIME_TOKEN_FILE)`},
		{"sandboxd REST with no host without a token", []string{"--sandboxd-rest-addr=:8080"}, nil, "is not a loopback address"},
		{"sandboxd REST on a name without a token", nil, map[string]string{"SANDBOXD_REST_ADDR": "pod.example:8080"}, "is not a loopback address"},
		{"sandboxd REST without a port", nil, map[string]string{"SANDBOXD_REST_ADDR": "127.0.0.1"}, `SANDBOXD_REST_ADDR "127.0.0.1" is not host:port`},
		{"sandboxd REST port out of range", nil, map[string]string{"SANDBOXD_REST_ADDR": "127.0.0.1:70000"}, "not a number from 0 to 65535"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{"SANDBOX_BASE_DIR": base}
			for k, v := range c.env {
				env[k] = v
			}
			_, err := loadConfig(c.args, envMap(env), &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one mentioning %q", err, c.want)
			}
		})
	}
}

// TestSandboxdRESTAddrAccepted: a loopback address needs no token; any
// other address is accepted with a token file.
func TestSandboxdRESTAddrAccepted(t *testing.T) {
	base := t.TempDir()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []map[string]string{
		{"SANDBOXD_REST_ADDR": "127.0.0.1:8080"},
		{"SANDBOXD_REST_ADDR": "127.1.2.3:0"},
		{"SANDBOXD_REST_ADDR": "[::1]:8080"},
		{"SANDBOXD_REST_ADDR": "localhost:8080"},
		{"SANDBOXD_REST_ADDR": "0.0.0.0:8080", "SANDBOX_RUNTIME_TOKEN_FILE": tok},
		{"SANDBOXD_REST_ADDR": ":8080", "SANDBOX_RUNTIME_TOKEN_FILE": tok},
	} {
		c["SANDBOX_BASE_DIR"] = base
		cfg, err := loadConfig(nil, envMap(c), &bytes.Buffer{})
		if err != nil || cfg.SandboxdRESTAddr != c["SANDBOXD_REST_ADDR"] {
			t.Errorf("%v: %v %+v", c, err, cfg)
		}
	}
	if cfg, err := loadConfig(nil, envMap(map[string]string{"SANDBOX_BASE_DIR": base}), &bytes.Buffer{}); err != nil || cfg.SandboxdRESTAddr != "" {
		t.Errorf("the default: %v %q; want off", err, cfg.SandboxdRESTAddr)
	}
}

func TestLoadConfigAccepts(t *testing.T) {
	base := t.TempDir()
	env := envMap(map[string]string{
		"SANDBOX_BASE_DIR":           base,
		"SANDBOX_MAX_RUNNING":        " 4 ", // surrounding space is tolerated
		"SANDBOX_MAX_RETAINED":       "4",   // equal is allowed
		"SANDBOX_KILL_GRACE_SECONDS": "0",   // no grace: SIGKILL at once
		"SANDBOX_RESULT_TTL_SECONDS": "0.5",
	})
	c, err := loadConfig(nil, env, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxRunning != 4 || c.MaxRetained != 4 || c.KillGrace != 0 || c.ResultTTL != 500*time.Millisecond {
		t.Errorf("%+v", c)
	}
}

func TestLoadConfigHelpAndVersion(t *testing.T) {
	var out bytes.Buffer
	_, err := loadConfig([]string{"--help"}, envMap(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v, want flag.ErrHelp", err)
	}
	help := out.String()
	for _, s := range (&config{}).settings() {
		if !strings.Contains(help, "-"+s.flag) || !strings.Contains(help, s.env) {
			t.Errorf("--help does not list --%s / %s", s.flag, s.env)
		}
		if s.def != "" && !strings.Contains(help, `"`+s.def+`"`) {
			t.Errorf("--help does not show the default %q of --%s", s.def, s.flag)
		}
		// Exactly one default per flag.
		entry := helpEntry(t, help, s.flag)
		if n := strings.Count(entry, "; default "); n != 1 {
			t.Errorf("--%s shows %d defaults; want 1:\n%s", s.flag, n, entry)
		}
		if strings.Contains(entry, "`") {
			t.Errorf("--%s: back quotes left in the help:\n%s", s.flag, entry)
		}
	}
	c, err := loadConfig([]string{"--version", "--base-dir", t.TempDir()}, envMap(nil), &bytes.Buffer{})
	if err != nil || !c.ShowVersion {
		t.Errorf("--version: %+v, %v", c, err)
	}
	out.Reset()
	if _, err := loadConfig([]string{"--bogus"}, envMap(nil), &out); err == nil || !strings.Contains(err.Error(), "bogus") || out.Len() != 0 {
		t.Errorf("unknown flag: %v, output %q; want an error naming it and no output", err, out.String())
	}
}

// helpEntry is the part of help that describes --flag.
func helpEntry(t *testing.T, help, flag string) string {
	t.Helper()
	i := strings.Index(help, "  --"+flag+" ")
	if i < 0 {
		t.Fatalf("no entry for --%s in:\n%s", flag, help)
	}
	rest := help[i+2:]
	if j := strings.Index(rest, "\n  --"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// TestHelpTypesEveryValue: a setting whose parser refuses free text must name
// its type in --help (the first back-quoted word of its usage), and the
// names shown are the ones a reader expects.
func TestHelpTypesEveryValue(t *testing.T) {
	var out bytes.Buffer
	loadConfig([]string{"--help"}, envMap(nil), &out)
	help := out.String()
	for _, s := range (&config{}).settings() {
		name, _ := valueName(s)
		if err := s.set("not-a-value"); err != nil && name == "string" {
			t.Errorf("--%s refuses free text but --help calls its value a string: put its type in back quotes in its usage", s.flag)
		}
		if !strings.Contains(help, "  --"+s.flag+" "+name+"\n") {
			t.Errorf("--help does not show --%s %s", s.flag, name)
		}
	}
	for flag, want := range map[string]string{"max-running": "count", "output-limit-bytes": "bytes", "kill-grace-seconds": "seconds", "addr": "address"} {
		if !strings.Contains(help, "  --"+flag+" "+want+"\n") {
			t.Errorf("--%s is not shown as %q:\n%s", flag, want, helpEntry(t, help, flag))
		}
	}
}

func TestUnknownEnvWarned(t *testing.T) {
	settings := (&config{}).settings()
	got := unknownEnv([]string{
		"SANDBOX_MAX_RUNING=5",                     // a typo: suggest the setting
		"SANDBOX_MAX_RUNNING=5",                    // a setting: silent
		"SANDBOX_SOMETHING_ELSE_ENTIRELY=1",        // unknown, nothing close
		"SANDBOX_RUNTIME_PORT_8888_TCP=tcp://x:88", // a Kubernetes service link: silent
		"SANDBOX_RUNTIME_SERVICE_HOST=10.0.0.1",
		"SANDBOX_RUNTIME_PORT=tcp://10.0.0.1:8888",
		"PATH=/bin",
		"sandbox_max_running=5", // not SANDBOX_: not ours
	}, settings)
	want := []envWarning{{"SANDBOX_MAX_RUNING", "SANDBOX_MAX_RUNNING"}, {"SANDBOX_SOMETHING_ELSE_ENTIRELY", ""}}
	if len(got) != len(want) {
		t.Fatalf("got %v; want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got %v; want %v", got[i], want[i])
		}
	}
	if got := unknownEnv([]string{"SANDBOX_LOG_LEVLE=debug", "SANDBOX_BASEDIR=/x"}, settings); len(got) != 2 ||
		got[0].suggestion != "SANDBOX_BASE_DIR" || got[1].suggestion != "SANDBOX_LOG_LEVEL" {
		t.Errorf("suggestions: %v", got)
	}
}

func TestTokenFileCheckedAtStart(t *testing.T) {
	base := t.TempDir()
	dir := t.TempDir()
	empty := dir + "/empty"
	os.WriteFile(empty, []byte(" \n\t\n"), 0o600)
	good := dir + "/good"
	os.WriteFile(good, []byte("s3cret\n"), 0o600)
	unreadable := dir + "/unreadable"
	os.WriteFile(unreadable, []byte("s3cret"), 0o000)
	cases := []struct {
		file, want string
	}{
		{dir + "/missing", "no such file"},
		{empty, "is empty"},
		{dir, "not a regular file"},
	}
	if os.Geteuid() != 0 { // root reads a mode-0 file
		cases = append(cases, struct{ file, want string }{unreadable, "permission denied"})
	}
	for _, c := range cases {
		_, err := loadConfig(nil, envMap(map[string]string{"SANDBOX_BASE_DIR": base, "SANDBOX_RUNTIME_TOKEN_FILE": c.file}), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.file) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("token file %s: %v; want an error naming the file and saying %q", c.file, err, c.want)
		}
	}
	if c, err := loadConfig([]string{"--token-file", good}, envMap(map[string]string{"SANDBOX_BASE_DIR": base}), &bytes.Buffer{}); err != nil || c.TokenFile != good {
		t.Errorf("good token file: %v", err)
	}
}

func TestLogFormat(t *testing.T) {
	base := t.TempDir()
	for _, f := range []string{"console", "json", ""} {
		c, err := loadConfig([]string{"--log-format=" + f}, envMap(map[string]string{"SANDBOX_BASE_DIR": base}), &bytes.Buffer{})
		if err != nil || c.LogFormat != f {
			t.Errorf("--log-format=%q: %v", f, err)
		}
	}
	if _, err := loadConfig(nil, envMap(map[string]string{"SANDBOX_BASE_DIR": base, "SANDBOX_LOG_FORMAT": "xml"}), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "xml") {
		t.Errorf("SANDBOX_LOG_FORMAT=xml: %v", err)
	}
	// Not a terminal: JSON. (A pipe is never a terminal.)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if got := logFormat("", w); got != "json" {
		t.Errorf("default on a pipe: %q; want json", got)
	}
	if got := logFormat("console", w); got != "console" {
		t.Errorf("explicit console on a pipe: %q", got)
	}
	var buf bytes.Buffer
	log, err := newLogger("info", "console", &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello")
	if strings.HasPrefix(buf.String(), "{") || !strings.Contains(buf.String(), "INFO\thello") {
		t.Errorf("console line: %q", buf.String())
	}
}

// TestNonLinuxBuildFailsClearly: on any other system the daemon's package is
// unsupported.go alone, so `go build` fails with its one message instead of
// an error deep in a dependency (syscall.SIGPWR is undefined on macOS).
func TestNonLinuxBuildFailsClearly(t *testing.T) {
	for _, goos := range []string{"darwin", "windows", "freebsd"} {
		ctx := build.Default
		ctx.GOOS, ctx.GOARCH, ctx.CgoEnabled = goos, "amd64", false
		pkg, err := ctx.ImportDir(".", 0)
		if err != nil {
			t.Fatalf("%s: %v", goos, err)
		}
		if !slices.Equal(pkg.GoFiles, []string{"unsupported.go"}) || len(pkg.Imports) != 0 {
			t.Errorf("GOOS=%s builds %v (imports %v); want only unsupported.go, importing nothing: give new files a linux build constraint", goos, pkg.GoFiles, pkg.Imports)
		}
	}
	// And that file's one error names the problem.
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "unsupported.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	conf := types.Config{Error: func(err error) { msgs = append(msgs, err.Error()) }}
	conf.Check("main", fset, []*ast.File{f}, nil)
	if len(msgs) != 1 || !strings.Contains(msgs[0], "undefined: sandbox_runtime_builds_only_for_linux") {
		t.Errorf("type errors %q; want the one that says the daemon builds only for Linux", msgs)
	}
}
