package api

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

func TestDecodeJSONRefusesSmuggledKeys(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"argv":["true"],"ARGV":["echo","smuggled"]}`, `unknown field "ARGV"`},
		{`{"argv":["true"],"argv":["echo","smuggled"]}`, `field "argv" is given more than once`},
		{`{"Argv":["true"]}`, `unknown field "Argv"`},
		{`{"argv":["true"],"bogus":1}`, `unknown field "bogus"`},
	} {
		r, _ := http.NewRequest("POST", "/v1/commands", strings.NewReader(tc.body))
		r.Header.Set("Content-Type", "application/json")
		var b wire.CreateRequest
		_, err := decodeJSON(r, &b, false)
		if !errors.Is(err, errBadRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v; want a 400 naming %s", tc.body, err, tc.want)
		}
	}
	r, _ := http.NewRequest("POST", "/v1/commands", strings.NewReader(`{"argv":["a"],"envs":{"A":"1"},"timeout":2}`))
	r.Header.Set("Content-Type", "application/json")
	var b wire.CreateRequest
	if _, err := decodeJSON(r, &b, false); err != nil || b.Argv[0] != "a" || b.Envs["A"] != "1" {
		t.Fatalf("a plain body: %v %+v", err, b)
	}
}
