package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// maxJSONBody is the limit on a JSON request body (protocol.md §3: 1 MiB).
const maxJSONBody = httpx.MaxJSONBody

// decodeJSON decodes the body into v, a wire request type: exactly one
// JSON value, no unknown fields, at most maxJSONBody bytes, sent with a
// JSON Content-Type (415 otherwise: a browser page cannot send one without
// a CORS preflight). An empty body decodes as {} when allowEmpty is set,
// whatever its type. The members say what the body gave that v cannot
// hold (requests.go maps the two to the runtime's request).
func decodeJSON(r *http.Request, v any, allowEmpty bool) (members, error) {
	leave, m, err := decodeJSONTurn(r, v, allowEmpty)
	leave()
	return m, err
}

// decodeJSONTurn is decodeJSON for a caller that goes on using what a
// large body decoded into (a create's envs, while the command starts): it
// returns with the body's decode turn still held, and leave (never nil)
// gives it back.
func decodeJSONTurn(r *http.Request, v any, allowEmpty bool) (leave func(), _ members, _ error) {
	leave = func() {}
	data, err := httpx.ReadBody(nil, r, maxJSONBody)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return leave, members{}, &httpError{kind: errRequestTooLarge, msg: fmt.Sprintf("request body is over %d bytes", maxJSONBody)}
		}
		return leave, members{}, badRequest("reading the body: " + err.Error())
	}
	if len(data) > 0 && !isJSONType(r.Header.Get("Content-Type")) {
		ct := r.Header.Get("Content-Type")
		if ct == "" {
			ct = "none"
		}
		return leave, members{}, &httpError{kind: errUnsupportedMediaType, msg: fmt.Sprintf("the body must be sent with Content-Type: application/json (got %s)", ct)}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if allowEmpty {
			return leave, members{}, nil
		}
		return leave, members{}, badRequest("the request body is empty; a JSON object is required")
	}
	if leave, err = httpx.EnterDecode(r.Context(), len(data)); err != nil {
		return func() {}, members{}, badRequest(err.Error())
	}
	m, err := decodeStrict(data, v)
	return leave, m, err
}

// decodeStrict decodes data, exactly one JSON value, into v (a pointer to
// a wire type) as strictly as checkKeys asks, and returns the members it
// gave. Its errors are 400s that speak of "the body".
func decodeStrict(data []byte, v any) (members, error) {
	m, err := checkKeys(data, v)
	if err != nil {
		return m, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return m, badRequest(describeJSONError(err, v))
	}
	if dec.More() {
		return m, badRequest("the body holds more than one JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return m, badRequest("the body holds more than one JSON value")
	}
	return m, nil
}

// members is what a strictly checked JSON object said that its wire type
// cannot hold: the members it gave with a value other than null, by JSON
// path ("timeout", "pty.cols"), and the maps that held a null value
// ("envs"). Decoded into a wire type, "command": "" and no command, a
// timeout of 0 and none, an env value null and "" look the same; the
// mapping to the runtime's request (requests.go) asks here.
type members struct {
	given, nullIn []string
}

// has reports whether the member at path was given, and not as null.
func (m members) has(path string) bool { return slices.Contains(m.given, path) }

// nullInMap reports whether the map at path held a null value.
func (m members) nullInMap(path string) bool { return slices.Contains(m.nullIn, path) }

// describeJSONError turns encoding/json errors into messages that name the
// field at fault by its JSON path ("pty.cols"), never by a Go type; v is
// what was decoded into.
func describeJSONError(err error, v any) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		if te.Field == "" {
			return fmt.Sprintf("the body must be a JSON object, not %s", te.Value)
		}
		field, inMap := jsonPath(reflect.TypeOf(v), te.Field)
		got, isNumber := strings.CutPrefix(te.Value, "number ")
		if !isNumber {
			got = jsonValueKind(te.Value)
		}
		if te.Type == reflect.TypeFor[wire.Signal]() {
			return signalTypeMessage(field, got, isNumber)
		}
		if inMap {
			// A value of a map such as "envs": neither its key nor the
			// value is repeated (either may carry a secret).
			if isNumber {
				got = "a number"
			}
			return fmt.Sprintf("every value of field %q must be %s; one is %s (names and values are not repeated here)", field, jsonKind(te.Type.Kind()), got)
		}
		switch te.Type.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if isNumber {
				if f, perr := strconv.ParseFloat(got, 64); perr == nil && f == math.Trunc(f) {
					if strings.ContainsAny(got, ".eE") {
						// 80.0 and 8e1 are whole, but written as decimals.
						return fmt.Sprintf("field %q must be an integer written without a fraction part or exponent, not %s", field, got)
					}
					return fmt.Sprintf("field %q must be a whole number within range, not %s", field, got)
				}
			}
			return fmt.Sprintf("field %q must be a whole number, not %s", field, got)
		}
		return fmt.Sprintf("field %q must be %s, not %s", field, jsonKind(te.Type.Kind()), got)
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "invalid JSON: the body ends early"
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return "unknown field " + f
	}
	return "invalid JSON: " + strings.TrimPrefix(msg, "json: ")
}

// signalTypeMessage says why a JSON value that is not a string is no
// signal (wire.Signal takes a name or a whole number); got is the number
// as written, or the kind of the value.
func signalTypeMessage(field, got string, isNumber bool) string {
	if isNumber {
		if f, err := strconv.ParseFloat(got, 64); err == nil {
			if f == math.Trunc(f) && strings.ContainsAny(got, ".eE") {
				return fmt.Sprintf("field %q must be an integer written without a fraction part or exponent, not %s", field, got)
			}
			return fmt.Sprintf("field %q must be a signal name like \"SIGINT\" or a whole number, not %s", field, got)
		}
	}
	return fmt.Sprintf("field %q must be a signal name like \"SIGINT\" or a number", field)
}

// jsonPath turns the Field of a json.UnmarshalTypeError, which names the
// Go field of an embedded struct among the JSON names ("resizeBody.cols"),
// into the JSON path of the value ("cols"), by walking t. A path into a map
// ends at the map ("envs", inMap true): its keys are data (env names), never
// repeated in a message.
func jsonPath(t reflect.Type, field string) (path string, inMap bool) {
	var out []string
	for _, comp := range strings.Split(field, ".") {
		for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			t = t.Elem()
		}
		if t != nil && t.Kind() == reflect.Map {
			return strings.Join(out, "."), true
		}
		if t == nil || t.Kind() != reflect.Struct {
			out = append(out, comp)
			t = nil
			continue
		}
		if ft, ok := jsonFields(t)[comp]; ok {
			out = append(out, comp)
			t = ft
			continue
		}
		if sf, ok := t.FieldByName(comp); ok && sf.Anonymous {
			t = sf.Type // an embedded struct: its fields are the parent's
			continue
		}
		out = append(out, comp)
		t = nil
	}
	// encoding/json names a map's value by the map's own path ("envs"):
	// the error is then about one of its values.
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return strings.Join(out, "."), t != nil && t.Kind() == reflect.Map
}

// jsonValueKind names the kind of JSON value an UnmarshalTypeError saw.
func jsonValueKind(v string) string {
	switch v {
	case "array", "object":
		return "an " + v
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "number":
		return "a number"
	}
	return v
}

func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return k.String()
}

// query reads the URL query once and reports unknown or repeated
// parameters as errors, so a typo is not silently ignored.
type query struct {
	v   url.Values
	err error
}

func parseQuery(r *http.Request, allowed ...string) *query {
	v, err := url.ParseQuery(r.URL.RawQuery)
	q := &query{v: v}
	if err != nil {
		q.err = badRequest("invalid query string: " + err.Error())
		return q
	}
	for k, vals := range v {
		known := false
		for _, a := range allowed {
			known = known || a == k
		}
		if !known {
			q.err = badRequest(fmt.Sprintf("unknown query parameter %q", k))
			return q
		}
		if len(vals) > 1 {
			q.err = badRequest(fmt.Sprintf("query parameter %q is given %d times", k, len(vals)))
			return q
		}
	}
	return q
}

func (q *query) has(name string) bool { _, ok := q.v[name]; return ok }

// boolean parses true/false/1/0.
func (q *query) boolean(name string, def bool) bool {
	if q.err != nil || !q.has(name) {
		return def
	}
	b, err := strconv.ParseBool(q.v.Get(name))
	if err != nil {
		q.err = badRequest(fmt.Sprintf("query parameter %q must be true or false, not %q", name, q.v.Get(name)))
	}
	return b
}

// seconds parses a non-negative number of seconds, clamped to max.
func (q *query) seconds(name string, def, max float64) float64 {
	if q.err != nil || !q.has(name) {
		return def
	}
	f, err := strconv.ParseFloat(q.v.Get(name), 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		q.err = badRequest(fmt.Sprintf("query parameter %q must be a non-negative number of seconds, not %q", name, q.v.Get(name)))
		return def
	}
	return math.Min(f, max)
}

// port parses a port number 1–65535; 0 when absent.
func (q *query) port(name string) int {
	if q.err != nil || !q.has(name) {
		return 0
	}
	n, err := strconv.Atoi(q.v.Get(name))
	if err != nil || n < 1 || n > 65535 {
		q.err = badRequest(fmt.Sprintf("query parameter %q must be a port number 1-65535, not %q", name, q.v.Get(name)))
		return 0
	}
	return n
}

// cursor parses a non-negative integer.
func (q *query) cursor(name string) int64 {
	if q.err != nil || !q.has(name) {
		return 0
	}
	n, err := strconv.ParseInt(q.v.Get(name), 10, 64)
	if err != nil || n < 0 {
		q.err = badRequest(fmt.Sprintf("query parameter %q must be a non-negative integer, not %q", name, q.v.Get(name)))
		return 0
	}
	return n
}

// parseStreamQuery parses the query of a stream that resumes by a sequence
// number (a command's or an execution's output, a watch's events): cursor
// (from 0), follow (true unless false) and max_wait (seconds, clamped to
// maxWindowSeconds), and no other parameter; err is the first error found.
func parseStreamQuery(r *http.Request) (cursor int64, follow bool, window float64, err error) {
	q := parseQuery(r, "cursor", "follow", "max_wait")
	cursor, follow, window = q.stream()
	return cursor, follow, window, q.err
}

// parseOutputQuery is parseStreamQuery for a command's output, which also
// takes hold (q.hold).
func parseOutputQuery(r *http.Request) (cursor int64, follow bool, window float64, hold time.Duration, err error) {
	q := parseQuery(r, "cursor", "follow", "max_wait", "hold")
	cursor, follow, window = q.stream()
	hold = q.hold()
	return cursor, follow, window, hold, q.err
}

// stream parses a stream's cursor, follow and max_wait.
func (q *query) stream() (cursor int64, follow bool, window float64) {
	return q.cursor("cursor"), q.boolean("follow", true), q.seconds("max_wait", defaultWindowSeconds, maxWindowSeconds)
}

// hold parses an output stream's hold (seconds, clamped to runtime.MaxHold;
// 0 when absent: no hold), protocol.md §4 "Holding the producer".
func (q *query) hold() time.Duration {
	return secondsDur(q.seconds("hold", 0, runtime.MaxHold.Seconds()))
}

// checkKeys refuses what encoding/json would quietly accept in an object
// decoded into the struct v points to, at every depth (the "pty" object as
// much as the top level): a key that matches a field only
// case-insensitively ("ARGV", "pty.Cols") and a key given twice (in a
// struct or a map such as "envs"). Either would let a proxy that checks the
// exact key see one request while the runtime runs another. Anything that
// is not the JSON kind the field wants is left for the decoder to report.
// It returns the members the object gave (see members).
func checkKeys(data []byte, v any) (members, error) {
	var m members
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer {
		return m, nil
	}
	err := checkValue(json.RawMessage(data), t.Elem(), "", &m)
	return m, err
}

// checkValue checks one JSON value against type t and records its members
// in m; path is its JSON path ("" at the top).
func checkValue(data json.RawMessage, t reflect.Type, path string, m *members) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeOf(json.RawMessage(nil)) {
		return nil
	}
	join := func(key string) string {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	switch t.Kind() {
	case reflect.Struct:
		fields := jsonFields(t)
		return eachMember(data, func(key string, val json.RawMessage, seen bool) error {
			ft, ok := fields[key]
			switch {
			case !ok:
				return badRequest(fmt.Sprintf("unknown field %q", join(key)))
			case seen:
				return badRequest(fmt.Sprintf("field %q is given more than once", join(key)))
			}
			if !isNull(val) {
				m.given = append(m.given, join(key))
			}
			return checkValue(val, ft, join(key), m)
		})
	case reflect.Map:
		return eachMember(data, func(key string, val json.RawMessage, seen bool) error {
			if seen {
				return badRequest(fmt.Sprintf("field %q gives one key more than once (names are not repeated here)", path))
			}
			if isNull(val) && !slices.Contains(m.nullIn, path) {
				m.nullIn = append(m.nullIn, path)
			}
			// The key is data (an env name), never repeated in a message.
			return checkValue(val, t.Elem(), path+"[…]", m)
		})
	case reflect.Slice, reflect.Array:
		var elems []json.RawMessage
		if json.Unmarshal(data, &elems) != nil {
			return nil
		}
		for i, e := range elems {
			if err := checkValue(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), m); err != nil {
				return err
			}
		}
	}
	return nil
}

func isNull(val json.RawMessage) bool { return string(bytes.TrimSpace(val)) == "null" }

// eachMember calls f for each member of the JSON object data, in order,
// with whether its key came before; nothing when data is not an object.
func eachMember(data json.RawMessage, f func(key string, val json.RawMessage, seen bool) error) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil
		}
		if err := f(key, val, seen[key]); err != nil {
			return err
		}
		seen[key] = true
	}
	return nil
}

// jsonFields maps the JSON names of struct t's fields (those of embedded
// structs without a name of their own included) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	names := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
		case name == "" && f.Anonymous:
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, ok := names[k]; !ok {
						names[k] = v
					}
				}
			}
		case name != "":
			names[name] = f.Type
		case f.IsExported():
			names[f.Name] = f.Type
		}
	}
	return names
}
