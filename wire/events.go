package wire

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// FeatureEvents is announced in Info.Features by a daemon that serves the
// lifecycle event feed GET /v1/events (docs/protocol.md §4 "The event feed").
const FeatureEvents = "events"

// Types of the events of the feed. FeedGap, FeedHeartbeat and FeedEnd are
// about the feed itself (they have no command_id and no seq); the others
// are about one command.
const (
	FeedCreated   = "created"   // the command was accepted (its created_at)
	FeedStarted   = "started"   // its process was started (pid)
	FeedExited    = "exited"    // it finished: its final state, exit code, signal, oom_killed and durations
	FeedExpired   = "expired"   // its handle was dropped after the result TTL
	FeedEvicted   = "evicted"   // its handle was dropped to keep the retained count
	FeedGap       = "gap"       // the cursor asked for is older than the log: dropped_events were lost
	FeedHeartbeat = "heartbeat" // nothing happened for 5–15 s (NDJSON only; protocol.md)
	FeedEnd       = "end"       // the window closed: reason max_wait, caught_up or shutting_down
)

// FeedCommandTypes are the event types about a command, the values of the
// feed's `type` filter.
var FeedCommandTypes = []string{FeedCreated, FeedStarted, FeedListening, FeedClosed, FeedExited, FeedExpired, FeedEvicted}

// FeedEvent is one line of GET /v1/events, or one text frame of its
// WebSocket. NextCursor is always there: re-open with the NextCursor of the
// last event processed and every event after it arrives exactly once.
type FeedEvent struct {
	Type      string     `json:"type"`
	Seq       int64      `json:"seq,omitempty"`        // command events: 1, 2, 3, … within one daemon incarnation
	CommandID string     `json:"command_id,omitempty"` // command events
	Time      *time.Time `json:"time,omitempty"`       // command events: when it happened (UTC)

	PID int `json:"pid,omitempty"` // started

	Listener *Listener `json:"listener,omitempty"` // listening, closed

	// exited: the final status.
	State           State      `json:"state,omitempty"`
	ExitCode        *int       `json:"exit_code,omitempty"`
	Signal          *string    `json:"signal,omitempty"`
	OOMKilled       *bool      `json:"oom_killed,omitempty"`
	StartedAt       *time.Time `json:"started_at,omitempty"`
	FinishedAt      *time.Time `json:"finished_at,omitempty"`
	DurationSeconds *float64   `json:"duration_seconds,omitempty"` // started_at → finished_at
	Resources       *Resources `json:"resources,omitempty"`

	Cursor        string `json:"cursor,omitempty"`         // gap: the cursor asked for
	DroppedEvents *int64 `json:"dropped_events,omitempty"` // gap: events lost between Cursor and NextCursor
	Reason        string `json:"reason,omitempty"`         // end
	NextCursor    string `json:"next_cursor"`
}

// Final reports whether e is the last event of a feed window.
func (e *FeedEvent) Final() bool { return e.Type == FeedEnd }

// FeedCursor is a position in the event feed of one daemon incarnation:
// "<instance>-<seq>", where instance is the daemon's instance id (16
// lowercase hex digits, new at every start) and seq the sequence number of
// the next event to read. A daemon refuses a cursor of another instance
// (409 stale_cursor) instead of misreading it.
type FeedCursor struct {
	Instance string
	Seq      int64
}

func (c FeedCursor) String() string { return c.Instance + "-" + strconv.FormatInt(c.Seq, 10) }

// ParseFeedCursor parses a cursor written by FeedCursor.String.
func ParseFeedCursor(s string) (FeedCursor, error) {
	inst, seq, ok := strings.Cut(s, "-")
	if !ok || len(inst) != 16 || strings.Trim(inst, "0123456789abcdef") != "" {
		return FeedCursor{}, errors.New(`a feed cursor is "<16 hex digits>-<sequence number>", the next_cursor of a feed event`)
	}
	n, err := strconv.ParseInt(seq, 10, 64)
	if err != nil || n < 1 || seq[0] == '+' {
		return FeedCursor{}, errors.New("the sequence number of a feed cursor is a positive integer")
	}
	return FeedCursor{Instance: inst, Seq: n}, nil
}

// CodeStaleCursor is the error code of a feed cursor of another daemon
// incarnation (409): start over without a cursor.
const CodeStaleCursor = "stale_cursor"
