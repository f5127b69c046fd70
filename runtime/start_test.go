package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestStartFailureOf: a failed start reaches the caller classified, with
// the errno and the path, from Create and from Execute alike; other errors
// are not start failures.
func TestStartFailureOf(t *testing.T) {
	m := newManager(t, nil)
	notExec := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv  []string
		class SpawnClass
		errno syscall.Errno
	}{
		{[]string{"no-such-command-h2"}, SpawnNotFound, syscall.ENOENT},
		{[]string{notExec}, SpawnPermission, syscall.EACCES},
	} {
		_, _, err := m.Create(CreateRequest{Argv: tc.argv})
		if !errors.Is(err, ErrSpawnFailed) {
			t.Fatalf("Create %q: %v; want ErrSpawnFailed", tc.argv, err)
		}
		_, execErr := m.Execute(context.Background(), tc.argv, 0)
		for _, e := range []error{err, execErr} {
			f, ok := StartFailureOf(e)
			if !ok || f.Class != tc.class || f.Errno != tc.errno || f.Path != tc.argv[0] || f.Op != "exec" {
				t.Errorf("StartFailureOf(%v) = %+v, %v; want class %s, errno %v, path %q", e, f, ok, tc.class, tc.errno, tc.argv[0])
			}
			if c := SpawnClassOf(e); c != tc.class {
				t.Errorf("SpawnClassOf(%v) = %s; want %s", e, c, tc.class)
			}
		}
	}
	if _, ok := StartFailureOf(ErrTooManyRunning); ok {
		t.Error("StartFailureOf(ErrTooManyRunning) = true")
	}
	if c := SpawnClassOf(errors.New("x")); c != SpawnOther {
		t.Errorf("SpawnClassOf(plain error) = %s; want other", c)
	}
}
