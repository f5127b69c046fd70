package wire

import (
	"encoding/json"
	"time"
)

// Code contexts (docs/contexts.md): a Python interpreter per context that
// keeps its state between executions.

// ContextCreateRequest is the body of POST /v1/contexts.
type ContextCreateRequest struct {
	// ContextID is a client-chosen id (a UUID): a re-post with the same id
	// and request answers the same context; an id that was deleted or
	// expired answers 410.
	ContextID string            `json:"context_id,omitempty"`
	Language  string            `json:"language,omitempty"` // "python", the only one (default)
	Cwd       string            `json:"cwd,omitempty"`
	Envs      map[string]string `json:"envs,omitempty"`
}

// Context states.
const (
	ContextReady     = "ready"      // idle, its interpreter alive
	ContextBusy      = "busy"       // an execution is running
	ContextStateLost = "state_lost" // its interpreter died or was killed: POST …/restart
)

// Context is a code context's status.
type Context struct {
	ContextID  string            `json:"context_id"`
	Language   string            `json:"language"`
	State      string            `json:"state"`
	StateLost  *StateLost        `json:"state_lost,omitempty"` // when State is state_lost
	Pid        int               `json:"pid,omitempty"`        // the interpreter's, 0 when none is alive
	Python     string            `json:"python"`               // the interpreter's version
	Cwd        string            `json:"cwd"`
	Envs       map[string]string `json:"envs,omitempty"`
	Executions int               `json:"executions"` // executions started so far (the last one's n)
	Restarts   int               `json:"restarts"`
	CreatedAt  time.Time         `json:"created_at"`
	LastUsedAt time.Time         `json:"last_used_at"`
	ExpiresAt  *time.Time        `json:"expires_at,omitempty"` // when idle: the idle expiry
}

// StateLost says why a context lost its state.
type StateLost struct {
	Reason    string    `json:"reason"`
	OOMKilled bool      `json:"oom_killed,omitempty"`
	At        time.Time `json:"at"`
}

// ContextList is the answer of GET /v1/contexts.
type ContextList struct {
	Contexts []Context `json:"contexts"`
}

// ExecutionRequest is the body of POST /v1/contexts/{id}/executions.
type ExecutionRequest struct {
	Code string `json:"code"`
	// Timeout in seconds: the command timeout rules (default 60, capped by the maximum).
	Timeout *float64 `json:"timeout,omitempty"`
	// ExecutionID is a client-chosen id: a retried POST with it answers the
	// execution it started and never runs the code twice.
	ExecutionID string `json:"execution_id,omitempty"`
}

// Execution statuses (the end event's and the execution's).
const (
	ExecRunning     = "running"
	ExecOK          = "ok"
	ExecError       = "error"
	ExecTimedOut    = "timed_out"
	ExecInterrupted = "interrupted"
	ExecStateLost   = "state_lost"
)

// Execution is an execution's status.
type Execution struct {
	ContextID       string     `json:"context_id"`
	N               int        `json:"n"` // 1, 2, … in the context: the {n} of its URL
	ExecutionID     string     `json:"execution_id,omitempty"`
	Status          string     `json:"status"`
	StartedAt       time.Time  `json:"started_at"`
	FinishedAt      *time.Time `json:"finished_at,omitempty"`
	DurationSeconds float64    `json:"duration_seconds"`
	Events          int64      `json:"events"` // events so far: the cursor after the last one
	Truncated       bool       `json:"truncated"`
}

// Context event types.
const (
	CtxEventStdout    = "stdout"
	CtxEventStderr    = "stderr"
	CtxEventResult    = "result"
	CtxEventDisplay   = "display"
	CtxEventError     = "error"
	CtxEventEnd       = "end"
	CtxEventGap       = "gap"
	CtxEventStreamEnd = "stream_end" // a stream's window ended before the execution did
	CtxEventHeartbeat = "heartbeat"
)

// ContextEvent is one event of an execution (one NDJSON line of its stream).
type ContextEvent struct {
	Type   string `json:"type"`
	Cursor int64  `json:"cursor"` // its index in the execution; resume with ?cursor=Cursor+1
	// stdout, stderr
	Text string `json:"text,omitempty"`
	// result, display: the MIME bundle (text/plain always; images base64)
	Data map[string]json.RawMessage `json:"data,omitempty"`
	// Omitted names the entries left out of a bundle too large for one event, with their sizes.
	Omitted map[string]int `json:"omitted,omitempty"`
	// error
	Name      string   `json:"name,omitempty"`
	Value     string   `json:"value,omitempty"`
	Traceback []string `json:"traceback,omitempty"`
	// end
	Status          string   `json:"status,omitempty"`
	DurationSeconds *float64 `json:"duration_seconds,omitempty"`
	Reason          string   `json:"reason,omitempty"` // end: why timed_out/state_lost; stream_end: why the stream ended
	// gap: the events [From, To) are gone (the execution's output bound)
	From int64 `json:"from,omitempty"`
	To   int64 `json:"to,omitempty"`
	// stream_end, heartbeat: where to resume
	NextCursor *int64 `json:"next_cursor,omitempty"`
}

// FeatureContexts is the /v1/info feature of code contexts (/v1/contexts).
const FeatureContexts = "contexts"
