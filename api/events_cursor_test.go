package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// TestEventFeedLongCursorEcho: a 5,000-byte garbage cursor is refused with
// a 400 whose message quotes only its first 64 bytes.
func TestEventFeedLongCursorEcho(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	cursor := strings.Repeat("z", 5000)
	code, b := atDo(t, "GET", ts.URL+"/v1/events?cursor="+cursor, "", nil)
	var eb wire.ErrorBody
	if err := json.Unmarshal(b, &eb); err != nil || code != http.StatusBadRequest || eb.Error.Code != "invalid_request" {
		t.Fatalf("a long bad cursor: %d %.200s (%v); want 400 invalid_request", code, b, err)
	}
	msg := eb.Error.Message
	if len(msg) > 400 || !strings.Contains(msg, strings.Repeat("z", 64)+"…") || strings.Contains(msg, strings.Repeat("z", 65)) {
		t.Fatalf("the message (%d bytes) should quote the cursor's first 64 bytes and …: %.300s", len(msg), msg)
	}
}
