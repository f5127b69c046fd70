//go:build !linux

package procgroup

import (
	"context"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Reaper is not supported on this system; see the Linux implementation.
type Reaper struct{}

// NewReaper returns ErrUnsupported on systems other than Linux.
func NewReaper(log *zap.Logger) (*Reaper, error) { return nil, ErrUnsupported }

// Close does nothing.
func (r *Reaper) Close() error { return nil }

// OrphansReaped returns 0.
func (r *Reaper) OrphansReaped() uint64 { return 0 }

// WaitOrphans returns ErrUnsupported.
func (r *Reaper) WaitOrphans(ctx context.Context, n uint64) error { return ErrUnsupported }

// Start returns ErrUnsupported.
func (r *Reaper) Start(spec Spec) (*Process, error) { return nil, ErrUnsupported }

// Signal returns ErrUnsupported.
func (p *Process) Signal(sig syscall.Signal) error { return ErrUnsupported }

// Terminate does nothing.
func (p *Process) Terminate(ctx context.Context, grace time.Duration) {}

// cmdCgroup and oomBaseline exist only on Linux.
type (
	cmdCgroup   struct{}
	oomBaseline struct{}
)

// The isolation modes (see the Linux implementation).
const (
	ModeCgroup  = "cgroup"
	ModeThreads = "threads"
)

// DefaultPidsHeadroom: see the Linux implementation.
const DefaultPidsHeadroom = 128

// Isolation: see the Linux implementation.
type Isolation struct {
	Mode            string
	Reason          string
	Cgroup          string
	Controllers     []string
	CommandsPidsMax int64
	PidfdSignals    bool
}

// CgroupOptions: see the Linux implementation.
type CgroupOptions struct {
	Root         string
	MoveSelf     bool
	PidsHeadroom int64
}

// UseCgroups returns ErrUnsupported.
func (r *Reaper) UseCgroups(opts CgroupOptions) error { return ErrUnsupported }

// Isolation reports the threads mode.
func (r *Reaper) Isolation() Isolation {
	return Isolation{Mode: ModeThreads, Reason: "unsupported on this operating system"}
}

// Release does nothing.
func (p *Process) Release() {}

// zombie is never true here: nothing is started on this system.
func (p *Process) zombie() bool { return false }

// MarkInheritedFDs does nothing on systems other than Linux.
func MarkInheritedFDs() []int { return nil }

// Members returns nil: without /proc the processes of a command are not
// known here.
func (p *Process) Members() []int { return nil }
