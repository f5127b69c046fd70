// Package errno is the one place that extracts the kernel's errno from an
// error (an *os.PathError, *os.SyscallError, *exec.Error … wrapping a
// syscall.Errno). Callers that need a value when there is none say which.
package errno

import (
	"errors"
	"syscall"
)

// Of returns the syscall.Errno err wraps, or 0 when it wraps none.
func Of(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

// Or returns the syscall.Errno err wraps, or fallback when it wraps none
// (a nil err included).
func Or(err error, fallback syscall.Errno) syscall.Errno {
	if e := Of(err); e != 0 {
		return e
	}
	return fallback
}
