//go:build !linux

package procgroup

// Resize returns ErrUnsupported.
func (p *Process) Resize(ws Winsize) error { return ErrUnsupported }

// TerminalEOF returns ErrUnsupported.
func (p *Process) TerminalEOF() (veof byte, canonical bool, err error) {
	return 0, false, ErrUnsupported
}

// WaitingForInput returns false.
func (p *Process) WaitingForInput() bool { return false }
