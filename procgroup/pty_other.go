//go:build !linux

package procgroup

// Resize returns ErrUnsupported.
func (p *Process) Resize(ws Winsize) error { return ErrUnsupported }

// Size returns ErrUnsupported.
func (p *Process) Size() (Winsize, error) { return Winsize{}, ErrUnsupported }

// TerminalEOF returns ErrUnsupported.
func (p *Process) TerminalEOF() (veof byte, canonical bool, err error) {
	return 0, false, ErrUnsupported
}

// WaitingForInput returns false.
func (p *Process) WaitingForInput() bool { return false }

// InputLine is the pending line of a terminal (Linux only).
type InputLine struct{}

// Pending reports false.
func (l *InputLine) Pending() bool { return false }

// TrackInput does nothing.
func (p *Process) TrackInput(l *InputLine, data []byte) {}

// EOFSequence returns ErrUnsupported.
func (p *Process) EOFSequence(l *InputLine) ([]byte, error) { return nil, ErrUnsupported }
