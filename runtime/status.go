package runtime

import "time"

// Status is a snapshot of a command (protocol.md §2 "Status object"). The json
// tags are the wire names; Status is plain data and safe to share.
type Status struct {
	CommandID      string     `json:"command_id"`
	Argv           []string   `json:"argv"`
	Cwd            string     `json:"cwd"`
	State          State      `json:"state"`
	PID            int        `json:"pid"`
	ExitCode       *int       `json:"exit_code"`
	Signal         *string    `json:"signal"`
	Stdin          bool       `json:"stdin"`
	StdinClosed    bool       `json:"stdin_closed"`
	TimeoutSeconds float64    `json:"timeout_seconds"`
	CreatedAt      time.Time  `json:"created_at"`
	StartedAt      *time.Time `json:"started_at"`
	FinishedAt     *time.Time `json:"finished_at"`
	ExpiresAt      *time.Time `json:"expires_at"`
	StdoutBytes    int64      `json:"stdout_bytes"`
	StderrBytes    int64      `json:"stderr_bytes"`
	RetainedFrom   int64      `json:"retained_from"`
	NextCursor     int64      `json:"next_cursor"`
	Truncated      bool       `json:"output_truncated"`
	Resources      *Resources `json:"resources"`

	PTY             *PTYStatus `json:"pty"`               // the terminal; nil without one
	PTYBytes        int64      `json:"pty_bytes"`         // terminal output bytes (0 without a terminal)
	WaitingForInput *bool      `json:"waiting_for_input"` // nil without a terminal or stdin pipe; see procgroup.Process.WaitingForInput
	// OOMKilled: the kernel's OOM killer ended a process of the command (see
	// procgroup.ExitStatus.OOMKilled for how it is told); false until finished.
	OOMKilled bool `json:"oom_killed"`
}

// Resources is what the kernel reported for the process tree at reap time.
type Resources struct {
	UserCPUMillis   int64 `json:"user_cpu_ms"`
	SystemCPUMillis int64 `json:"system_cpu_ms"`
	MaxRSSKB        int64 `json:"max_rss_kb"`
}

func utc(t time.Time) time.Time { return t.UTC() }

func utcPtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
