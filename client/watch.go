package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// File watches (docs/watch.md).

// CreateWatch starts a watch of path (relative to the base dir).
func (c *Client) CreateWatch(ctx context.Context, path string, recursive bool) (*wire.WatchInfo, error) {
	body, _ := json.Marshal(wire.NewWatchRequest(path, recursive)) // escaped_path for a name that is not UTF-8
	var out wire.WatchInfo
	if err := c.do(ctx, request{method: "POST", path: "/v1/watches", body: body}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Watches lists the open watches.
func (c *Client) Watches(ctx context.Context) ([]wire.WatchInfo, error) {
	var out wire.WatchList
	if err := c.do(ctx, request{method: "GET", path: "/v1/watches", idempotent: true}, &out); err != nil {
		return nil, err
	}
	return out.Watches, nil
}

// DeleteWatch ends a watch.
func (c *Client) DeleteWatch(ctx context.Context, id string) error {
	return c.do(ctx, request{method: "DELETE", path: "/v1/watches/" + url.PathEscape(id), idempotent: true}, nil)
}

// WatchFunc is called with each change and gap event of a watch, in order.
// A path that is not valid UTF-8 arrives with U+FFFD in ev.Path and its
// exact bytes in ev.ExactPath() (escaped_path; ExactOldPath for a rename).
// An error stops FollowWatch; the event then counts as not processed.
type WatchFunc func(ev *wire.WatchEvent) error

// FollowWatch sends the events of watch id from cursor on to fn until the
// watch ends (its end line says watch_ended, or it is gone), re-opening the
// stream after each window and after a disconnect at the next_cursor of the
// last event fn accepted: every event once. It returns the cursor to resume
// from. It gives up after RetryFor without progress, or when fn or ctx fails.
func (c *Client) FollowWatch(ctx context.Context, id string, cursor int64, fn WatchFunc) (int64, error) {
	err := resumeByCursor(ctx, c, &cursor, func() (bool, error) {
		q := url.Values{"cursor": {strconv.FormatInt(cursor, 10)}, "max_wait": {strconv.Itoa(streamWindow)}}
		end, err := c.watchOnce(ctx, request{method: "GET", path: "/v1/watches/" + url.PathEscape(id) + "/events", query: q, idempotent: true}, &cursor, fn)
		return err == nil && end.Reason == wire.EndWatchEnded, err
	})
	return cursor, err
}

// watchOnce reads one window of a watch stream until its end line.
func (c *Client) watchOnce(ctx context.Context, r request, cursor *int64, fn WatchFunc) (end *wire.WatchEvent, err error) {
	err = c.withStream(ctx, r, func(sctx context.Context, cancel context.CancelCauseFunc, body io.Reader) error {
		end, err = c.readWatch(sctx, cancel, body, cursor, fn)
		return err
	})
	return end, err
}

// readWatch reads a watch stream from body until its end line.
func (c *Client) readWatch(sctx context.Context, cancel context.CancelCauseFunc, body io.Reader, cursor *int64, fn WatchFunc) (*wire.WatchEvent, error) {
	idle := time.AfterFunc(idleTimeout, func() { cancel(ErrSilent) })
	defer idle.Stop()
	br := bufio.NewReaderSize(body, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			// A line without its newline is a cut connection (a proxy's),
			// not a broken protocol: the caller resumes at the cursor.
			if cause := context.Cause(sctx); cause != nil && sctx.Err() != nil {
				return nil, cause
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			if err == bufio.ErrBufferFull {
				return nil, fmt.Errorf("%w: a line of over 64 KiB", ErrStreamBroken)
			}
			return nil, c.describe(fmt.Errorf("the watch stream ended without its end line: %w", err))
		}
		idle.Reset(idleTimeout)
		if bytes.HasPrefix(line, []byte(`{"type":"watch",`)) {
			continue // the first line of a one-shot stream
		}
		var ev wire.WatchEvent
		dec := json.NewDecoder(bytes.NewReader(line))
		if err := dec.Decode(&ev); err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrStreamBroken, line, err)
		}
		switch ev.Type {
		case wire.EventEnd:
			return &ev, nil
		case wire.EventHeartbeat:
			continue
		}
		if err := fn(&ev); err != nil {
			return nil, &callbackError{err}
		}
		*cursor = ev.NextCursor
	}
}
