package api

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
)

// GuardOptions configures Server.Guard.
type GuardOptions struct {
	// Name names the listener in the request log ("sandboxd-rest").
	Name string
	// RequireToken makes every request carry the daemon's token
	// (Authorization: Bearer …), whatever its route; 401 otherwise.
	RequireToken bool
	// Refuse writes the guard's own answers (403 foreign origin, 401 no
	// token, 503 too many bodies, 500 after a panic) in the listener's
	// shape; its codes are the v1 ones.
	Refuse func(w http.ResponseWriter, status int, code, msg string)
}

// Guard puts this server's bounds in front of the handler of another
// listener of the daemon (sandboxd's REST): the browser-origin rule
// (SANDBOX_ALLOWED_ORIGINS), without RequireToken the loopback-Host rule
// (httpx.LoopbackHost: 403 for any other Host, against DNS rebinding), the gate and progress rule of request bodies
// (shared with this server: the bodies of both listeners together stay
// within the fd budget), with RequireToken the token (the same file and
// re-reads), panic recovery and the request log. That listener's
// http.Server must use s.ConnState too, so that its connections count
// against the one connection cap.
func (s *Server) Guard(h http.Handler, g GuardOptions) http.Handler {
	log := s.log.Named(g.Name)
	refuse := func(w http.ResponseWriter, _ *http.Request, status int, code, msg string) {
		g.Refuse(w, status, code, msg)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				log.Error("handler panic", zap.Any("panic", p), zap.Stack("stack"))
				if !rec.wroteHeader {
					g.Refuse(rec, http.StatusInternalServerError, "internal", "internal error")
				}
			}
			status := rec.status()
			fields := []zap.Field{zap.String("method", r.Method), zap.String("path", r.URL.Path),
				zap.Int("status", status), zap.Int64("bytes", rec.bytes), zap.Duration("duration", time.Since(start))}
			if status >= 400 {
				fields = append(fields, zap.String("error_code", rec.errCode), zap.String("error_message", rec.errMsg))
			}
			log.Info("request", fields...)
		}()
		if !g.RequireToken && !httpx.LoopbackHost(r.Host) {
			// No token here: a page whose name was re-pointed at loopback
			// (DNS rebinding) must not pass on a matching Origin.
			g.Refuse(rec, http.StatusForbidden, "forbidden", "this listener asks no token, so it serves only the Host 127.0.0.1, [::1] or localhost (with any port), not "+strconv.Quote(r.Host))
			return
		}
		if !s.browserGateRefusing(rec, r, g.Refuse) {
			return
		}
		if g.RequireToken && !s.auth.allowed(r) {
			rec.Header().Set("WWW-Authenticate", "Bearer")
			g.Refuse(rec, http.StatusUnauthorized, "unauthorized", "a valid bearer token is required (Authorization: Bearer <token>)")
			return
		}
		r, release, ok := s.bodies.admitRefusing(rec, r, refuse)
		if !ok {
			return
		}
		defer release()
		h.ServeHTTP(rec, r)
	})
}

// HoldsToken reports whether v holds the daemon's current token anywhere
// (false without a token file): another listener never serves such a value
// ("Bearer <token>", the token with blanks around it, in a URL).
func (s *Server) HoldsToken(v string) bool {
	want := s.auth.token.Load()
	if s.auth.path == "" || want == nil || len(*want) == 0 {
		return false
	}
	return strings.Contains(v, string(*want))
}
