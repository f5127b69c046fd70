package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// TestCLIWatch: `sandbox-runtime watch -r PATH` against the real daemon
// prints the changes below PATH; --count ends it, and its watch is deleted.
func TestCLIWatch(t *testing.T) {
	t.Parallel()
	d := startCLIDaemon(t)
	os.MkdirAll(filepath.Join(d.base, "w", "a"), 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, "watch", "-r", "--count", "2", ":w")
	cmd.Env = append(cliEnv(), d.env()...)
	stderr, _ := cmd.StderrPipe()
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The stderr line says the watch is in place.
	br := bufio.NewReader(stderr)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "watching") {
		t.Fatalf("first stderr line %q (%v)", line, err)
	}
	os.WriteFile(filepath.Join(d.base, "w", "a", "x"), nil, 0o644)
	os.Rename(filepath.Join(d.base, "w", "a", "x"), filepath.Join(d.base, "w", "y"))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch: %v; stdout %q", err, out.String())
	}
	if want := "create w/a/x\nrename w/a/x -> w/y\n"; out.String() != want {
		t.Fatalf("stdout %q, want %q", out.String(), want)
	}
	// The client deleted its watch on the way out.
	resp, err := http.Get(d.url + "/v1/watches")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list wire.WatchList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Watches) != 0 {
		t.Fatalf("watches after the client's exit: %+v (%v)", list, err)
	}
}
