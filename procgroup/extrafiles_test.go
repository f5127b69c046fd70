//go:build linux

package procgroup

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestExtraFiles: Spec.ExtraFiles become the child's fds 3, 4, … (a pipe
// it writes to on fd 4 and reads from on fd 3), and the parent's copies stay
// the caller's.
func TestExtraFiles(t *testing.T) {
	r := newReaper(t)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Start(Spec{Argv: []string{"sh", "-c", "read line <&3; echo got $line >&4"}, Env: os.Environ(), ExtraFiles: []*os.File{inR, outW}})
	if err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	defer outR.Close()
	io.WriteString(inW, "ping\n")
	inW.Close()
	b, err := io.ReadAll(outR)
	if err != nil || strings.TrimSpace(string(b)) != "got ping" {
		t.Fatalf("fd 4 carried %q (%v); want got ping", b, err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("sh did not exit")
	}
	p.Stdout.Close()
	p.Stderr.Close()
	if p.Exit().Code != 0 {
		t.Fatalf("exit %+v", p.Exit())
	}
}
