// Package rest serves sandboxd's Filesystem & Runtime REST API
// (kubernetes-sigs/agent-sandbox, packages/sandboxd/spec/filesystem/v1/
// filesystem.yaml; docs/sandboxd-rest.md) on a listener of its own:
// /v1/files/{path}, /v1/health and /v1/metadata, with sandboxd's shapes,
// status codes and error bodies ({"code": "NOT_FOUND", "message": …}),
// which differ from our v1 files API (api/files.go) on the main port.
//
// Every file operation goes through the base directory opened as an
// os.Root (with fsroot's atomic write, staged parents and same-mount
// removal), so neither `..`, nor a symlink, nor a component swapped in
// mid-request takes it outside. The connection, body and origin bounds and
// the token are the api server's (api.Server.Guard, wired in main).
package rest

import (
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/fsroot"
	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// Feature is what /v1/info announces on the main port when this listener
// is on.
const Feature = wire.FeatureSandboxdREST

// DefaultMetadataPrefix is the prefix of the environment variables
// /v1/metadata serves, as upstream's --metadata-env-prefix default.
const DefaultMetadataPrefix = "SANDBOX_"

// Options configures a Server.
type Options struct {
	// BaseDir is the sandbox root: every path is relative to it (an
	// absolute path under it is made relative, any other absolute path is
	// re-rooted below it, as upstream's pathutil.SanitizePath does).
	BaseDir string
	// Started is when the daemon started: /v1/health's uptime_seconds.
	Started time.Time
	// Environ is the environment /v1/metadata filters (the daemon's).
	Environ []string
	// MetadataPrefix selects the variables /v1/metadata serves
	// (DefaultMetadataPrefix when empty).
	MetadataPrefix string
	// IsSecret, when set, reports values that must never be served (the
	// daemon's token, anywhere in the value): such a variable is left out of /v1/metadata.
	IsSecret func(value string) bool
	Logger   *zap.Logger
}

// Server is the sandboxd REST handler. Create it with New.
type Server struct {
	opts     Options
	log      *zap.Logger
	draining atomic.Bool
	listings *fsroot.Budget
	bases    []string // absolute spellings of the base dir (baseNames)
	metadata func() map[string]string
	handler  http.Handler
}

// New returns a Server for opts.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.MetadataPrefix == "" {
		opts.MetadataPrefix = DefaultMetadataPrefix
	}
	if opts.Started.IsZero() {
		opts.Started = time.Now()
	}
	s := &Server{opts: opts, log: opts.Logger.Named("sandboxd-rest"), listings: fsroot.NewBudget(fsroot.ListBudgetBytes), bases: baseNames(opts.BaseDir)}
	s.metadata = sync.OnceValue(s.buildMetadata)
	s.handler = http.HandlerFunc(s.route)
	return s
}

// Handler returns the root handler. It never redirects: paths are
// resolved by the handlers themselves (ServeMux would answer `..` or `//`
// with a 301).
func (s *Server) Handler() http.Handler { return s.handler }

// SetDraining makes /v1/health answer 503 (the first step of shutdown).
func (s *Server) SetDraining() { s.draining.Store(true) }

// filesPrefix is the prefix of the file routes.
const filesPrefix = "/v1/files/"

func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, filesPrefix) || p == "/v1/files":
		rel := strings.TrimPrefix(strings.TrimPrefix(p, "/v1/files"), "/")
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			s.getFile(w, r, rel)
		case http.MethodPut:
			s.putFile(w, r, rel)
		case http.MethodDelete:
			s.deleteFile(w, r, rel)
		default:
			methodNotAllowed(w, r, "GET, HEAD, PUT, DELETE")
		}
	case p == "/v1/health":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, r, "GET, HEAD")
			return
		}
		s.health(w)
	case p == "/v1/metadata":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, r, "GET, HEAD")
			return
		}
		httpx.WriteJSON(w, http.StatusOK, metadataResponse{Env: s.metadataNow()})
	default:
		WriteError(w, http.StatusNotFound, CodeNotFound, "no route "+p)
	}
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	WriteError(w, http.StatusMethodNotAllowed, CodeInvalidArgument, r.Method+" is not allowed here; allowed: "+allow)
}

type healthResponse struct {
	Status        string `json:"status"`
	UptimeSeconds int64  `json:"uptime_seconds"`
}

func (s *Server) health(w http.ResponseWriter) {
	if s.draining.Load() {
		WriteError(w, http.StatusServiceUnavailable, CodeUnavailable, "sandboxd is shutting down")
		return
	}
	httpx.WriteJSON(w, http.StatusOK, healthResponse{Status: "ok", UptimeSeconds: int64(time.Since(s.opts.Started).Seconds())})
}

type metadataResponse struct {
	Env map[string]string `json:"env"`
}

// secretMarkers are the name parts that keep a variable out of
// /v1/metadata even under the prefix (upstream's list): the spec forbids
// serving credentials there, and untrusted code can ask on loopback.
var secretMarkers = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CRED", "KEY", "AUTH", "BEARER", "PRIVATE", "CERT"}

// buildMetadata filters the environment once (it does not change): the
// variables under the prefix whose names carry no secret marker.
func (s *Server) buildMetadata() map[string]string {
	env := map[string]string{}
	for _, kv := range s.opts.Environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, s.opts.MetadataPrefix) || SecretName(name) {
			continue
		}
		if _, dup := env[name]; !dup { // the first of duplicates wins, as getenv
			env[name] = value
		}
	}
	return env
}

// metadataNow is buildMetadata's map less the variables whose value is a
// secret now (Options.IsSecret: the token file is re-read, so this is
// asked at every request).
func (s *Server) metadataNow() map[string]string {
	all := s.metadata()
	if s.opts.IsSecret == nil {
		return all
	}
	out := make(map[string]string, len(all))
	for k, v := range all {
		if !s.opts.IsSecret(v) {
			out[k] = v
		}
	}
	return out
}

// SecretName reports whether a variable's name looks like it holds a
// credential.
func SecretName(name string) bool {
	upper := strings.ToUpper(name)
	for _, m := range secretMarkers {
		if strings.Contains(upper, m) {
			return true
		}
	}
	return false
}

// openRoot opens the base directory.
func (s *Server) openRoot() (*os.Root, error) { return os.OpenRoot(s.opts.BaseDir) }
