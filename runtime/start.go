package runtime

import (
	"errors"
	"syscall"

	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
)

// SpawnClass says why a process could not be started, for the transports'
// answers and the spawn_failures_total metric.
type SpawnClass string

// The classes of a StartFailure.
const (
	SpawnNotFound   SpawnClass = "not_found"   // ENOENT, ENOTDIR: no such executable or directory
	SpawnPermission SpawnClass = "permission"  // EACCES, EPERM, EISDIR
	SpawnExecFormat SpawnClass = "exec_format" // ENOEXEC
	SpawnResources  SpawnClass = "resources"   // EAGAIN, ENOMEM, EMFILE, ENFILE, ENOSPC (no terminal left): the sandbox ran out, worth a retry (ErrResourceExhausted)
	SpawnOther      SpawnClass = "other"
)

// SpawnClasses lists every SpawnClass, in the order metrics show them.
var SpawnClasses = []SpawnClass{SpawnNotFound, SpawnPermission, SpawnExecFormat, SpawnResources, SpawnOther}

// StartFailure is what an error of Create or Execute says about a process
// that could not be started. The transports read it here, never from the
// process layer.
type StartFailure struct {
	Class SpawnClass
	Op    string        // "exec" or "chdir"
	Path  string        // argv[0] as given (Op "exec"), or the directory (Op "chdir")
	Errno syscall.Errno // the raw errno
	// Limits names the process limits in force when the fork failed for
	// lack of processes or memory (e.g. "pids.max 400 …"); else "".
	Limits string
}

// StartFailureOf returns the StartFailure err carries, and false when err
// is not a failed start (ErrSpawnFailed or ErrResourceExhausted).
func StartFailureOf(err error) (StartFailure, bool) {
	var se *procgroup.StartError
	if !errors.As(err, &se) {
		return StartFailure{}, false
	}
	return StartFailure{Class: spawnClassOf(se.Errno), Op: se.Op, Path: se.Path, Errno: se.Errno, Limits: se.Limit}, true
}

// SpawnClassOf is the class of a failed start, SpawnOther for any other
// error (a start that failed without an errno).
func SpawnClassOf(err error) SpawnClass {
	if f, ok := StartFailureOf(err); ok {
		return f.Class
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return spawnClassOf(errno)
	}
	return SpawnOther
}

// spawnClassOf is the one table from a start's errno to its class: the
// class is what the metric counts, what the answers say (StartFailure) and
// whether a start is ErrResourceExhausted (spawnError). procgroup reports
// the raw errno and classifies nothing.
func spawnClassOf(errno syscall.Errno) SpawnClass {
	switch errno {
	case syscall.ENOENT, syscall.ENOTDIR:
		return SpawnNotFound
	case syscall.EACCES, syscall.EPERM, syscall.EISDIR:
		return SpawnPermission
	case syscall.ENOEXEC:
		return SpawnExecFormat
	case syscall.EAGAIN, syscall.ENOMEM, syscall.EMFILE, syscall.ENFILE, syscall.ENOSPC: // E2BIG is the caller's: other
		return SpawnResources
	}
	return SpawnOther
}
