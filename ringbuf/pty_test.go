package ringbuf

import "testing"

// TestPTYStream: a terminal's bytes keep their stream, have cursors like any
// other, and count in neither the stdout nor the stderr total.
func TestPTYStream(t *testing.T) {
	if got := PTY.String(); got != "pty" {
		t.Errorf("PTY.String() = %q; want pty", got)
	}
	r := New(1024, 16)
	r.Append(PTY, []byte("ab"))
	r.Append(PTY, []byte("cd"))
	res, err := r.Read(1, 100, nil, nil)
	if err != nil || len(res.Records) != 1 || res.Records[0].Stream != PTY || string(res.Records[0].Data) != "bcd" || res.Records[0].Cursor != 1 {
		t.Fatalf("read from 1: %+v, %v; want one pty record \"bcd\" at 1", res.Records, err)
	}
	if st := r.Stats(); st.End != 4 || st.StdoutTotal != 0 || st.StderrTotal != 0 {
		t.Errorf("stats %+v; want End 4, no stdout or stderr", st)
	}
}
