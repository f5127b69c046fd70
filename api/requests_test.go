package api

import (
	"fmt"
	"maps"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// mappingCase is a wire request type and what a route does with a body:
// decode it strictly and map it to what the runtime takes (requests.go).
type mappingCase struct {
	typ    reflect.Type
	schema string // its schema in openapi.yaml
	mapped func(t *testing.T, body string) (any, error)
	base   string            // a body that gives every field
	alt    map[string]string // for each JSON path, base with that field changed
}

// mapRoute decodes body as a route does into a T, then maps it with f.
func mapRoute[T any, R any](f func(*T, members) (R, error)) func(*testing.T, string) (any, error) {
	return func(t *testing.T, body string) (any, error) {
		r := httptest.NewRequest("POST", "/v1/commands", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		var v T
		m, err := decodeJSON(r, &v, false)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return f(&v, m)
	}
}

var mappingCases = []mappingCase{
	{
		typ: reflect.TypeFor[wire.CreateRequest](), schema: "CreateCommandRequest",
		mapped: mapRoute(createRequest),
		base:   `{"argv":["a"],"command":"b","envs":{"A":"1"},"cwd":"/x","timeout":2,"stdin":true,"command_id":"6f9619ff-8b86-d011-b42d-00c04fc964ff","pty":{"cols":80,"rows":24,"term":"vt100"}}`,
		alt: map[string]string{
			"argv":       `{"argv":["z"],"command":"b","envs":{"A":"1"},"cwd":"/x","timeout":2,"stdin":true,"command_id":"6f9619ff-8b86-d011-b42d-00c04fc964ff","pty":{"cols":80,"rows":24,"term":"vt100"}}`,
			"command":    `{"argv":["a"],"command":"z","envs":{"A":"1"},"cwd":"/x","timeout":2,"stdin":true,"command_id":"6f9619ff-8b86-d011-b42d-00c04fc964ff","pty":{"cols":80,"rows":24,"term":"vt100"}}`,
			"envs":       `{"argv":["a"],"command":"b","envs":{"A":"2"},"cwd":"/x","timeout":2,"stdin":true,"command_id":"6f9619ff-8b86-d011-b42d-00c04fc964ff","pty":{"cols":80,"rows":24,"term":"vt100"}}`,
			"cwd":        `{"argv":["a"],"command":"b","envs":{"A":"1"},"cwd":"/z","timeout":2,"stdin":true,"command_id":"6f9619ff-8b86-d011-b42d-00c04fc964ff","pty":{"cols":80,"rows":24,"term":"vt100"}}`,
			"timeout":    `{"argv":["a"],"command":"b","envs":{"A":"1"},"cwd":"/x","timeout":3,"stdin":true,"command_id":"6f9619ff-8b86-d011-b42d-00c04fc964ff","pty":{"cols":80,"rows":24,"term":"vt100"}}`,
			"stdin":      `{"argv":["a"],"command":"b","envs":{"A":"1"},"cwd":"/x","timeout":2,"stdin":false,"command_id":"6f9619ff-8b86-d011-b42d-00c04fc964ff","pty":{"cols":80,"rows":24,"term":"vt100"}}`,
			"command_id": `{"argv":["a"],"command":"b","envs":{"A":"1"},"cwd":"/x","timeout":2,"stdin":true,"command_id":"5d1c7f9e-3a4b-4c1d-9e2f-0a1b2c3d4e5f","pty":{"cols":80,"rows":24,"term":"vt100"}}`,
			"pty":        `{"argv":["a"],"command":"b","envs":{"A":"1"},"cwd":"/x","timeout":2,"stdin":true,"command_id":"6f9619ff-8b86-d011-b42d-00c04fc964ff"}`,
			"pty.cols":   `{"argv":["a"],"command":"b","envs":{"A":"1"},"cwd":"/x","timeout":2,"stdin":true,"command_id":"6f9619ff-8b86-d011-b42d-00c04fc964ff","pty":{"cols":81,"rows":24,"term":"vt100"}}`,
			"pty.rows":   `{"argv":["a"],"command":"b","envs":{"A":"1"},"cwd":"/x","timeout":2,"stdin":true,"command_id":"6f9619ff-8b86-d011-b42d-00c04fc964ff","pty":{"cols":80,"rows":25,"term":"vt100"}}`,
			"pty.term":   `{"argv":["a"],"command":"b","envs":{"A":"1"},"cwd":"/x","timeout":2,"stdin":true,"command_id":"6f9619ff-8b86-d011-b42d-00c04fc964ff","pty":{"cols":80,"rows":24,"term":"dumb"}}`,
		},
	},
	{
		typ: reflect.TypeFor[wire.StdinRequest](), schema: "StdinRequest",
		mapped: mapRoute(func(b *wire.StdinRequest, _ members) (any, error) {
			data, eof, err := stdinOf(*b)
			return fmt.Sprintf("%q %v", data, eof), err
		}),
		base: `{"data":"aGk=","encoding":"base64","eof":true}`,
		alt: map[string]string{
			"data":     `{"data":"aGo=","encoding":"base64","eof":true}`,
			"encoding": `{"data":"aGk=","encoding":"text","eof":true}`,
			"eof":      `{"data":"aGk=","encoding":"base64","eof":false}`,
		},
	},
	{
		typ: reflect.TypeFor[wire.SignalRequest](), schema: "SignalRequest",
		mapped: mapRoute(func(b *wire.SignalRequest, m members) (any, error) { return signalOf(*b, m) }),
		base:   `{"signal":"INT"}`,
		alt:    map[string]string{"signal": `{"signal":15}`},
	},
	{
		typ: reflect.TypeFor[wire.ResizeRequest](), schema: "ResizeRequest",
		mapped: mapRoute(func(b *wire.ResizeRequest, m members) (any, error) {
			cols, rows, err := resizeOf(*b, m)
			return [2]int{cols, rows}, err
		}),
		base: `{"cols":80,"rows":24}`,
		alt:  map[string]string{"cols": `{"cols":81,"rows":24}`, "rows": `{"cols":80,"rows":25}`},
	},
}

// jsonFieldPaths lists the JSON paths of struct t's fields, those of the
// structs it holds included ("pty", "pty.cols").
func jsonFieldPaths(t reflect.Type, prefix string) []string {
	var out []string
	for name, ft := range jsonFields(t) {
		out = append(out, prefix+name)
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			out = append(out, jsonFieldPaths(ft, prefix+name+".")...)
		}
	}
	slices.Sort(out)
	return out
}

// TestWireRequestFieldsAreMapped: every field of every wire request type
// reaches what the runtime is asked, through the one mapping of its route
// (a field added to wire and not mapped in requests.go fails here), and is
// a property of its schema in openapi.yaml, as each property is a field.
func TestWireRequestFieldsAreMapped(t *testing.T) {
	for _, tc := range mappingCases {
		paths := jsonFieldPaths(tc.typ, "")
		if known := slices.Sorted(maps.Keys(tc.alt)); !slices.Equal(paths, known) {
			t.Errorf("%v has the fields %q; this test knows %q: map a new one in requests.go and give it a case here", tc.typ, paths, known)
		}
		base, err := tc.mapped(t, tc.base)
		if err != nil {
			t.Fatalf("%v: %s: %v", tc.typ, tc.base, err)
		}
		for _, path := range paths {
			body, ok := tc.alt[path]
			if !ok {
				continue
			}
			got, err := tc.mapped(t, body)
			if err != nil {
				t.Errorf("%v: %s: %v", tc.typ, body, err)
				continue
			}
			if reflect.DeepEqual(got, base) {
				t.Errorf("%v: changing %q does not change what the runtime is asked (%+v): requests.go does not map it", tc.typ, path, got)
			}
		}
	}
}

// TestWireRequestsMatchTheSpec: the JSON fields of each wire request type
// (and of the attach frames, each the request of its route plus "type")
// are the properties of its schema in openapi.yaml, nested objects
// included; wire.ClientFrame, the one type a client sends frames with, has
// exactly the fields the server decodes frames into.
func TestWireRequestsMatchTheSpec(t *testing.T) {
	schemas := specLoad(t).Components.Schemas
	props := func(name string) []string {
		s := schemas[name]
		if s == nil || s.Value == nil {
			t.Fatalf("no schema %s in %s", name, specFile)
		}
		var out []string
		for p, ref := range s.Value.Properties {
			out = append(out, p)
			if sub := ref.Value; sub != nil && len(sub.Properties) > 0 && ref.Ref != "" {
				for q := range sub.Properties {
					out = append(out, p+"."+q)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	check := func(typ reflect.Type, schema string) {
		if fields, spec := jsonFieldPaths(typ, ""), props(schema); !slices.Equal(fields, spec) {
			t.Errorf("%v has the JSON fields %q; the spec's %s has %q", typ, fields, schema, spec)
		}
	}
	for _, tc := range mappingCases {
		check(tc.typ, tc.schema)
	}
	frames := map[string]reflect.Type{
		"AttachStdinFrame":  reflect.TypeFor[stdinFrame](),
		"AttachSignalFrame": reflect.TypeFor[signalFrame](),
		"AttachKillFrame":   reflect.TypeFor[frameType](),
		"AttachResizeFrame": reflect.TypeFor[resizeFrame](),
	}
	union := map[string]reflect.Type{}
	for schema, typ := range frames {
		check(typ, schema)
		maps.Copy(union, jsonFields(typ))
	}
	if client := jsonFields(reflect.TypeFor[wire.ClientFrame]()); !maps.Equal(client, union) {
		t.Errorf("wire.ClientFrame has the fields %v; the server decodes frames with %v", client, union)
	}
}
