package wire

import (
	"encoding/json"
	"testing"
)

// TestWatchExactPath: ExactPath / ExactOldPath give a watch event's exact
// name bytes from escaped_path / escaped_old_path (issue 25, W1).
func TestWatchExactPath(t *testing.T) {
	var e WatchEvent
	if err := json.Unmarshal([]byte(`{"type":"rename","seq":3,"path":"d/b\ufffd","old_path":"d/a\ufffd","next_cursor":4,"escaped_path":"d/b%FD","escaped_old_path":"d/a%FF"}`), &e); err != nil {
		t.Fatal(err)
	}
	if e.ExactPath() != "d/b\xfd" || e.ExactOldPath() != "d/a\xff" {
		t.Fatalf("ExactPath %q ExactOldPath %q", e.ExactPath(), e.ExactOldPath())
	}
	plain := WatchEvent{Path: "d/x"}
	if plain.ExactPath() != "d/x" || plain.ExactOldPath() != "" {
		t.Fatalf("a UTF-8 path: %q %q", plain.ExactPath(), plain.ExactOldPath())
	}
	w := WatchInfo{Path: "\ufffd", EscapedPath: "%FE"}
	if w.ExactPath() != "\xfe" {
		t.Fatalf("WatchInfo.ExactPath %q", w.ExactPath())
	}
}
