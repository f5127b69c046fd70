//go:build linux

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCLITokenFileHostile: the CLI reads its token file with the daemon's
// checks (issue 20 item 8, its sibling): a FIFO is refused at once instead
// of hanging the CLI, and a huge file is refused without being read.
func TestCLITokenFileHostile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(300 << 20)
	f.Close()
	for file, want := range map[string]string{fifo: "FIFO", huge: "larger than 4096 bytes"} {
		done := make(chan error, 1)
		go func() { _, err := readToken(file); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), file) {
				t.Errorf("readToken(%s): %v; want an error naming the file and saying %q", file, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("readToken(%s) still blocked after 5 s", file)
		}
	}
}
