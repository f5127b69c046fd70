package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// TestEventFeedShutdownDrains: an event logged before shutdown ends the
// streams reaches every feed, NDJSON and WebSocket, before its `end`
// shutting_down (after a restart its cursor is stale: what the end line
// skipped would be lost for good). The events come just before
// EndStreams, so the stream sees shutdown and new events at once; before
// the fix the `end` went out at the reader's position whenever shutdown
// was noticed first (about one round in two).
func TestEventFeedShutdownDrains(t *testing.T) {
	for round := range 8 {
		for _, ws := range []bool{false, true} {
			ts := newTestServer(t, atQuietAPI)
			var next func() (wire.FeedEvent, bool)
			if ws {
				u := "ws" + strings.TrimPrefix(ts.URL, "http") + "/v1/events?cursor=now"
				c, _, err := websocket.DefaultDialer.Dial(u, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetReadDeadline(time.Now().Add(atTimeout))
				next = func() (wire.FeedEvent, bool) {
					_, b, err := c.ReadMessage()
					if err != nil {
						return wire.FeedEvent{}, false
					}
					var e wire.FeedEvent
					if err := json.Unmarshal(b, &e); err != nil {
						t.Fatalf("frame %q: %v", b, err)
					}
					return e, true
				}
			} else {
				f := evOpen(t, ts, "cursor=now&max_wait=60")
				defer f.close()
				next = f.next
			}
			for range 3 {
				atCreate(t, ts, `{"argv":["true"]}`)
			}
			head := ts.M.EventHead()
			ts.EndStreams()
			var seqs []int64
			var end wire.FeedEvent
			for {
				e, ok := next()
				if !ok {
					t.Fatalf("round %d (websocket %v): the feed ended without an end line after %v", round, ws, seqs)
				}
				if e.Type == wire.FeedEnd {
					end = e
					break
				}
				seqs = append(seqs, e.Seq)
			}
			cur, err := wire.ParseFeedCursor(end.NextCursor)
			if err != nil || end.Reason != wire.EndShuttingDown {
				t.Fatalf("round %d (websocket %v): end %+v (%v)", round, ws, end, err)
			}
			if cur.Seq < head.Seq || int64(len(seqs)) != cur.Seq-1 {
				t.Fatalf("round %d (websocket %v): %d events logged before shutdown (next %d), the feed sent seqs %v then end at %s",
					round, ws, head.Seq-1, head.Seq, seqs, end.NextCursor)
			}
		}
	}
}
