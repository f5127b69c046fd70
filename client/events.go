package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// EventsOptions select the events of the daemon's lifecycle feed
// (GET /v1/events, feature "events").
type EventsOptions struct {
	// Cursor is where to start: "" for the oldest event the daemon still
	// holds, "now" for the next one to happen, or the NextCursor of an
	// event. A cursor of another daemon incarnation (the daemon restarted)
	// is refused: ErrorCode(err) is wire.CodeStaleCursor.
	Cursor string
	// Types keeps only these event types (wire.FeedCreated, …); empty: all.
	Types []string
	// CommandIDs keeps only the events of these commands; empty: all.
	CommandIDs []string
}

func (o EventsOptions) query(cursor string, follow bool) url.Values {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if len(o.Types) > 0 {
		q.Set("type", strings.Join(o.Types, ","))
	}
	if len(o.CommandIDs) > 0 {
		q.Set("command_id", strings.Join(o.CommandIDs, ","))
	}
	if follow {
		q.Set("max_wait", strconv.Itoa(streamWindow))
	} else {
		q.Set("follow", "false")
	}
	return q
}

// FeedFunc is called with each event of the feed (command events and
// gaps; heartbeats and window ends are handled by the client), in order.
// Returning an error stops the feed; the event then counts as not
// processed.
type FeedFunc func(ev *wire.FeedEvent) error

// Events sends the events the daemon has logged from o.Cursor on to fn and
// returns without waiting for more: next is the cursor to continue from.
func (c *Client) Events(ctx context.Context, o EventsOptions, fn FeedFunc) (next string, err error) {
	cursor := o.Cursor
	var b backoff
	deadline := time.Now().Add(c.retryFor)
	for {
		err := c.feedOnce(ctx, o.query(cursor, false), &cursor, fn)
		if err == nil || !c.mayResume(ctx, err, deadline) {
			return cursor, err
		}
		if err := b.wait(ctx, 0); err != nil {
			return cursor, err
		}
	}
}

// FollowEvents sends every event from o.Cursor on to fn until ctx ends or
// fn fails, and returns the cursor after the last event fn accepted with
// the error that stopped it. It re-opens the feed after each window and
// after any disconnect from that cursor, so each event reaches fn exactly
// once (or a gap event says how many the daemon no longer held); it gives
// up after RetryFor without a working connection.
func (c *Client) FollowEvents(ctx context.Context, o EventsOptions, fn FeedFunc) (next string, err error) {
	cursor := o.Cursor
	if cursor == "now" {
		// Pin "now" once: a re-open must not skip what happened meanwhile.
		if cursor, err = c.Events(ctx, EventsOptions{Cursor: "now", Types: o.Types, CommandIDs: o.CommandIDs}, fn); err != nil {
			return o.Cursor, err
		}
	}
	err = resumeByCursor(ctx, c, &cursor, func() (bool, error) {
		return false, c.feedOnce(ctx, o.query(cursor, true), &cursor, fn)
	})
	return cursor, err
}

// feedOnce reads one window of the feed; nil once it ended with its `end`
// line. *cursor follows the next_cursor of each line processed.
func (c *Client) feedOnce(ctx context.Context, q url.Values, cursor *string, fn FeedFunc) error {
	return c.withStream(ctx, request{method: "GET", path: "/v1/events", query: q, idempotent: true}, func(sctx context.Context, cancel context.CancelCauseFunc, body io.Reader) error {
		return c.readFeed(sctx, cancel, body, cursor, fn)
	})
}

// readFeed reads one window of the feed from body, as feedOnce says.
func (c *Client) readFeed(sctx context.Context, cancel context.CancelCauseFunc, body io.Reader, cursor *string, fn FeedFunc) error {
	idle := time.AfterFunc(idleTimeout, func() { cancel(ErrSilent) })
	defer idle.Stop()
	br := bufio.NewReaderSize(body, 16<<10)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			if sctx.Err() != nil && err != io.EOF {
				if cerr := context.Cause(sctx); cerr != nil && !errors.Is(cerr, context.Canceled) {
					return cerr
				}
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return c.describe(fmt.Errorf("the event feed broke off: %w", err))
		}
		idle.Reset(idleTimeout)
		var ev wire.FeedEvent
		if err := json.Unmarshal(line, &ev); err != nil || ev.NextCursor == "" {
			return fmt.Errorf("%w: a line is not a feed event: %.200q", ErrStreamBroken, line)
		}
		switch ev.Type {
		case wire.FeedHeartbeat:
		case wire.FeedEnd:
			*cursor = ev.NextCursor
			return nil
		default:
			if err := fn(&ev); err != nil {
				return &callbackError{err}
			}
		}
		*cursor = ev.NextCursor
	}
}

// WaitCommands waits until all of ids (any one of them, when any is set)
// have finished, and returns the final statuses of those that have, in the
// order of ids (nil for one still running). It follows the event feed, so
// it holds one connection whatever the number of ids; a command whose
// handle is gone (expired, evicted) or unknown is an error.
func (c *Client) WaitCommands(ctx context.Context, ids []string, anyOf bool) ([]*wire.Status, error) {
	out := make([]*wire.Status, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	// Where the feed is now, before looking at the commands: whatever
	// ends after a look is in the feed from here.
	cursor, err := c.Events(ctx, EventsOptions{Cursor: "now", Types: []string{wire.FeedExited}, CommandIDs: ids}, func(*wire.FeedEvent) error { return nil })
	if err != nil {
		return nil, err
	}
	left := 0
	for i, id := range ids {
		st, err := c.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if st.State.Finished() {
			out[i] = st
			if anyOf {
				return out, nil
			}
		} else {
			left++
		}
	}
	if left == 0 {
		return out, nil
	}
	errDone := errors.New("done")
	_, err = c.FollowEvents(ctx, EventsOptions{Cursor: cursor, Types: []string{wire.FeedExited, wire.FeedExpired, wire.FeedEvicted}, CommandIDs: ids}, func(ev *wire.FeedEvent) error {
		if ev.Type == wire.FeedGap {
			return fmt.Errorf("the daemon's event log lost %d events while waiting", *ev.DroppedEvents)
		}
		for i, id := range ids {
			if !strings.EqualFold(id, ev.CommandID) || out[i] != nil {
				continue
			}
			if ev.Type != wire.FeedExited {
				return fmt.Errorf("command %s was %s before its end was seen", id, ev.Type)
			}
			st, err := c.Get(ctx, id)
			if err != nil {
				return err
			}
			out[i] = st
			left--
		}
		if left == 0 || anyOf && slices.ContainsFunc(out, func(s *wire.Status) bool { return s != nil }) {
			return errDone
		}
		return nil
	})
	if errors.Is(err, errDone) {
		return out, nil
	}
	return out, err
}
