package httpx

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/internal/conntest"
)

// TestBoundWrites: a write made while no deadline is set gets WriteWait for
// each ProgressChunk; a deadline the server sets is the write's own; one
// cleared again brings the default back; ReadFrom (a file body) moves every
// byte under the same rule.
func TestBoundWrites(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := &conntest.Log{}
	ln := BoundWrites(conntest.Listener{Listener: raw, Log: log})
	defer ln.Close()
	client, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make(chan []byte, 1)
	go func() {
		client.SetReadDeadline(time.Now().Add(30 * time.Second)) // bounded
		b, _ := io.ReadAll(client)
		got <- b
	}()
	var want bytes.Buffer
	write := func(p []byte) {
		t.Helper()
		if n, err := c.Write(p); err != nil || n != len(p) {
			t.Fatalf("wrote %d of %d: %v", n, len(p), err)
		}
		want.Write(p)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), (2*ProgressChunk+ProgressChunk/2)/16)
	write(big) // 1: no deadline set: three writes, each armed
	own := time.Now().Add(time.Hour)
	c.SetWriteDeadline(own)
	write(big) // 2: the server's deadline: one write under it
	c.SetWriteDeadline(time.Time{})
	write([]byte("small")) // 3: cleared: the default again
	f := filepath.Join(t.TempDir(), "body")
	os.WriteFile(f, big, 0o644)
	src, _ := os.Open(f)
	defer src.Close()
	if n, err := c.(io.ReaderFrom).ReadFrom(&io.LimitedReader{R: src, N: int64(len(big))}); err != nil || n != int64(len(big)) {
		t.Fatalf("ReadFrom moved %d of %d: %v", n, len(big), err)
	}
	want.Write(big)
	c.Close()
	if b := <-got; !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("the client received %d bytes; want the %d written", len(b), want.Len())
	}

	writes := log.Writes()
	if len(writes) < 5 {
		t.Fatalf("%d writes recorded", len(writes))
	}
	fresh := func(i int, w conntest.Write) {
		t.Helper()
		if d := w.Deadline.Sub(w.At); d <= 0 || d > WriteWait {
			t.Errorf("write %d (%d bytes): deadline %v after it began; want within WriteWait", i, len(w.Data), d)
		}
		if len(w.Data) > ProgressChunk {
			t.Errorf("write %d: %d bytes under one default deadline; want at most %d", i, len(w.Data), ProgressChunk)
		}
	}
	for i := 0; i < 3; i++ {
		fresh(i, writes[i])
	}
	if w := writes[3]; !w.Deadline.Equal(own) || len(w.Data) != len(big) {
		t.Errorf("write 3: %d bytes under %v; want the whole %d under the server's own %v", len(w.Data), w.Deadline, len(big), own)
	}
	if w := writes[4]; string(w.Data) != "small" {
		t.Errorf("write 4 is %.20q; want the small one", w.Data)
	} else {
		fresh(4, w)
	}
}
