package fsroot

import "io"

// Copy copies src to dst with a small (32 KiB) buffer and says which side
// failed: a read error is the client's (or the source's), a write error
// the file system's.
func Copy(dst io.Writer, src io.Reader) (readErr, writeErr error) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return nil, werr
			}
		}
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return err, nil
		}
	}
}
