//go:build linux

package cli

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPumpStdinDetachSendsFirst (issue 20, attacker D6): Ctrl-] does not
// drop what was read before it: the detach waits for those bytes to be
// sent, saying so, and reports how many could not be sent within
// detachDrain.
func TestPumpStdinDetachSendsFirst(t *testing.T) {
	t.Parallel()
	for _, stuck := range []bool{false, true} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		var errb syncBuffer
		c := &cli{name: "attach", stdin: r, stderr: &errb}
		called := make(chan string, 4)
		release := make(chan struct{})
		send := func(b []byte, eof bool) error {
			called <- string(b)
			if stuck {
				<-release // the command never reads: the send never ends
				return nil
			}
			<-release
			return nil
		}
		detached := make(chan int64, 1)
		go c.pumpStdin(send, pumpOptions{detach: func(unsent int64) { detached <- unsent }})
		w.Write([]byte("hello\x1d"))
		if got := <-called; got != "hello" {
			t.Fatalf("sent %q; want hello", got)
		}
		select {
		case n := <-detached:
			t.Fatalf("stuck=%v: detached (unsent %d) while hello was still being sent", stuck, n)
		default:
		}
		// The note comes while hello is still unsent (its send waits for
		// release): wait for it before the send may finish.
		const note = "detaching: sending the 5 bytes read before Ctrl-] first"
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(errb.String(), note); {
			if time.Now().After(deadline) {
				t.Fatalf("stuck=%v: stderr %q after 10 s; want the note that 5 bytes are sent first", stuck, errb.String())
			}
			time.Sleep(time.Millisecond) // polls a condition, bounded
		}
		t0 := time.Now()
		if !stuck {
			close(release)
		}
		n := <-detached
		switch {
		case !stuck && n != 0:
			t.Errorf("detach after the send: unsent %d; want 0", n)
		case stuck && (n != 5 || time.Since(t0) < detachDrain-time.Second):
			t.Errorf("detach with the send stuck: unsent %d after %v; want 5 after %v", n, time.Since(t0), detachDrain)
		}
		if !strings.Contains(errb.String(), "detaching: sending the 5 bytes read before Ctrl-] first") {
			t.Errorf("stderr %q; want the note that 5 bytes are sent first", errb.String())
		}
		if stuck {
			close(release)
		}
		w.Close()
		r.Close()
	}
}
