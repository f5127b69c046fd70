package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/cli"
)

// TestCLITokenUnsendable (D6): a token no header can carry (a second line,
// a NUL, a BOM), from a file or SANDBOX_RUNTIME_TOKEN. Before, `ps` hung
// silently: the client took the transport's invalid-header error for one
// that may go away and retried it for 30 s. Now it is refused at once,
// naming where the token came from, never the token.
func TestCLITokenUnsendable(t *testing.T) {
	d := startCLIDaemon(t)
	dir := t.TempDir()
	twoLines := filepath.Join(dir, "two-lines")
	os.WriteFile(twoLines, []byte("s3cret\nmore\n"), 0o600)
	nul := filepath.Join(dir, "nul")
	os.WriteFile(nul, []byte("s3c\x00ret"), 0o600)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"file of two lines", nil, []string{"ps", "--url", d.url, "--token-file", twoLines}, []string{twoLines, "second line"}},
		{"file with a NUL", nil, []string{"ps", "--url", d.url, "--token-file", nul}, []string{nul, "control byte"}},
		{"variable of two lines", []string{"SANDBOX_RUNTIME_TOKEN=s3cret\nmore"}, []string{"ps", "--url", d.url}, []string{"SANDBOX_RUNTIME_TOKEN", "second line"}},
		{"variable with a BOM", []string{"SANDBOX_RUNTIME_TOKEN=\uFEFFs3cret"}, []string{"ps", "--url", d.url}, []string{"SANDBOX_RUNTIME_TOKEN", "byte-order mark"}},
	} {
		start := time.Now()
		r := runClient(t, tc.env, "", tc.args...)
		took := time.Since(start)
		if r.code != cli.ExitFailed || took > 5*time.Second {
			t.Errorf("%s: exit %d after %v; want %d at once; stderr %q", tc.name, r.code, took.Round(time.Millisecond), cli.ExitFailed, r.stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr does not say %q: %q", tc.name, w, r.stderr)
			}
		}
		if strings.Contains(r.stderr, "s3c") {
			t.Errorf("%s: stderr shows the token: %q", tc.name, r.stderr)
		}
	}
}
