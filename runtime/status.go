package runtime

import (
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// Status is a snapshot of a command (protocol.md §2 "Status object"): the
// protocol's own type, so that the daemon encodes exactly what the client,
// the tests and the bench decode. Status is plain data and safe to share.
type Status = wire.Status

// Resources is what the kernel reported for the process tree at reap time.
type Resources = wire.Resources

// PTYStatus is the terminal of a command in its Status.
type PTYStatus = wire.PTYStatus

// Wire returns the protocol's name of s (wire.State); "starting" is never
// reported.
func (s State) Wire() wire.State { return wire.State(s.String()) }

func utc(t time.Time) time.Time { return t.UTC() }

func utcPtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
