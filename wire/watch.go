package wire

import (
	"net/url"
	"time"
	"unicode/utf8"
)

// FeatureWatch is announced by /v1/info when /v1/watches is served
// (docs/watch.md).
const FeatureWatch = "watch"

// Watch event types (docs/watch.md). A watch stream also sends the gap,
// heartbeat and end events of command streams.
const (
	WatchCreate      = "create"
	WatchWrite       = "write"
	WatchRemove      = "remove"
	WatchRename      = "rename"
	WatchAttrib      = "attrib"
	WatchOverflow    = "overflow"     // the kernel queue or a watch bound overflowed: re-list
	WatchRemovedRoot = "removed_root" // the watched directory is gone; the watch has ended
)

// EndWatchEnded is the reason of the end event of a watch that has ended
// (deleted, expired, or its directory removed): there is nothing more to
// read.
const EndWatchEnded = "watch_ended"

// WatchRequest is the body of POST /v1/watches.
type WatchRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`

	// EscapedPath, instead of Path, names a directory whose name is not
	// valid UTF-8 (JSON cannot carry its bytes): percent-encoded, as the
	// escaped_path of events (Path then "" or absent). NewWatchRequest
	// sets whichever fits.
	EscapedPath string `json:"escaped_path,omitempty"`
}

// NewWatchRequest is the request to watch path: Path when it is valid
// UTF-8, else EscapedPath.
func NewWatchRequest(path string, recursive bool) WatchRequest {
	if utf8.ValidString(path) {
		return WatchRequest{Path: path, Recursive: recursive}
	}
	return WatchRequest{EscapedPath: escape(path), Recursive: recursive}
}

// escape percent-encodes p's bytes but A-Z a-z 0-9 _ . - ~ / (what
// escaped_path holds; the server's encoder is pycompat.Quote).
func escape(p string) string {
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, 3*len(p))
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-', c == '~', c == '/':
			b = append(b, c)
		default:
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return string(b)
}

// WatchInfo describes a watch: the answer of POST /v1/watches and an entry
// of GET /v1/watches.
type WatchInfo struct {
	ID         string    `json:"id"`
	Path       string    `json:"path"`
	Recursive  bool      `json:"recursive"`
	CreatedAt  time.Time `json:"created_at"`
	Dirs       int       `json:"dirs"`        // directories watched
	Readers    int       `json:"readers"`     // open event streams
	NextCursor int64     `json:"next_cursor"` // the sequence number of the next event

	// EscapedPath is set only when Path is not valid UTF-8: its exact
	// bytes percent-encoded, as escaped_name of a listing (FileEntry).
	EscapedPath string `json:"escaped_path,omitempty"`
}

// WatchList is the answer of GET /v1/watches.
type WatchList struct {
	Watches []WatchInfo `json:"watches"`
}

// WatchEvent is one line of a watch's event stream. Seq is the event's
// sequence number (its cursor); next_cursor is where to resume after it.
type WatchEvent struct {
	Type          string `json:"type"`
	Seq           *int64 `json:"seq,omitempty"`            // change events
	Path          string `json:"path,omitempty"`           // relative to the base dir
	OldPath       string `json:"old_path,omitempty"`       // rename
	Dir           bool   `json:"dir,omitempty"`            // the entry is a directory
	Reason        string `json:"reason,omitempty"`         // overflow, end
	Cursor        *int64 `json:"cursor,omitempty"`         // gap: the cursor asked for
	DroppedEvents *int64 `json:"dropped_events,omitempty"` // gap
	NextCursor    int64  `json:"next_cursor"`

	// EscapedPath and EscapedOldPath are set only when Path or OldPath is
	// not valid UTF-8 (JSON text then shows each invalid byte as U+FFFD, so
	// two names can look alike): the exact bytes percent-encoded (every
	// byte but A-Z a-z 0-9 _ . - ~ / as %XX), ready to append to a
	// /v1/files/ URL path. ExactPath and ExactOldPath decode them.
	EscapedPath    string `json:"escaped_path,omitempty"`
	EscapedOldPath string `json:"escaped_old_path,omitempty"`
}

// Final reports whether e is the last event of a stream window.
func (e *WatchEvent) Final() bool { return e.Type == EventEnd }

// exact is the path escaped encodes, or p when escaped is "" (or, from a
// broken peer, does not decode).
func exact(p, escaped string) string {
	if escaped == "" {
		return p
	}
	if raw, err := url.PathUnescape(escaped); err == nil {
		return raw
	}
	return p
}

// ExactPath is the entry's path as its exact bytes (escaped_path decoded
// when set), for a name that is not valid UTF-8.
func (e *WatchEvent) ExactPath() string { return exact(e.Path, e.EscapedPath) }

// ExactOldPath is OldPath as its exact bytes (escaped_old_path decoded).
func (e *WatchEvent) ExactOldPath() string { return exact(e.OldPath, e.EscapedOldPath) }

// ExactPath is the watched dir's path as its exact bytes.
func (w *WatchInfo) ExactPath() string { return exact(w.Path, w.EscapedPath) }
