package rest

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"syscall"

	"github.com/sandbox-runtime/sandbox-runtime/fsroot"
	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	sysErrno "github.com/sandbox-runtime/sandbox-runtime/internal/errno"
)

// The codes of sandboxd's error body (filesystem.yaml's Error.code; the
// names are gRPC's status codes, as upstream uses them).
const (
	CodeInvalidArgument   = "INVALID_ARGUMENT"
	CodeNotFound          = "NOT_FOUND"
	CodePermissionDenied  = "PERMISSION_DENIED"
	CodeConflict          = "CONFLICT"
	CodeUnavailable       = "UNAVAILABLE"
	CodeInternal          = "INTERNAL"
	CodeResourceExhausted = "RESOURCE_EXHAUSTED"
	CodeUnauthenticated   = "UNAUTHENTICATED"
)

// apiError is sandboxd's error body.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// WriteError writes sandboxd's error body.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	httpx.NoteError(w, code, msg)
	httpx.WriteJSON(w, status, apiError{Code: code, Message: msg})
}

// Refuse writes an answer of the shared guards (api.Server.Guard: origin,
// token, bodies in flight, whose codes are the v1 ones) in sandboxd's
// shape.
func Refuse(w http.ResponseWriter, status int, code, msg string) {
	switch code {
	case "forbidden":
		code = CodePermissionDenied
	case "unauthorized":
		code = CodeUnauthenticated
	case "too_busy":
		code = CodeResourceExhausted
	case "not_found":
		code = CodeNotFound
	case "method_not_allowed", "invalid_request":
		code = CodeInvalidArgument
	default:
		code = strings.ToUpper(code)
	}
	WriteError(w, status, code, msg)
}

// fileErr is an error answer of a file route.
type fileErr struct {
	status int
	code   string
	msg    string
}

func (e *fileErr) Error() string { return e.msg }

func fail(w http.ResponseWriter, err error) {
	var fe *fileErr
	if errors.As(err, &fe) {
		WriteError(w, fe.status, fe.code, fe.msg)
		return
	}
	WriteError(w, http.StatusInternalServerError, CodeInternal, err.Error())
}

func invalid(format string, a ...any) error {
	return &fileErr{http.StatusBadRequest, CodeInvalidArgument, fmt.Sprintf(format, a...)}
}

// errEscape is the answer for a path that leaves the sandbox root
// (upstream's message).
var errEscape = &fileErr{http.StatusForbidden, CodePermissionDenied, "path traversal outside sandbox root is forbidden"}

// errMissing is the answer for a path that does not exist (upstream's
// message).
var errMissing = &fileErr{http.StatusNotFound, CodeNotFound, "path does not exist within the sandbox"}

// classify maps a file system error about rel to its answer. Every errno a
// client can cause or a full disk gives has a status of its own: 500
// INTERNAL is left for what nobody expected.
func (s *Server) classify(err error, rel string) error {
	switch errno := sysErrno.Of(err); {
	case fsroot.IsEscape(err):
		return errEscape
	case errors.Is(err, fs.ErrNotExist), errno == syscall.ENOTDIR, errno == syscall.ELOOP:
		return errMissing
	case errors.Is(err, fs.ErrPermission):
		return &fileErr{http.StatusForbidden, CodePermissionDenied, "permission denied"}
	case errno == syscall.EROFS:
		return &fileErr{http.StatusForbidden, CodePermissionDenied, fmt.Sprintf("%q is on a read-only file system", rel)}
	case errno == syscall.ENAMETOOLONG, errno == syscall.EINVAL:
		return invalid("invalid path %q: %v", rel, errno)
	case errno == syscall.ENOTEMPTY, errno == syscall.EEXIST, errno == syscall.EBUSY, errno == syscall.ETXTBSY:
		return &fileErr{http.StatusConflict, CodeConflict, fmt.Sprintf("%q: %v", rel, errno)}
	case errno == syscall.ENOSPC, errno == syscall.EDQUOT:
		return &fileErr{http.StatusInsufficientStorage, CodeResourceExhausted, fmt.Sprintf("no space left for %q: %v", rel, errno)}
	case errno == syscall.EMFILE, errno == syscall.ENFILE:
		return &fileErr{http.StatusServiceUnavailable, CodeResourceExhausted, fmt.Sprintf("cannot open %q now: %v", rel, errno)}
	}
	s.log.Warn("file operation failed", zapPath(rel), zapErr(err))
	return err
}
