package errno

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
)

func TestOfAndOr(t *testing.T) {
	wrapped := fmt.Errorf("outer: %w", &os.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT})
	for _, tc := range []struct {
		err      error
		of, orIO syscall.Errno
	}{
		{nil, 0, syscall.EIO},
		{errors.New("plain"), 0, syscall.EIO},
		{syscall.EACCES, syscall.EACCES, syscall.EACCES},
		{wrapped, syscall.ENOENT, syscall.ENOENT},
	} {
		if got := Of(tc.err); got != tc.of {
			t.Errorf("Of(%v) = %v, want %v", tc.err, got, tc.of)
		}
		if got := Or(tc.err, syscall.EIO); got != tc.orIO {
			t.Errorf("Or(%v, EIO) = %v, want %v", tc.err, got, tc.orIO)
		}
	}
}
