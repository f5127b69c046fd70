package runtime

import (
	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
	"github.com/sandbox-runtime/sandbox-runtime/ringbuf"
	"github.com/sandbox-runtime/sandbox-runtime/shlex"
)

// The output a Command keeps, as Command.Read returns it. They are the
// ring's own types (aliases), so a stream copies nothing to read them; the
// transports name them here and never import the ring.
type (
	Stream     = ringbuf.Stream
	Record     = ringbuf.Record
	ReadResult = ringbuf.ReadResult
)

// The streams of a Record.
const (
	Stdout = ringbuf.Stdout
	Stderr = ringbuf.Stderr
	PTY    = ringbuf.PTY // a terminal's output (stdout and stderr are one)
)

// Reaper starts and reaps the processes of a Manager (one per process);
// Isolation is how it keeps commands from starving the daemon, for /v1/info.
type (
	Reaper    = procgroup.Reaper
	Isolation = procgroup.Isolation
)

// NewReaper starts the process's one Reaper (tests and tools; the daemon
// configures its own in cmd/sandbox-runtime).
func NewReaper(log *zap.Logger) (*Reaper, error) { return procgroup.NewReaper(log) }

// SplitCommand splits a command line as Python's shlex.split does (the
// "command" of a request and of a legacy /execute).
func SplitCommand(s string) ([]string, error) { return shlex.Split(s) }
