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
	"strconv"
	"strings"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
)

// maxJSONBody is the limit on a JSON request body (protocol.md §3: 1 MiB).
const maxJSONBody = httpx.MaxJSONBody

// decodeJSON decodes the body into v: exactly one JSON value, no unknown
// fields, at most maxJSONBody bytes, sent with a JSON Content-Type (415
// otherwise: a browser page cannot send one without a CORS preflight). An
// empty body decodes as {} when allowEmpty is set, whatever its type.
func decodeJSON(r *http.Request, v any, allowEmpty bool) error {
	leave, err := decodeJSONTurn(r, v, allowEmpty)
	leave()
	return err
}

// decodeJSONTurn is decodeJSON for a caller that goes on using what a
// large body decoded into (a create's envs, while the command starts): it
// returns with the body's decode turn still held, and leave (never nil)
// gives it back.
func decodeJSONTurn(r *http.Request, v any, allowEmpty bool) (leave func(), _ error) {
	leave = func() {}
	data, err := httpx.ReadBody(nil, r, maxJSONBody)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return leave, &httpError{kind: errRequestTooLarge, msg: fmt.Sprintf("request body is over %d bytes", maxJSONBody)}
		}
		return leave, badRequest("reading the body: " + err.Error())
	}
	if len(data) > 0 && !isJSONType(r.Header.Get("Content-Type")) {
		ct := r.Header.Get("Content-Type")
		if ct == "" {
			ct = "none"
		}
		return leave, &httpError{kind: errUnsupportedMediaType, msg: fmt.Sprintf("the body must be sent with Content-Type: application/json (got %s)", ct)}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if allowEmpty {
			return leave, nil
		}
		return leave, badRequest("the request body is empty; a JSON object is required")
	}
	if leave, err = httpx.EnterDecode(r.Context(), len(data)); err != nil {
		return func() {}, badRequest(err.Error())
	}
	if err := checkKeys(data, v); err != nil {
		return leave, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return leave, badRequest(describeJSONError(err))
	}
	if dec.More() {
		return leave, badRequest("the body holds more than one JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return leave, badRequest("the body holds more than one JSON value")
	}
	return leave, nil
}

// describeJSONError turns encoding/json errors into messages that name the
// field at fault.
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return fmt.Sprintf("the body must be a JSON object, not %s", te.Value)
		}
		return fmt.Sprintf("field %q must be %s, not %s", field, jsonKind(te.Type.Kind().String()), te.Value)
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

func jsonKind(k string) string {
	switch k {
	case "slice":
		return "an array"
	case "map", "struct":
		return "an object"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "float64", "int", "int64":
		return "a number"
	}
	return k
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

// checkKeys refuses what encoding/json would quietly accept in a top-level
// object decoded into the struct v points to: a key that matches a field only
// case-insensitively ("ARGV") and a key given twice. Either would let a proxy
// that checks the exact key see one request while the runtime runs another.
// Anything that is not an object is left for the decoder to report.
func checkKeys(data []byte, v any) error {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	names := map[string]bool{}
	for f := range t.Elem().Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			names[name] = true
		}
	}
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
		switch {
		case !names[key]:
			return badRequest(fmt.Sprintf("unknown field %q", key))
		case seen[key]:
			return badRequest(fmt.Sprintf("field %q is given more than once", key))
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}
