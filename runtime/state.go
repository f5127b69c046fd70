package runtime

// State is the lifecycle state of a managed command.
type State uint8

// The states of protocol.md §2. StateStarting is internal: a command that is being
// spawned is not listed and never reported to clients.
const (
	StateStarting State = iota
	StateRunning
	StateExited
	StateCancelled
	StateTimedOut
	StateTerminated
)

var stateNames = [...]string{"starting", "running", "exited", "cancelled", "timed_out", "terminated"}

// String returns the wire name of s ("running", "timed_out", ...).
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "unknown"
}

// Finished reports whether s is a final state.
func (s State) Finished() bool { return s >= StateExited }

// ParseState parses a wire name; ok is false for unknown names and for "starting".
func ParseState(name string) (s State, ok bool) {
	for i, n := range stateNames {
		if n == name && State(i) != StateStarting {
			return State(i), true
		}
	}
	return 0, false
}

// MarshalText renders the wire name, so State encodes as a JSON string.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// cause is why the runtime asked a command to end early. The first cause
// recorded wins; causeNone means nobody asked.
type cause uint8

const (
	causeNone cause = iota
	causeKill
	causeTimeout
	causeShutdown
)

// transition is the one transition function of the command state machine.
//
//	starting --started--> running
//	running  --ended(cause)--> exited | cancelled | timed_out | terminated
//
// Any other move is a programming error and panics.
func transition(from State, ev event, c cause) State {
	switch {
	case from == StateStarting && ev == evStarted:
		return StateRunning
	case from == StateRunning && ev == evEnded:
		switch c {
		case causeKill:
			return StateCancelled
		case causeTimeout:
			return StateTimedOut
		case causeShutdown:
			return StateTerminated
		default:
			return StateExited
		}
	}
	panic("runtime: invalid transition from " + from.String())
}

type event uint8

const (
	evStarted event = iota
	evEnded
)
