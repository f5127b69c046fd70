package api

import (
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// Browser requests (protocol.md §1). The daemon's clients (the broker, the
// router, the SDK, curl) send no Origin header; a browser always does on a
// POST, PUT, DELETE and a WebSocket upgrade, and a page of another site
// can send a "simple" POST (text/plain, no CORS preflight). So:
//
//   - a request with an Origin other than the daemon's own host (the
//     request's Host) is 403 forbidden, on every route, WebSocket upgrades
//     included, unless the origin is allowed by configuration
//     (SANDBOX_ALLOWED_ORIGINS). Allowed origins also get CORS headers and
//     answers to preflight requests, so a browser application can use the
//     API;
//   - a v1 request with a JSON body must say so (decodeJSON): 415
//     otherwise, which a page cannot do without a preflight.
//
// A page whose name resolves to the daemon (DNS rebinding) has a matching
// Host and Origin and is not refused here; a token file
// (SANDBOX_RUNTIME_TOKEN_FILE) is what stops it, as the page cannot know
// the token.

// originPolicy says which browser origins may call the daemon besides its
// own host. It is read-only after New.
type originPolicy struct {
	any     bool            // "*": every origin
	allowed map[string]bool // canonical origins (see canonicalOrigin)
}

func newOriginPolicy(list string) originPolicy {
	p := originPolicy{allowed: map[string]bool{}}
	for _, o := range strings.Split(list, ",") {
		o = strings.TrimSpace(o)
		if o == "*" {
			p.any = true
			continue
		}
		if c, err := canonicalOrigin(o); err == nil {
			p.allowed[c] = true
		}
	}
	return p
}

// ParseAllowedOrigins checks a comma-separated list of origins for
// SANDBOX_ALLOWED_ORIGINS: each is "*" or scheme://host[:port] (http or
// https, no path). It returns them in canonical form.
func ParseAllowedOrigins(list string) ([]string, error) {
	var out []string
	for _, o := range strings.Split(list, ",") {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		if o == "*" {
			out = append(out, o)
			continue
		}
		c, err := canonicalOrigin(o)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// canonicalOrigin returns o as a browser sends it: lower-case scheme and
// host, no default port, no trailing slash.
func canonicalOrigin(o string) (string, error) {
	u, err := url.Parse(strings.TrimSuffix(o, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("origin %q is not of the form http(s)://host[:port]", o)
	}
	host := strings.ToLower(u.Host)
	if port := u.Port(); (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		host = strings.ToLower(u.Hostname())
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
	}
	return u.Scheme + "://" + host, nil
}

// verdict classifies the request's Origin: none or the daemon's own host
// (nothing to do), allowed by configuration (CORS headers), or refused.
type verdict uint8

const (
	originNone verdict = iota
	originAllowed
	originRefused
)

func (p originPolicy) check(r *http.Request) verdict {
	vals := r.Header.Values("Origin")
	if len(vals) == 0 {
		return originNone
	}
	if len(vals) > 1 {
		return originRefused
	}
	o := vals[0]
	if u, err := url.Parse(o); err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host) {
		return originNone
	}
	if p.any {
		return originAllowed
	}
	if c, err := canonicalOrigin(o); err == nil && p.allowed[c] {
		return originAllowed
	}
	return originRefused
}

// allows is the WebSocket upgrader's CheckOrigin (the middleware has
// refused foreign origins already; this keeps the upgrade safe on its own).
func (p originPolicy) allows(r *http.Request) bool { return p.check(r) != originRefused }

// CORS headers for an allowed origin.
const (
	corsAllowMethods  = "GET, HEAD, POST, PUT, DELETE"
	corsAllowHeaders  = "Authorization, Content-Type, X-Request-ID, Range"
	corsExposeHeaders = "Location, Retry-After, X-Request-ID, Sandbox-Runtime-Version, Content-Range, Accept-Ranges"
	corsMaxAge        = "600"
)

// browserGate applies the origin policy to r: it answers a refused origin
// (403) and a preflight of an allowed one (204), adds the CORS headers for
// an allowed origin, and returns whether the request goes on.
func (s *Server) browserGate(w http.ResponseWriter, r *http.Request) bool {
	return s.browserGateRefusing(w, r, func(w http.ResponseWriter, status int, code, msg string) {
		writeError(w, status, code, msg, nil)
	})
}

// browserGateRefusing is browserGate writing its 403 with refuse.
func (s *Server) browserGateRefusing(w http.ResponseWriter, r *http.Request, refuse func(w http.ResponseWriter, status int, code, msg string)) bool {
	switch s.origins.check(r) {
	case originRefused:
		refuse(w, http.StatusForbidden, "forbidden", "requests from the browser origin "+fmt.Sprintf("%q", r.Header.Get("Origin"))+" are not allowed (see SANDBOX_ALLOWED_ORIGINS)")
		return false
	case originAllowed:
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", r.Header.Get("Origin"))
		h.Add("Vary", "Origin")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", corsAllowMethods)
			h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
			h.Set("Access-Control-Max-Age", corsMaxAge)
			w.WriteHeader(http.StatusNoContent)
			return false
		}
		h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
	}
	return true
}

// isJSONType reports whether a Content-Type names JSON: application/json
// or application/*+json, any parameters (charset) allowed.
func isJSONType(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	main, sub, _ := strings.Cut(mt, "/")
	return main == "application" && (sub == "json" || strings.HasSuffix(sub, "+json"))
}
