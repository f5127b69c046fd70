package pycompat

import (
	"errors"
	"fmt"
	"os"

	sysErrno "github.com/sandbox-runtime/sandbox-runtime/internal/errno"
)

// OSErrorText is str() of the OSError Python would have raised for err.
func OSErrorText(err error) string {
	errno := sysErrno.Of(err)
	if errno == 0 {
		return err.Error()
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return OSError(errno, pe.Path)
	}
	return fmt.Sprintf("[Errno %d] %s", uint64(errno), Strerror(errno))
}
