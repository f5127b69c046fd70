// Package wire holds the JSON types of the sandbox-runtime v1 protocol
// (docs/protocol.md §2–§4): requests, the command status, stream events,
// WebSocket frames and errors. It is the one definition that the server,
// the Go client, the tests and the bench share; it has no behaviour beyond
// encoding and decoding, and imports nothing but the standard library.
//
// The field names and shapes are those the daemon sends today:
// TestWireTypesMatchDaemon (client/wire_compat_test.go, beside the client
// that starts the real daemon) decodes its answers with
// DisallowUnknownFields and encodes them again, so a field added to the
// server and not here, or one added here and not there, fails it.
//
// Optional request fields carry omitempty, so a client never sends a field
// it did not set (the server rejects unknown fields, and an older server
// would reject a newer optional one only when it is used).
package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// State is the state of a managed command (docs/protocol.md §2 "States").
type State string

// The states. Every state but StateRunning is final.
const (
	StateRunning    State = "running"
	StateExited     State = "exited"
	StateCancelled  State = "cancelled"
	StateTimedOut   State = "timed_out"
	StateTerminated State = "terminated"
)

// Finished reports whether s is a final state.
func (s State) Finished() bool { return s != StateRunning && s != "" }

// Output stream names of an output event.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	StreamPTY    = "pty" // the terminal of a PTY command (docs/protocol.md §2 "Terminals")
)

// Event types (docs/protocol.md §4), plus EventError, which only WebSocket
// attachments send in answer to a client frame that could not be applied.
const (
	EventStarted   = "started"
	EventOutput    = "output"
	EventGap       = "gap"
	EventHeartbeat = "heartbeat"
	EventExit      = "exit"
	EventEnd       = "end"
	EventError     = "error"
)

// Reasons of an end event.
const (
	EndMaxWait      = "max_wait"
	EndCaughtUp     = "caught_up"
	EndShuttingDown = "shutting_down"
)

// EncodingBase64 marks data that is base64 (output that is not UTF-8, or
// stdin bytes sent that way). An absent encoding means UTF-8 text.
const EncodingBase64 = "base64"

// Feature names of Info.Features.
const (
	FeatureCommands         = "commands"
	FeatureStream           = "stream"
	FeatureStdin            = "stdin"
	FeatureSignals          = "signals"
	FeatureWebSocket        = "websocket"
	FeatureFiles            = "files"
	FeatureLegacy           = "legacy"  // only when the legacy API is mounted
	FeatureMetrics          = "metrics" // only when GET /metrics is served
	FeatureIdempotentCreate = "idempotent_create"
	FeaturePTY              = "pty"
	FeatureSandboxdGRPC     = "sandboxd_grpc" // only when sandboxd's gRPC ProcessService is served (SANDBOXD_GRPC_ADDR)
	FeatureSandboxdREST     = "sandboxd_rest" // only when sandboxd's REST listener is on (SANDBOXD_REST_ADDR)
)

// CreateRequest is the body of POST /v1/commands. Exactly one of Argv and
// Command is set.
type CreateRequest struct {
	Argv      []string          `json:"argv,omitempty"`
	Command   string            `json:"command,omitempty"` // split like Python's shlex.split; no shell
	Envs      map[string]string `json:"envs,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	Timeout   float64           `json:"timeout,omitempty"` // seconds; 0: the daemon's default
	Stdin     bool              `json:"stdin,omitempty"`
	CommandID string            `json:"command_id,omitempty"` // a UUID: makes creation idempotent
	PTY       *PTYRequest       `json:"pty,omitempty"`        // run on a terminal (feature "pty")
}

// MaxTerminalSize bounds a terminal's cols and rows (protocol.md): more is
// taken as this many. The one definition: the runtime clamps to it and the
// client clamps a window to it before sending.
const MaxTerminalSize = 1000

// MaxHoldSeconds bounds an output stream's `hold` (protocol.md §4 "Holding
// the producer"): more is taken as this many. The one definition: the
// runtime clamps to it and the CLI checks --hold against it.
const MaxHoldSeconds = 10

// PTYRequest asks for a terminal of the given size (1–MaxTerminalSize each). Term
// sets TERM unless the request's envs do; empty: the daemon's default.
type PTYRequest struct {
	Cols int    `json:"cols"`
	Rows int    `json:"rows"`
	Term string `json:"term,omitempty"`
}

// Status is a snapshot of a command (docs/protocol.md §2 "The status object").
type Status struct {
	CommandID       string     `json:"command_id"`
	Argv            []string   `json:"argv"`
	Cwd             string     `json:"cwd"`
	State           State      `json:"state"`
	PID             int        `json:"pid"`
	ExitCode        *int       `json:"exit_code"`
	Signal          *string    `json:"signal"` // e.g. "SIGKILL", when a signal ended it
	Stdin           bool       `json:"stdin"`
	StdinClosed     bool       `json:"stdin_closed"`
	TimeoutSeconds  float64    `json:"timeout_seconds"`
	CreatedAt       time.Time  `json:"created_at"`
	StartedAt       *time.Time `json:"started_at"`
	FinishedAt      *time.Time `json:"finished_at"`
	ExpiresAt       *time.Time `json:"expires_at"`
	StdoutBytes     int64      `json:"stdout_bytes"`
	StderrBytes     int64      `json:"stderr_bytes"`
	RetainedFrom    int64      `json:"retained_from"`
	NextCursor      int64      `json:"next_cursor"`
	OutputTruncated bool       `json:"output_truncated"`
	Resources       *Resources `json:"resources"`

	// The terminal fields (docs/protocol.md §2 "Terminals"). Daemons
	// without the "pty" feature do not send them (decoding leaves them
	// zero); those with it send all three, null and 0 for a pipe command,
	// as they are encoded here.
	PTY             *PTYStatus `json:"pty"`
	PTYBytes        int64      `json:"pty_bytes"`
	WaitingForInput *bool      `json:"waiting_for_input"` // blocked reading its terminal or stdin pipe (a heuristic); null when it has neither

	// OOMKilled: the kernel's OOM killer ended a process of the command
	// (false until finished; docs/protocol.md §2 "Process limits").
	OOMKilled bool `json:"oom_killed"`

	// Listeners (GET /v1/commands/{id} of a running command, feature
	// "ports") and WaitPortResult (with ?wait_port=N): wire/ports.go.
	Listeners      []Listener `json:"listeners,omitempty"`
	WaitPortResult string     `json:"wait_port_result,omitempty"`
}

// Resources is what the kernel reported for the process tree at reap time.
type Resources struct {
	UserCPUMillis   int64 `json:"user_cpu_ms"`
	SystemCPUMillis int64 `json:"system_cpu_ms"`
	MaxRSSKB        int64 `json:"max_rss_kb"`
}

// PTYStatus is the terminal of a PTY command.
type PTYStatus struct {
	Cols int    `json:"cols"`
	Rows int    `json:"rows"`
	Term string `json:"term"`
}

// CommandList is the body of GET /v1/commands.
type CommandList struct {
	Commands []Status `json:"commands"`
}

// Event is one line of an NDJSON event stream, or one WebSocket text frame
// (docs/protocol.md §4). Which fields are set depends on Type; NextCursor is always
// there: re-open with the NextCursor of the last event processed.
type Event struct {
	Type         string       `json:"type"`
	Stream       string       `json:"stream,omitempty"`        // output
	Cursor       *int64       `json:"cursor,omitempty"`        // output: its first byte; gap: the cursor asked for
	Data         string       `json:"data,omitempty"`          // output
	Encoding     string       `json:"encoding,omitempty"`      // output: "base64" or absent (UTF-8)
	DroppedBytes *int64       `json:"dropped_bytes,omitempty"` // gap
	Reason       string       `json:"reason,omitempty"`        // end
	Status       *Status      `json:"status,omitempty"`        // started, exit
	Error        *ErrorDetail `json:"error,omitempty"`         // error (WebSocket only)
	NextCursor   int64        `json:"next_cursor"`
}

// Bytes returns the output bytes of an output event, decoding base64.
func (e *Event) Bytes() ([]byte, error) {
	if e.Encoding == EncodingBase64 {
		return base64.StdEncoding.DecodeString(e.Data)
	}
	return []byte(e.Data), nil
}

// Final reports whether e is the last event of a stream window.
func (e *Event) Final() bool { return e.Type == EventExit || e.Type == EventEnd }

// StdinRequest is the body of POST /v1/commands/{id}/stdin.
type StdinRequest struct {
	Data     string `json:"data"`
	Encoding string `json:"encoding,omitempty"`
	EOF      bool   `json:"eof,omitempty"`
}

// StdinResponse answers a stdin write (202).
type StdinResponse struct {
	QueuedBytes int  `json:"queued_bytes"` // bytes accepted by this request
	StdinClosed bool `json:"stdin_closed"`
}

// SignalRequest is the body of POST /v1/commands/{id}/signal.
type SignalRequest struct {
	Signal Signal `json:"signal"`
}

// Signal names a signal: "SIGINT", "INT" (any case) or a number. It
// encodes as a JSON string, and decodes from a string or a number (as the
// daemon accepts both); a number is kept as its decimal digits.
type Signal string

// UnmarshalJSON accepts a JSON string or a whole number that fits an int.
// Anything else is a *json.UnmarshalTypeError whose Value is described as
// encoding/json describes one ("number 2.5", "bool", "object", "array"),
// without a Field: the decoder adds the path of the member.
func (s *Signal) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		*s = Signal(name)
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return &json.UnmarshalTypeError{Value: jsonValueOf(b), Type: signalType}
	}
	*s = Signal(strconv.Itoa(n))
	return nil
}

// jsonValueOf describes the JSON value b as json.UnmarshalTypeError.Value
// does.
func jsonValueOf(b []byte) string {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0:
		return ""
	case b[0] == '{':
		return "object"
	case b[0] == '[':
		return "array"
	case b[0] == '"':
		return "string"
	case b[0] == 't' || b[0] == 'f':
		return "bool"
	}
	return "number " + string(b)
}

var signalType = reflect.TypeOf(Signal(""))

// ResizeRequest is the body of POST /v1/commands/{id}/resize.
type ResizeRequest struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// Client frame types of a WebSocket attachment.
const (
	FrameStdin  = "stdin"
	FrameSignal = "signal"
	FrameKill   = "kill"
	FrameResize = "resize"
)

// ClientFrame is a frame a client sends on a WebSocket attachment:
// {"type":"stdin","data","encoding"?,"eof"?}, {"type":"signal","signal"},
// {"type":"kill"} or {"type":"resize","cols","rows"}. Only the fields of
// its type are sent.
type ClientFrame struct {
	Type     string `json:"type"`
	Data     string `json:"data,omitempty"`
	Encoding string `json:"encoding,omitempty"`
	EOF      bool   `json:"eof,omitempty"`
	Signal   Signal `json:"signal,omitempty"`
	Cols     int    `json:"cols,omitempty"`
	Rows     int    `json:"rows,omitempty"`
}

// MarshalJSON sends a stdin frame's data even when it is empty (an EOF
// alone), which omitempty would drop.
func (f ClientFrame) MarshalJSON() ([]byte, error) {
	type plain ClientFrame
	if f.Type != FrameStdin {
		return json.Marshal(plain(f))
	}
	return json.Marshal(struct {
		Type     string `json:"type"`
		Data     string `json:"data"`
		Encoding string `json:"encoding,omitempty"`
		EOF      bool   `json:"eof,omitempty"`
	}{f.Type, f.Data, f.Encoding, f.EOF})
}

// Error codes of ErrorDetail.Code (docs/protocol.md §3 "Errors"), in the
// order of the spec's ErrorCode enum.
const (
	CodeInvalidRequest    = "invalid_request"        // 400
	CodeUnauthorized      = "unauthorized"           // 401
	CodeForbidden         = "forbidden"              // 403
	CodeNotFound          = "not_found"              // 404
	CodeMethodNotAllowed  = "method_not_allowed"     // 405
	CodeConflict          = "conflict"               // 409
	CodeFinished          = "finished"               // 409
	CodeStdinNotEnabled   = "stdin_not_enabled"      // 409
	CodeStdinClosed       = "stdin_closed"           // 409
	CodeNotATerminal      = "not_a_terminal"         // 409: resize of a command without pty
	CodeGone              = "gone"                   // 410, with Reason
	CodeTooLarge          = "too_large"              // 413
	CodeUnsupportedMedia  = "unsupported_media_type" // 415
	CodeSpawnFailed       = "spawn_failed"           // 422
	CodeTooManyRunning    = "too_many_running"       // 429
	CodeStdinFull         = "stdin_full"             // 429
	CodeShuttingDown      = "shutting_down"          // 503
	CodeTooBusy           = "too_busy"               // 503, with Retry-After; the connection is closed
	CodeBodyTimeout       = "body_timeout"           // 408
	CodeResourceExhausted = "resource_exhausted"     // 503, with Retry-After
	CodeInternal          = "internal"               // 500
)

// Error codes that only /v1/files answers (docs/protocol.md §3 "Files").
const (
	CodeInsufficientStorage = "insufficient_storage"  // 507: ENOSPC or EDQUOT
	CodeReadOnly            = "read_only"             // 409: EROFS
	CodeBusy                = "busy"                  // 409: EBUSY, ETXTBSY, a mount point
	CodeRangeNotSatisfiable = "range_not_satisfiable" // 416, with Content-Range
	CodePreconditionFailed  = "precondition_failed"   // 412
)

// Reasons of a gone error.
const (
	GoneExpired = "expired"
	GoneEvicted = "evicted"
)

// ErrorBody is the body of every v1 error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong: a stable Code for programs, a Message
// for people, and for gone the Reason.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Reason  string `json:"reason,omitempty"`
}

// Health is the body of GET /v1/health: "ok", or "shutting_down" (503).
type Health struct {
	Status string `json:"status"`
}

// Info is the body of GET /v1/info.
type Info struct {
	Name        string    `json:"name"`
	Version     string    `json:"version"`
	APIVersions []string  `json:"api_versions"`
	StartedAt   time.Time `json:"started_at"` // when this daemon started: a new value means a restart (ids forgotten)
	BaseDir     string    `json:"base_dir"`   // the directory /v1/files paths are relative to and commands start in
	Limits      Limits    `json:"limits"`
	Features    []string  `json:"features"`
	Isolation   Isolation `json:"isolation"`
}

// Isolation modes of Isolation.Mode.
const (
	IsolationCgroup  = "cgroup"
	IsolationThreads = "threads"
)

// Isolation says how the daemon keeps commands from starving it of
// processes, and why (docs/protocol.md §6 "Isolation").
type Isolation struct {
	Mode            string   `json:"mode"`              // "cgroup" or "threads"
	Reason          string   `json:"reason"`            // what was found or what failed, for people
	Cgroup          *string  `json:"cgroup"`            // the daemon's cgroup tree (cgroup mode), else null
	Controllers     []string `json:"controllers"`       // enabled for the commands' cgroups
	CommandsPidsMax *int64   `json:"commands_pids_max"` // the pids.max all commands share; null when none was set
	ReservedThreads int      `json:"reserved_threads"`  // OS threads made at start
	PidfdSignals    bool     `json:"pidfd_signals"`     // signals go through a pidfd of the leader
}

// HasFeature reports whether the daemon announces feature f.
func (i *Info) HasFeature(f string) bool {
	for _, g := range i.Features {
		if g == f {
			return true
		}
	}
	return false
}

// Limits are the daemon's configured limits, as announced by /v1/info.
type Limits struct {
	MaxRunning            int     `json:"max_running"`
	MaxRetained           int     `json:"max_retained"`
	OutputLimitBytes      int     `json:"output_limit_bytes"`
	ResultTTLSeconds      float64 `json:"result_ttl_seconds"`
	DefaultTimeoutSeconds float64 `json:"default_timeout_seconds"`
	MaxTimeoutSeconds     float64 `json:"max_timeout_seconds"`
	KillGraceSeconds      float64 `json:"kill_grace_seconds"`
	StdinLimitBytes       int     `json:"stdin_limit_bytes"`
	RequestBodyLimitBytes int     `json:"request_body_limit_bytes"`
}

// File entry types of FileEntry.Type.
const (
	FileTypeFile      = "file"
	FileTypeDirectory = "directory"
	FileTypeSymlink   = "symlink"
	FileTypeOther     = "other"
)

// DirListing is the body of GET /v1/files/{dir}.
type DirListing struct {
	Path    string      `json:"path"` // as requested; "" for the base dir
	Entries []FileEntry `json:"entries"`
}

// FileEntry describes one name in a directory (a symlink itself, not its
// target).
type FileEntry struct {
	Name       string    `json:"name"`
	Size       int64     `json:"size"`
	Type       string    `json:"type"`
	ModifiedAt time.Time `json:"modified_at"`
	Mode       string    `json:"mode"` // permission bits in octal, "0644"
	// EscapedName is set only when Name is not valid UTF-8 (JSON text then
	// shows each invalid byte as U+FFFD): the exact bytes of the name,
	// percent-encoded (every byte but A-Z a-z 0-9 _ . - ~ as %XX), ready to
	// append to a /v1/files URL path.
	EscapedName string `json:"escaped_name,omitempty"`
}

// CheckToken reports why tok (already trimmed of surrounding whitespace)
// cannot be a bearer token, or nil. A token is sent as the value of an
// "Authorization: Bearer <token>" header, so it must be what a header can
// carry: no control byte (NUL, a line break: a second line, a tab, DEL)
// and no byte-order mark (an editor's, which no client sends). The error
// never contains the token.
func CheckToken(tok string) error {
	if tok == "" {
		return errors.New("the token is empty")
	}
	if strings.Contains(tok, "\uFEFF") {
		return errors.New("the token contains a byte-order mark (U+FEFF), which no request sends")
	}
	for i := 0; i < len(tok); i++ {
		switch b := tok[i]; {
		case b == '\n' || b == '\r':
			return errors.New("the token has a second line, which no request can send in a header")
		case b < 0x20 || b == 0x7f:
			return fmt.Errorf("the token contains a control byte (0x%02x), which no request can send in a header", b)
		}
	}
	return nil
}
