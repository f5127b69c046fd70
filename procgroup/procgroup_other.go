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
