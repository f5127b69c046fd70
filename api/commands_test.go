package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestCreateRefusesEmptyIDAndNullEnv: the contract's "anything that is not a
// UUID is 400" covers "", which must not be taken as "no id"; an env value
// of null must not become "". Neither may start a command.
func TestCreateRefusesEmptyIDAndNullEnv(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	for _, tc := range []struct{ body, want string }{
		{`{"argv":["true"],"command_id":""}`, `command_id must be a UUID`},
		{`{"argv":["true"],"envs":{"A":null}}`, `every value of field \"envs\" must be a string; one is null`},
		{`{"argv":["true"],"envs":{"A":"1","B":null}}`, `every value of field \"envs\" must be a string; one is null`},
	} {
		code, b := atDo(t, "POST", ts.URL+"/v1/commands", tc.body, nil)
		if code != http.StatusBadRequest || !strings.Contains(string(b), `"invalid_request"`) || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s: got %d %s; want 400 invalid_request naming %s", tc.body, code, b, tc.want)
		}
	}
	if n := len(ts.M.List(nil)); n != 0 {
		t.Fatalf("refused creates registered %d commands; want 0", n)
	}
	// What stays accepted: no id, a null id (absent), an empty envs object.
	for _, body := range []string{`{"argv":["true"]}`, `{"argv":["true"],"command_id":null}`, `{"argv":["true"],"envs":{}}`, `{"argv":["true"],"envs":{"A":""}}`} {
		if code, b := atDo(t, "POST", ts.URL+"/v1/commands", body, nil); code != http.StatusCreated {
			t.Errorf("%s: got %d %s; want 201", body, code, b)
		}
	}
}

// TestEnvNamesAndValuesNeverEchoed (D4): an env name can carry a secret
// ("SECRET=hunter2" as a name). Before, a null value was refused with
// `envs["SECRET=hunter2"] must be a string, not null`, a number with
// `field "envs.SECRET=hunter2" must be string, not 5`, and a repeated
// name with `gives the key "SECRET=hunter2" more than once`, each in the
// answer and in the log. Now no refusal names an env name or value.
func TestEnvNamesAndValuesNeverEchoed(t *testing.T) {
	logs, logged := observer.New(zap.DebugLevel)
	ts := newTestServer(t, func(c *runtime.Config, o *Options) {
		o.Logger = zap.New(logs)
		c.Logger = o.Logger
	})
	for _, body := range []string{
		`{"argv":["true"],"envs":{"SECRET=hunter2":null}}`,
		`{"argv":["true"],"envs":{"SECRET=hunter2":5}}`,
		`{"argv":["true"],"envs":{"SECRET=hunter2":98765}}`,
		`{"argv":["true"],"envs":{"SECRET=hunter2":{"a":1}}}`,
		`{"argv":["true"],"envs":{"SECRET=hunter2":"1","SECRET=hunter2":"2"}}`,
		`{"argv":["true"],"envs":{"A.SECRET=hunter2":true}}`,
	} {
		code, b := atDo(t, "POST", ts.URL+"/v1/commands", body, nil)
		if code != http.StatusBadRequest || !strings.Contains(string(b), `\"envs\"`) {
			t.Errorf("%s: got %d %s; want 400 naming the field envs", body, code, b)
		}
		if strings.Contains(string(b), "hunter2") || strings.Contains(string(b), "SECRET") || strings.Contains(string(b), "98765") {
			t.Errorf("%s: the answer repeats an env name or value: %s", body, b)
		}
	}
	for _, e := range logged.All() {
		if line := fmt.Sprint(e.Message, e.ContextMap()); strings.Contains(line, "hunter2") || strings.Contains(line, "98765") {
			t.Errorf("logged an env name or value: %s", line)
		}
	}
}

// TestInfoStartedAtTellsRestarts: /v1/info's started_at is when the server
// was made, and a second server (a restarted daemon) has a later one, so a
// client can tell that remembered command ids are gone.
func TestInfoStartedAtTellsRestarts(t *testing.T) {
	startedAt := func(ts *testServer) time.Time {
		t.Helper()
		code, b := atDo(t, "GET", ts.URL+"/v1/info", "", nil)
		var info wire.Info
		if err := json.Unmarshal(b, &info); code != 200 || err != nil {
			t.Fatalf("info: %d %v %s", code, err, b)
		}
		return info.StartedAt
	}
	before := time.Now()
	first := newTestServer(t, nil)
	a := startedAt(first)
	if a.Before(before) || a.After(time.Now()) || a.Location() != time.UTC {
		t.Fatalf("started_at %v; want a UTC time between %v and now", a, before)
	}
	if again := startedAt(first); !again.Equal(a) {
		t.Fatalf("started_at changed from %v to %v without a restart", a, again)
	}
	second := newTestServer(t, nil)
	if b := startedAt(second); !b.After(a) {
		t.Fatalf("the second server's started_at %v is not after the first's %v", b, a)
	}
}
