package fsroot

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotFileOrDir is OpenReadable's answer for an entry it will not read:
// not a regular file (nor a directory, where directories are allowed): a
// FIFO, a socket, a device.
var ErrNotFileOrDir = errors.New("not a regular file or a directory")

// OpenReadable opens rel ("" is the root itself) through root for reading,
// once, and answers the descriptor with its fstat. Anything but a regular
// file (or, with dirs, a directory) is refused before it is opened: opening
// a socket fails (ENXIO), a device's open can act (a tape rewinds, a
// terminal would become the daemon's own). One swapped in between that
// check and the open is opened O_NONBLOCK (a FIFO does not block) and
// O_NOCTTY, never read, and refused after the fstat: Linux has no way to
// turn an O_PATH descriptor of a file into a readable one but a re-open by
// a /proc path, which is not used. Refusals are ErrNotFileOrDir (nothing
// is left open); other errors are the open's or the fstat's, for the caller
// to classify.
func OpenReadable(root *os.Root, rel string, dirs bool) (*os.File, fs.FileInfo, error) {
	if rel == "" {
		rel = "."
	}
	readable := func(fi fs.FileInfo) bool { return fi.Mode().IsRegular() || dirs && fi.IsDir() }
	if fi, err := root.Stat(rel); err == nil && !readable(fi) {
		return nil, nil, ErrNotFileOrDir
	}
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.ENODEV) {
		return nil, nil, ErrNotFileOrDir // a socket, or a device without a driver, swapped in
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !readable(fi) {
		f.Close()
		return nil, nil, ErrNotFileOrDir
	}
	return f, fi, nil
}
