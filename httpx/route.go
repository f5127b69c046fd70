package httpx

import (
	"net/http"
	"strings"
)

// Route is one path a group of handlers adds to the server (api.Options
// Routes). The server applies the shared middleware to it (request id and
// log, metrics, origin check, body limits, connection cap), dispatches its
// methods (a wrong one gets 405 with Allow) and checks the bearer token.
type Route struct {
	Pattern string                      // ServeMux pattern without a method, e.g. "/execute" or "/list/{path...}"
	Methods map[string]http.HandlerFunc // by method; "GET" also answers HEAD unless HEAD is listed or NoHead
	NoHead  bool                        // HEAD is 405, not GET without a body
	Public  bool                        // no token required
	// Raw serves the route before ServeMux, for every path that starts
	// with the prefix of Pattern (the part before "{path...}") and for
	// that prefix without its slash: the path is never cleaned nor
	// redirected, and the handler reads it from r.URL (RawPrefix).
	Raw bool
	// Refuse writes the framework's own error answers of this route (405)
	// in its family's shape; nil means the v1 error body.
	Refuse func(w http.ResponseWriter, status int, code, msg string)
}

// RawPrefix is the path prefix of a Raw route: Pattern up to "{path...}".
func (r Route) RawPrefix() string {
	p, _, _ := strings.Cut(r.Pattern, "{")
	return p
}
