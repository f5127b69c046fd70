package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"

	"github.com/google/uuid"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// Code contexts (docs/contexts.md).

func contextPath(id string, parts ...string) string {
	p := "/v1/contexts/" + url.PathEscape(id)
	for _, s := range parts {
		p += "/" + s
	}
	return p
}

// CreateContext creates a code context. Without a ContextID it is given a
// fresh one, so that the create is retried safely.
func (c *Client) CreateContext(ctx context.Context, req wire.ContextCreateRequest) (*wire.Context, error) {
	if req.ContextID == "" {
		req.ContextID = uuid.NewString()
	}
	var st wire.Context
	if err := c.do(ctx, request{method: "POST", path: "/v1/contexts", body: mustJSON(req), idempotent: true}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// GetContext returns a context's status.
func (c *Client) GetContext(ctx context.Context, id string) (*wire.Context, error) {
	var st wire.Context
	if err := c.doRetrying(ctx, request{method: "GET", path: contextPath(id), idempotent: true}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// DeleteContext kills a context's interpreter and forgets it.
func (c *Client) DeleteContext(ctx context.Context, id string) error {
	return c.do(ctx, request{method: "DELETE", path: contextPath(id), idempotent: true}, nil)
}

// RestartContext starts a fresh interpreter in the context.
func (c *Client) RestartContext(ctx context.Context, id string) (*wire.Context, error) {
	var st wire.Context
	if err := c.do(ctx, request{method: "POST", path: contextPath(id, "restart")}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// InterruptContext sends SIGINT to the context's running execution.
func (c *Client) InterruptContext(ctx context.Context, id string) error {
	return c.do(ctx, request{method: "POST", path: contextPath(id, "interrupt")}, nil)
}

// Execute starts code in context id and returns the execution's status.
// Without an ExecutionID it is given a fresh one, so that a retried POST
// never runs the code twice.
func (c *Client) Execute(ctx context.Context, id string, req wire.ExecutionRequest) (*wire.Execution, error) {
	if req.ExecutionID == "" {
		req.ExecutionID = uuid.NewString()
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("the execution request cannot be encoded (timeout %v?): %w", req.Timeout, err)
	}
	var x wire.Execution
	if err := c.do(ctx, request{method: "POST", path: contextPath(id, "executions"), body: body, idempotent: true}, &x); err != nil {
		return nil, err
	}
	return &x, nil
}

// ContextEventFunc receives each event of an execution once, in order.
type ContextEventFunc func(*wire.ContextEvent) error

// ExecutionEvents reads execution n of context id from cursor until its
// end event (returned), resuming by cursor after a broken stream or a
// window's end, so that fn sees every event exactly once.
func (c *Client) ExecutionEvents(ctx context.Context, id string, n int, cursor int64, fn ContextEventFunc) (*wire.ContextEvent, error) {
	var b backoff
	for {
		q := url.Values{"cursor": {strconv.FormatInt(cursor, 10)}}
		resp, err := c.send(ctx, request{method: "GET", path: contextPath(id, "executions", strconv.Itoa(n)), query: q, idempotent: true})
		if err != nil {
			return nil, err
		}
		end, next, err := readContextEvents(resp.Body, cursor, fn)
		resp.Body.Close()
		if end != nil || (err != nil && !errors.As(err, new(*TransportError))) {
			return end, err
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if werr := b.wait(ctx, 0); werr != nil {
				return nil, werr
			}
		} else {
			b.reset()
		}
		cursor = next
	}
}

func readContextEvents(body interface{ Read([]byte) (int, error) }, cursor int64, fn ContextEventFunc) (*wire.ContextEvent, int64, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var ev wire.ContextEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, cursor, fmt.Errorf("%w: %v", ErrStreamBroken, err)
		}
		switch ev.Type {
		case wire.CtxEventHeartbeat:
			continue
		case wire.CtxEventStreamEnd:
			if ev.NextCursor != nil {
				cursor = *ev.NextCursor
			}
			return nil, cursor, nil
		}
		if ev.Type != wire.CtxEventGap && ev.Cursor != cursor {
			return nil, cursor, fmt.Errorf("%w: event cursor %d, expected %d", ErrStreamBroken, ev.Cursor, cursor)
		}
		if ev.Type == wire.CtxEventGap {
			cursor = ev.To
		} else {
			cursor = ev.Cursor + 1
		}
		if err := fn(&ev); err != nil {
			return nil, cursor, err
		}
		if ev.Type == wire.CtxEventEnd {
			return &ev, cursor, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, cursor, &TransportError{Err: err}
	}
	return nil, cursor, &TransportError{Err: errors.New("the stream ended without its end event")}
}

// RunCode executes code in context id and calls fn with each event until
// the end event, which it returns.
func (c *Client) RunCode(ctx context.Context, id string, req wire.ExecutionRequest, fn ContextEventFunc) (*wire.ContextEvent, error) {
	x, err := c.Execute(ctx, id, req)
	if err != nil {
		return nil, err
	}
	return c.ExecutionEvents(ctx, id, x.N, 0, fn)
}
