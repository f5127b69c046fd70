package client

import (
	"context"
	"strconv"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// Ports returns every listening socket of the sandbox, each with the
// command holding it (GET /v1/ports, feature "ports").
func (c *Client) Ports(ctx context.Context) ([]wire.Port, error) {
	var r wire.PortsResponse
	if err := c.doRetrying(ctx, request{method: "GET", path: "/v1/ports", idempotent: true}, &r); err != nil {
		return nil, err
	}
	return r.Ports, nil
}

// WaitPort waits until a process of command id listens on port, the
// command finishes, or timeout passes (0: no limit but ctx), asking in
// waits of at most 20 s (the daemon's clamp). The status's WaitPortResult
// says which: wire.WaitPortListening, WaitPortEnded or WaitPortTimeout.
func (c *Client) WaitPort(ctx context.Context, id string, port int, timeout time.Duration) (*wire.Status, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		w := waitClamp
		if !deadline.IsZero() {
			w = max(min(w, time.Until(deadline)), 0)
		}
		q := map[string][]string{
			"wait_port": {strconv.Itoa(port)},
			"wait":      {strconv.FormatFloat(w.Seconds(), 'f', 3, 64)},
		}
		var st wire.Status
		if err := c.doRetrying(ctx, request{method: "GET", path: commandPath(id), query: q, idempotent: true}, &st); err != nil {
			return nil, err
		}
		if st.WaitPortResult != wire.WaitPortTimeout || (!deadline.IsZero() && !time.Now().Before(deadline)) {
			return &st, nil
		}
	}
}
