package api

import (
	"errors"
	"net/http"
	"syscall"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// The v1 error shape {"error": {"code", "message", "reason"?}} is
// wire.ErrorBody.
type (
	errorBody   = wire.ErrorBody
	errorDetail = wire.ErrorDetail
)

// errRequestTooLarge is returned by decodeJSON when the body passes its limit.
var errRequestTooLarge = errors.New("request body too large")

// errBadRequest marks a transport-level problem (bad JSON, bad query).
var errBadRequest = errors.New("bad request")

// errUnsupportedMediaType is returned by decodeJSON for a body whose
// Content-Type is not JSON.
var errUnsupportedMediaType = errors.New("unsupported media type")

// httpError is a transport error with its own message.
type httpError struct {
	kind error
	msg  string
}

func (e *httpError) Error() string { return e.msg }
func (e *httpError) Unwrap() error { return e.kind }

func badRequest(msg string) error { return &httpError{kind: errBadRequest, msg: msg} }

// statusOf is the one place that maps errors to HTTP statuses and codes.
func statusOf(err error) (status int, code string) {
	switch {
	case errors.Is(err, errBadRequest), errors.Is(err, runtime.ErrInvalid):
		return http.StatusBadRequest, "invalid_request"
	case errors.Is(err, errRequestTooLarge):
		return http.StatusRequestEntityTooLarge, "too_large"
	case errors.Is(err, errUnsupportedMediaType):
		return http.StatusUnsupportedMediaType, "unsupported_media_type"
	case errors.Is(err, errForbidden):
		return http.StatusForbidden, "forbidden"
	case errors.Is(err, runtime.ErrNotFound), errors.Is(err, errNoFile):
		return http.StatusNotFound, "not_found"
	case errors.Is(err, runtime.ErrGone):
		return http.StatusGone, "gone"
	case errors.Is(err, runtime.ErrConflict), errors.Is(err, errFileConflict):
		return http.StatusConflict, "conflict"
	case errors.Is(err, runtime.ErrFinished):
		return http.StatusConflict, "finished"
	case errors.Is(err, runtime.ErrStdinNotEnabled):
		return http.StatusConflict, "stdin_not_enabled"
	case errors.Is(err, runtime.ErrStdinClosed):
		return http.StatusConflict, "stdin_closed"
	case errors.Is(err, runtime.ErrNotTerminal):
		return http.StatusConflict, "not_a_terminal"
	case errors.Is(err, runtime.ErrSpawnFailed):
		return http.StatusUnprocessableEntity, "spawn_failed"
	case errors.Is(err, errTooManyWatches):
		return http.StatusTooManyRequests, "too_many_watches"
	case errors.Is(err, runtime.ErrTooManyRunning):
		return http.StatusTooManyRequests, "too_many_running"
	case errors.Is(err, runtime.ErrStdinFull):
		return http.StatusTooManyRequests, "stdin_full"
	case errors.Is(err, runtime.ErrShuttingDown):
		return http.StatusServiceUnavailable, "shutting_down"
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return http.StatusServiceUnavailable, "resource_exhausted" // out of fds: retry, not a server bug
	case errors.Is(err, errBodyTooSlow):
		return http.StatusRequestTimeout, "body_timeout"
	case errors.Is(err, runtime.ErrResourceExhausted):
		return http.StatusServiceUnavailable, "resource_exhausted"
	case errors.Is(err, errNoSpace):
		return http.StatusInsufficientStorage, "insufficient_storage"
	case errors.Is(err, errReadOnly):
		return http.StatusConflict, "read_only"
	case errors.Is(err, errBusy), errors.Is(err, runtime.ErrBusy):
		return http.StatusConflict, "busy"
	case errors.Is(err, runtime.ErrStateLost):
		return http.StatusConflict, "state_lost"
	case errors.Is(err, runtime.ErrTooManyContexts):
		return http.StatusTooManyRequests, "too_many_contexts"
	case errors.Is(err, errNoDescriptors):
		return http.StatusServiceUnavailable, "resource_exhausted"
	case errors.Is(err, errRangeNotSatisfiable):
		return http.StatusRequestedRangeNotSatisfiable, "range_not_satisfiable"
	case errors.Is(err, errPreconditionFailed):
		return http.StatusPreconditionFailed, "precondition_failed"
	default:
		return http.StatusInternalServerError, "internal"
	}
}

// fail writes err as a v1 error response.
func fail(w http.ResponseWriter, err error) {
	status, code := statusOf(err)
	var reason string
	var gone *runtime.GoneError
	if errors.As(err, &gone) {
		reason = string(gone.Reason)
	}
	var ctxGone *runtime.ContextGoneError
	if errors.As(err, &ctxGone) {
		reason = ctxGone.Reason
	}
	if status == http.StatusTooManyRequests || code == "resource_exhausted" {
		w.Header().Set("Retry-After", "1")
	}
	msg := err.Error()
	if status == http.StatusInternalServerError {
		msg = "internal error"
	}
	if rec := recorderOf(w); rec != nil {
		rec.err = err // for the log (a 500's details) and the spawn-failure class
	}
	writeError(w, status, code, msg, &reason)
}

func writeError(w http.ResponseWriter, status int, code, msg string, reason *string) {
	if rec := recorderOf(w); rec != nil {
		rec.errCode, rec.errMsg = code, msg
	}
	d := errorDetail{Code: code, Message: msg}
	if reason != nil {
		d.Reason = *reason
	}
	writeJSON(w, status, errorBody{Error: d})
}

// writeJSON writes v as the whole response. HTML characters are not escaped.
func writeJSON(w http.ResponseWriter, status int, v any) { httpx.WriteJSON(w, status, v) }

// recorderOf finds the request's statusRecorder below w, nil when there is none.
func recorderOf(w http.ResponseWriter) *statusRecorder {
	for {
		switch x := w.(type) {
		case *statusRecorder:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
}

// marshal encodes v without HTML escaping and without a trailing newline.
func marshal(v any) []byte { return httpx.Marshal(v) }

// File errors of /v1/files.
var (
	errForbidden    = errors.New("forbidden")     // the path resolves outside the base dir
	errNoFile       = errors.New("no such file")  // nothing at the path
	errFileConflict = errors.New("file conflict") // e.g. a non-empty directory without recursive

	// Filesystem errors (protocol.md §3 Files): never 500.
	errNoSpace       = errors.New("no space left")           // ENOSPC, EDQUOT → 507
	errReadOnly      = errors.New("read-only file system")   // EROFS → 409: the target's state, not the caller's rights
	errBusy          = errors.New("busy")                    // EBUSY (a mount point), ETXTBSY → 409
	errNoDescriptors = errors.New("out of file descriptors") // EMFILE, ENFILE → 503, worth a retry

	errRangeNotSatisfiable = errors.New("range not satisfiable") // a Range past the end → 416
	errPreconditionFailed  = errors.New("precondition failed")   // If-Match, If-Unmodified-Since → 412
)
