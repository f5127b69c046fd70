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

// TestStartWithoutDescriptorsIsResourceExhausted: a start that finds the
// descriptor table full (EMFILE making the pipes) is ErrResourceExhausted,
// worth a retry, as protocol.md §2 promises for running out of descriptors
// "anywhere", and its class is the same resources class the metric counts:
// one table decides both. The table is "full" by lowering RLIMIT_NOFILE to
// the lowest free descriptor for the duration of the two starts (this test
// is not parallel: nothing else runs).
func TestStartWithoutDescriptorsIsResourceExhausted(t *testing.T) {
	m := newManager(t, nil)
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	probe, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(probe)
	full := old
	full.Cur = uint64(probe)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &full); err != nil {
		t.Fatal(err)
	}
	_, _, createErr := m.Create(CreateRequest{Argv: []string{"true"}})
	_, execErr := m.Execute(context.Background(), []string{"true"}, 0)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{"Create": createErr, "Execute": execErr} {
		if !errors.Is(err, ErrResourceExhausted) || errors.Is(err, ErrSpawnFailed) {
			t.Errorf("%s with no descriptor left: %v; want ErrResourceExhausted (not ErrSpawnFailed)", name, err)
		}
		if f, ok := StartFailureOf(err); !ok || f.Class != SpawnResources || f.Errno != syscall.EMFILE {
			t.Errorf("%s: StartFailureOf = %+v, %v; want class resources, EMFILE", name, f, ok)
		}
	}
	if _, _, err := m.Create(CreateRequest{Argv: []string{"true"}}); err != nil {
		t.Errorf("Create once the limit is back: %v", err)
	}
}
