package processv1

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCodeIsCurrent regenerates the Go code from process.proto with
// gen.sh into a temporary directory and fails when it differs from the files
// checked in: an edit of the .proto without `go generate`, or a hand edit of
// generated code.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Skip("protoc is not installed on this machine (apt-get install protobuf-compiler; CI installs it)")
	}
	out := t.TempDir()
	cmd := exec.Command("sh", "gen.sh", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen.sh: %v\n%s", err, b)
	}
	for _, name := range []string{"process.pb.go", "process_grpc.pb.go"} {
		want, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what process.proto generates: run `go generate ./sandboxd/processv1/`", name)
		}
	}
}
