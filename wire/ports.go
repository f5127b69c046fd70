package wire

// FeaturePorts is announced in Info.Features by a daemon that reports
// listening ports: `listeners` in GET /v1/commands/{id}, GET /v1/ports,
// `wait_port`, and the feed's `listening`/`closed` events
// (docs/protocol.md §4 "Listening ports").
const FeaturePorts = "ports"

// Feed event types of listening ports.
const (
	FeedListening = "listening" // a process of the command listens on Listener
	FeedClosed    = "closed"    // it no longer does (the command still runs)
)

// Listener is one listening socket: a TCP socket in LISTEN state or a
// bound, unconnected UDP socket.
type Listener struct {
	Address      string `json:"address"`  // the local address, "0.0.0.0" or "::" for every one
	Port         int    `json:"port"`     // 1–65535
	Protocol     string `json:"protocol"` // "tcp" or "udp"
	LoopbackOnly bool   `json:"loopback_only"`
}

// Port is one entry of GET /v1/ports: a listener of the sandbox and the
// command whose processes hold it (nil: none of the retained commands).
type Port struct {
	Listener
	CommandID *string `json:"command_id"`
}

// PortsResponse is the answer of GET /v1/ports.
type PortsResponse struct {
	Ports []Port `json:"ports"`
}

// Values of Status.WaitPortResult (GET /v1/commands/{id}?wait_port=N).
const (
	WaitPortListening = "listening" // the port listens (in Listeners)
	WaitPortEnded     = "ended"     // the command finished first
	WaitPortTimeout   = "timeout"   // the wait ran out first
)
