//go:build linux

package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/client"
	"github.com/sandbox-runtime/sandbox-runtime/internal/daemontest"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// watchNonUTF8 runs `sandbox-runtime watch ARGS d` against the real daemon
// while files a\xff and a\xfe are created in d and a\xff renamed to b\xfd,
// and returns its stdout.
func watchNonUTF8(t *testing.T, args ...string) string {
	t.Helper()
	base := t.TempDir()
	d := filepath.Join(base, "d")
	os.Mkdir(d, 0o755)
	dm := daemontest.StartT(t, daemontest.Options{Bin: daemonBin, BaseDir: base,
		LogPath: filepath.Join(t.TempDir(), "daemon.log"), CheckLeaks: true})
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := runOut(t, dm.URL, append(append([]string{"watch", "--count", "3"}, args...), "d")...)
		done <- result{code, out, errOut}
	}()
	// The changes are made once the CLI's watch exists (bounded wait).
	c, err := client.New(dm.URL, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(20 * time.Second); ; {
		ws, err := c.Watches(context.Background())
		if err == nil && len(ws) == 1 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the CLI made no watch: %v %v", ws, err)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a bound
	}
	os.WriteFile(filepath.Join(d, "a\xff"), nil, 0o644)
	os.WriteFile(filepath.Join(d, "a\xfe"), nil, 0o644)
	os.Rename(filepath.Join(d, "a\xff"), filepath.Join(d, "b\xfd"))
	r := <-done
	if r.code != 0 {
		t.Fatalf("watch: exit %d, stderr %s", r.code, r.stderr)
	}
	return r.stdout
}

// TestWatchCLINonUTF8: names that are not valid UTF-8 are printed so that
// a\xff and a\xfe stay apart: Go-quoted in text lines, escaped_path in
// --json lines (issue 25, W1).
func TestWatchCLINonUTF8(t *testing.T) {
	t.Run("text", func(t *testing.T) {
		out := watchNonUTF8(t)
		want := "create \"d/a\\xff\"\ncreate \"d/a\\xfe\"\nrename \"d/a\\xff\" -> \"d/b\\xfd\"\n"
		if out != want {
			t.Fatalf("stdout:\n%s\nwant:\n%s", out, want)
		}
	})
	t.Run("json", func(t *testing.T) {
		out := watchNonUTF8(t, "--json")
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var ev wire.WatchEvent
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			got = append(got, ev.Type+" "+ev.EscapedOldPath+" "+ev.EscapedPath+" "+ev.ExactPath())
		}
		want := []string{"create  d/a%FF d/a\xff", "create  d/a%FE d/a\xfe", "rename d/a%FF d/b%FD d/b\xfd"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("events %q, want %q", got, want)
		}
	})
}

// TestWatchCLINonUTF8Dir: the CLI watches a directory whose name is not
// valid UTF-8 (the client sends escaped_path) and prints its events quoted.
func TestWatchCLINonUTF8Dir(t *testing.T) {
	base := t.TempDir()
	d := filepath.Join(base, "a\xff")
	os.Mkdir(d, 0o755)
	os.Mkdir(filepath.Join(base, "a\xfe"), 0o755)
	dm := daemontest.StartT(t, daemontest.Options{Bin: daemonBin, BaseDir: base,
		LogPath: filepath.Join(t.TempDir(), "daemon.log"), CheckLeaks: true})
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := runOut(t, dm.URL, "watch", "--count", "1", "a\xff")
		done <- result{code, out, errOut}
	}()
	c, err := client.New(dm.URL, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(20 * time.Second); ; {
		ws, err := c.Watches(context.Background())
		if err == nil && len(ws) == 1 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("the CLI ended before its watch was seen: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("the CLI made no watch: %v %v", ws, err)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a bound
	}
	os.WriteFile(filepath.Join(base, "a\xfe", "no"), nil, 0o644)
	os.WriteFile(filepath.Join(d, "x"), nil, 0o644)
	r := <-done
	if r.code != 0 || r.stdout != "create \"a\\xff/x\"\n" || !strings.Contains(r.stderr, `watching "/a\xff"`) {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
