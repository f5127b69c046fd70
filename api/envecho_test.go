package api

import (
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// TestEnvNeverEchoed (issue 20 item 13): an env name with '=' (often a
// whole NAME=secret put where the name goes) or a value with a NUL is
// refused with a 400 that holds neither the name nor the value, and the
// request log holds neither.
func TestEnvNeverEchoed(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	ts := newTestServer(t, func(_ *runtime.Config, o *Options) { o.Logger = zap.New(core) })
	for _, body := range []string{
		`{"argv":["true"],"envs":{"API_KEY=sk-live-s3cr3t":"x"}}`,
		`{"argv":["true"],"envs":{"API_KEY\u0000sk-live-s3cr3t":"x"}}`,
		`{"argv":["true"],"envs":{"API_KEY":"sk-live-s3cr3t\u0000"}}`,
	} {
		code, resp := atDo(t, "POST", ts.URL+"/v1/commands", body, http.Header{"Content-Type": {"application/json"}})
		if code != http.StatusBadRequest || !strings.Contains(string(resp), "envs") {
			t.Errorf("%s: got %d %s; want 400 naming envs", body, code, resp)
		}
		if strings.Contains(string(resp), "s3cr3t") || strings.Contains(string(resp), "API_KEY") {
			t.Errorf("%s: the answer echoes the env: %s", body, resp)
		}
	}
	for _, e := range logs.All() {
		line := e.Message
		for k, v := range e.ContextMap() {
			line += " " + k + "=" + strings.TrimSpace(strings.ReplaceAll(toString(v), "\n", " "))
		}
		if strings.Contains(line, "s3cr3t") || strings.Contains(line, "API_KEY") {
			t.Errorf("a log line holds the env: %s", line)
		}
	}
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}
