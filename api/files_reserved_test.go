package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPutReservedName (issue 22, F6): a PUT of one of the daemon's
// temporary-file names (fsroot.Hidden), at any depth, is 400 and writes
// nothing: such a file would be hidden from listings, kept by a recursive
// DELETE and removed at the next start. Look-alikes are files as any other.
func TestPutReservedName(t *testing.T) {
	ts := newTestServer(t, nil)
	for _, p := range []string{".sandbox-put-0123456789abcdef.tmp", "d/.sandbox-put-0123456789abcdef.tmp", ".sandbox-put-0123456789abcdef.tmp/x",
		".sandbox-upload-123e4567-e89b-12d3-a456-426614174000.tmp"} {
		status, _, body := fileReq(t, "PUT", ts.URL+"/v1/files/"+p, strings.NewReader("x"))
		if status != 400 || !strings.Contains(string(body), "reserved") {
			t.Errorf("PUT %s: %d %s; want 400 naming the reserved name", p, status, body)
		}
	}
	for _, n := range []string{".sandbox-put-0123456789abcdef.tmp", "d", ".sandbox-upload-123e4567-e89b-12d3-a456-426614174000.tmp"} {
		if _, err := os.Lstat(filepath.Join(ts.BaseDir, n)); err == nil {
			t.Errorf("%s exists after the refused PUTs", n)
		}
	}
	if status, _, body := fileReq(t, "PUT", ts.URL+"/v1/files/.sandbox-put-notes.tmp", strings.NewReader("x")); status != 204 {
		t.Errorf("PUT .sandbox-put-notes.tmp: %d %s; want 204", status, body)
	}
}
