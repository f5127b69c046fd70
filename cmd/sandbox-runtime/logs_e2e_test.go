//go:build linux

package main

import (
	"strings"
	"testing"
	"time"
)

// TestE2ELoggerNames: each component names its own logger once (api,
// runtime, reaper, …): the reaper's lines of a started command say
// "reaper", and no line of the daemon repeats a name ("reaper.reaper").
func TestE2ELoggerNames(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx := testCtx(t, 30*time.Second)
	st := d.create(ctx, map[string]any{"argv": []string{"true"}})
	d.waitFinished(ctx, st.CommandID)
	m, ok := d.waitLog(5*time.Second, func(m map[string]any) bool { return m["msg"] == "started" && m["argv0"] == "true" })
	if !ok {
		t.Fatalf("no reaper line for the started command in:\n%s", d.logs())
	}
	if m["logger"] != "reaper" {
		t.Errorf("the reaper's line is logged by %q; want \"reaper\"", m["logger"])
	}
	d.waitLog(0, func(m map[string]any) bool {
		name, _ := m["logger"].(string)
		parts := strings.Split(name, ".")
		for i := 1; i < len(parts); i++ {
			if parts[i] == parts[i-1] {
				t.Errorf("logger %q repeats a name", name)
				return true
			}
		}
		return false
	})
}
