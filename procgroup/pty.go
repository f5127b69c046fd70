package procgroup

import "errors"

// ErrNotPTY is returned by Resize and TerminalEOF on a process started without
// Spec.PTY.
var ErrNotPTY = errors.New("procgroup: the process has no terminal")

// ErrNoVEOF is returned by EOFSequence when the terminal's VEOF character
// is disabled (_POSIX_VDISABLE): there is no way to type an end of file.
var ErrNoVEOF = errors.New("procgroup: the terminal has no EOF character (VEOF is disabled)")

// fileID identifies an open file by device and inode (a terminal, a pipe);
// rdev is the device number a terminal stands for (0 for a pipe).
type fileID struct {
	dev, ino, rdev uint64
}
