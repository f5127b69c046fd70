package runtime

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by this package wraps exactly one of
// them (test with errors.Is); the api package maps them to HTTP statuses.
var (
	// ErrInvalid: the request is malformed (empty argv, bad quoting, relative or
	// missing cwd, bad env name, timeout <= 0, bad id, bad cursor, bad signal).
	ErrInvalid = errors.New("invalid request")
	// ErrNotFound: no command with that id was ever seen (or the id is not a UUID).
	ErrNotFound = errors.New("not found")
	// ErrGone: the id was seen but its handle was evicted or expired; see GoneError.
	ErrGone = errors.New("gone")
	// ErrConflict: a create re-used a command_id with a different request.
	ErrConflict = errors.New("conflict")
	// ErrFinished: the command has already finished (stdin, signal).
	ErrFinished = errors.New("finished")
	// ErrStdinNotEnabled: the command was started without "stdin": true.
	ErrStdinNotEnabled = errors.New("stdin not enabled")
	// ErrStdinClosed: stdin was already closed with eof.
	ErrStdinClosed = errors.New("stdin closed")
	// ErrStdinFull: the write does not fit whole in the stdin queue; nothing was queued.
	ErrStdinFull = errors.New("stdin full")
	// ErrTooManyRunning: the running limit is reached; nothing was started.
	ErrTooManyRunning = errors.New("too many running")
	// ErrSpawnFailed: the executable could not be started; no command was created.
	ErrSpawnFailed = errors.New("spawn failed")
	// ErrResourceExhausted: the process could not be started because a process
	// limit (pids cgroup, RLIMIT_NPROC, pid_max), memory, descriptors or
	// terminals are exhausted (SpawnResources), for example by a fork storm of
	// another command; the message names the process limits. No command was
	// created. Retrying makes sense once processes end.
	ErrResourceExhausted = errors.New("resource exhausted")
	// ErrShuttingDown: the manager is shutting down and admits nothing.
	ErrShuttingDown = errors.New("shutting down")
	// ErrNotTerminal: a resize of a command that was started without "pty".
	ErrNotTerminal = errors.New("not a terminal")
)

// GoneReason says why a handle is gone.
type GoneReason string

// The reasons of a GoneError.
const (
	GoneExpired GoneReason = "expired"
	GoneEvicted GoneReason = "evicted"
)

// GoneError is returned for an id whose handle was dropped; it wraps ErrGone.
type GoneError struct {
	ID     string
	Reason GoneReason
}

func (e *GoneError) Error() string {
	return fmt.Sprintf("command %s is gone (%s)", e.ID, e.Reason)
}

// Unwrap returns ErrGone.
func (e *GoneError) Unwrap() error { return ErrGone }

// classified is an error with a client-facing message that wraps a sentinel.
// Its Error() is the message alone, so the api layer can show it as is.
type classified struct {
	kind  error
	msg   string
	cause error // optional underlying error
}

func (e *classified) Error() string { return e.msg }
func (e *classified) Unwrap() []error {
	if e.cause != nil {
		return []error{e.kind, e.cause}
	}
	return []error{e.kind}
}

// wrap also makes cause reachable through errors.Is / errors.As.
func (e *classified) wrap(cause error) error {
	e.cause = cause
	return e
}

// errorf returns an error wrapping kind whose message is the formatted text.
func errorf(kind error, format string, args ...any) error {
	return &classified{kind: kind, msg: fmt.Sprintf(format, args...)}
}

func invalidf(format string, args ...any) error { return errorf(ErrInvalid, format, args...) }
