package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
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
	// The defaults of CONTRACT §2 and §6.
	want := config{
		Addr:              ":8888",
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
	env := map[string]string{
		"SANDBOX_RUNTIME_ADDR":               "127.0.0.1:1",
		"SANDBOX_BASE_DIR":                   other,
		"SANDBOX_RUNTIME_TOKEN_FILE":         "/env/token",
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
	}
	// Environment only.
	c, err := loadConfig(nil, envMap(env), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := config{
		Addr: "127.0.0.1:1", BaseDir: other, TokenFile: "/env/token",
		MaxRunning: 3, MaxRetained: 5, OutputLimit: 100, ExecuteOutput: 200, MaxExecutions: 2, StdinLimit: 300,
		ResultTTL: 1500 * time.Millisecond, DefaultTimeout: 7 * time.Second, MaxTimeout: 8 * time.Second,
		KillGrace: 0, ShutdownTimeout: 9 * time.Second, HeartbeatInterval: 250 * time.Millisecond,
		LogLevel: "warn", AllowedOrigins: "https://ui.example,http://127.0.0.1:3000",
	}
	if *c != want {
		t.Errorf("from the environment:\n got %+v\nwant %+v", *c, want)
	}

	// Flags beat the environment.
	args := []string{
		"--addr", "127.0.0.1:2", "--base-dir", base, "--token-file=/flag/token",
		"--max-running=4", "--max-retained=6", "--output-limit-bytes=101",
		"--execute-output-limit-bytes=201", "--max-executions=3", "--stdin-limit-bytes=301",
		"--result-ttl-seconds=2", "--default-timeout-seconds=0.5", "--exec-timeout-seconds=10",
		"--kill-grace-seconds=1", "--shutdown-timeout-seconds=3", "--heartbeat-seconds=4",
		"--log-level=debug", "--allowed-origins=*",
	}
	c, err = loadConfig(args, envMap(env), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want = config{
		Addr: "127.0.0.1:2", BaseDir: base, TokenFile: "/flag/token",
		MaxRunning: 4, MaxRetained: 6, OutputLimit: 101, ExecuteOutput: 201, MaxExecutions: 3, StdinLimit: 301,
		ResultTTL: 2 * time.Second, DefaultTimeout: 500 * time.Millisecond, MaxTimeout: 10 * time.Second,
		KillGrace: time.Second, ShutdownTimeout: 3 * time.Second, HeartbeatInterval: 4 * time.Second,
		LogLevel: "debug", AllowedOrigins: "*",
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
		{"zero running", []string{"--max-running=0"}, nil, "--max-running"},
		{"base dir is a file", []string{"--base-dir=/dev/null"}, nil, "/dev/null"},
		{"positional argument", []string{"serve"}, nil, "unexpected arguments"},
		{"origin with a path", nil, map[string]string{"SANDBOX_ALLOWED_ORIGINS": "https://ui.example/app"}, `SANDBOX_ALLOWED_ORIGINS: origin "https://ui.example/app" is not of the form`},
		{"origin without a scheme", []string{"--allowed-origins=ui.example"}, nil, "--allowed-origins"},
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
	}
	c, err := loadConfig([]string{"--version", "--base-dir", t.TempDir()}, envMap(nil), &bytes.Buffer{})
	if err != nil || !c.ShowVersion {
		t.Errorf("--version: %+v, %v", c, err)
	}
	out.Reset()
	if _, err := loadConfig([]string{"--bogus"}, envMap(nil), &out); err == nil || !strings.Contains(out.String(), "bogus") {
		t.Errorf("unknown flag: %v, output %q", err, out.String())
	}
}
