package legacy

import (
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// Options configures the legacy handlers.
type Options struct {
	BaseDir string // SANDBOX_BASE_DIR: the root of /upload, /download, /list, /exists
	// HeartbeatInterval is the silence after which a running /execute
	// writes a space (its answer is 200 from the start). Default 10 s.
	HeartbeatInterval time.Duration
	Logger            *zap.Logger
}

// Handlers serves the legacy routes for one Manager. Create it with New and
// mount Routes on the api server (with Refuse as its Options.Refuse).
type Handlers struct {
	m    *runtime.Manager
	opts Options
	log  *zap.Logger
}

// New returns the legacy handlers of m.
func New(m *runtime.Manager, opts Options) *Handlers {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 10 * time.Second
	}
	return &Handlers{m: m, opts: opts, log: opts.Logger.Named("legacy")}
}

// Feature is the /v1/info feature of the legacy routes, for
// api.Options.Features beside Routes (wire.FeatureLegacy).
const Feature = "legacy"

// Routes are the legacy routes, for api.Options.Routes. Framework errors
// (405) are answered in FastAPI's {"detail": …} shape; HEAD is 405 where
// the Python server had no HEAD.
func (s *Handlers) Routes() []httpx.Route {
	return []httpx.Route{
		{Pattern: "/{$}", Methods: map[string]http.HandlerFunc{"GET": s.legacyRoot}, NoHead: true, Public: true, Refuse: Refuse},
		{Pattern: "/execute", Methods: map[string]http.HandlerFunc{"POST": s.legacyExecute}, Refuse: Refuse},
		{Pattern: "/upload", Methods: map[string]http.HandlerFunc{"POST": s.legacyUpload}, Refuse: Refuse},
		pathRoute("/download/", s.legacyDownloadPath),
		pathRoute("/list/", s.legacyListPath),
		pathRoute("/exists/", s.legacyExistsPath),
	}
}

// Refuse writes a framework error as FastAPI did, {"detail": msg}, for
// api.Options.Refuse (every path outside /v1 is a legacy client's).
func Refuse(w http.ResponseWriter, status int, code, msg string) {
	httpx.NoteError(w, code, msg) // the log and the metrics name the refusal (too_busy), not only its status
	httpx.WriteJSON(w, status, map[string]string{"detail": msg})
}

// writeJSON writes a legacy answer; the message of an error answer
// ({"detail"} or {"message"}) goes to the request log.
func writeJSON(w http.ResponseWriter, status int, v any) {
	if status >= 400 {
		httpx.NoteError(w, httpx.StatusCode(status), errorText(v))
	}
	httpx.WriteJSON(w, status, v)
}

// errorText is the text of a legacy error body.
func errorText(v any) string {
	switch m := v.(type) {
	case map[string]string:
		return m["detail"] + m["message"]
	case map[string]any:
		for _, k := range []string{"detail", "message"} {
			if t, ok := m[k].(string); ok {
				return t
			} else if m[k] != nil {
				return string(httpx.Marshal(m[k]))
			}
		}
	}
	return ""
}
