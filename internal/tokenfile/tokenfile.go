// Package tokenfile reads a bearer token from a file, with the checks the
// daemon applies at start and on every re-read (api) and the command-line
// client applies to --token-file and SANDBOX_RUNTIME_TOKEN_FILE (cli): one
// reading, so that a file one accepts the other never refuses.
package tokenfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// MaxBytes bounds a token file (protocol.md §6): a bearer token is
// a few dozen bytes, and a file larger than this is refused at start and on
// every re-read, never read whole (a 300 MB file, or a symlink to
// /dev/zero, must not cost the daemon its memory).
const MaxBytes = 4 << 10

// Read reads the token of a token file: the file's contents
// without surrounding whitespace. It refuses (with an error that never
// contains the token) a file that is missing or unreadable, not a regular
// file once symlinks are followed (a FIFO, a device, a directory: the open
// never blocks on one), larger than MaxBytes, blank, or holding
// what no request can send as a bearer token (wire.CheckToken).
func Read(path string) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO or a device neither waits for a writer
	// nor for a carrier. Symlinks are followed (a Kubernetes secret volume
	// is a chain of them); what they lead to is checked on the open file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, unwrapPath(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, unwrapPath(err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", fileKind(fi.Mode()))
	}
	if fi.Size() > MaxBytes {
		return nil, fmt.Errorf("larger than %d bytes (%d)", MaxBytes, fi.Size())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, unwrapPath(err)
	}
	if len(data) > MaxBytes { // it grew since the stat
		return nil, fmt.Errorf("larger than %d bytes", MaxBytes)
	}
	tok := []byte(strings.TrimSpace(string(data)))
	if len(tok) == 0 {
		return nil, errors.New("the file is empty")
	}
	// A token no request can send (a second line, NUL, a BOM) would
	// refuse every request while looking like auth is on.
	if err := wire.CheckToken(string(tok)); err != nil {
		return nil, err
	}
	return tok, nil
}

// unwrapPath drops the *fs.PathError around err: callers name the file.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return m.Type().String()
}
