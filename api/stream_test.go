package api

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandbox-runtime/sandbox-runtime/ringbuf"
)

func TestNeedsEscape8(t *testing.T) {
	for b := 0; b < 256; b++ {
		for pos := 0; pos < 8; pos++ {
			var w [8]byte
			for i := range w {
				w[i] = 'a'
			}
			w[pos] = byte(b)
			want := b < 0x20 || b == '"' || b == '\\' || b >= 0x80
			if got := needsEscape8(binary.LittleEndian.Uint64(w[:])); got != want {
				t.Fatalf("byte %#x at %d: got %v; want %v", b, pos, got, want)
			}
		}
	}
}

// FuzzAppendJSONText checks the hand-written escaper against encoding/json:
// the output must decode to exactly the input.
func FuzzAppendJSONText(f *testing.F) {
	for _, s := range []string{"", "plain ascii text\n", "quote\" back\\slash", "\x00\x01\x1f\x7f", "héllo wörld €😀", "line\u2028sep\u2029", strings.Repeat("abcdefgh", 9) + "\t"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		text, ok := appendJSONText([]byte("prefix"), data)
		if ok != utf8.Valid(data) {
			t.Fatalf("appendJSONText(%q) ok = %v; want %v", data, ok, !ok)
		}
		if !ok {
			if string(text) != "prefix" {
				t.Fatalf("invalid input changed dst: %q", text)
			}
			return
		}
		enc := append([]byte{'"'}, text[len("prefix"):]...)
		enc = append(enc, '"')
		var got string
		if err := json.Unmarshal(enc, &got); err != nil {
			t.Fatalf("escaped %q is not a JSON string: %v (%q)", data, err, enc)
		}
		if got != string(data) {
			t.Fatalf("round trip: got %q; want %q", got, data)
		}
	})
}

func TestAppendOutputEvent(t *testing.T) {
	for _, tc := range []struct {
		data, want string
	}{
		{"hi\n", `{"type":"output","stream":"stdout","cursor":5,"data":"hi\n","next_cursor":8}`},
		{"\xff\xfe", `{"type":"output","stream":"stdout","cursor":5,"data":"//4=","encoding":"base64","next_cursor":7}`},
	} {
		if got := string(appendOutputEvent(nil, ringbuf.Stdout, 5, []byte(tc.data))); got != tc.want {
			t.Errorf("got %s; want %s", got, tc.want)
		}
	}
}

func BenchmarkAppendJSONText(b *testing.B) {
	line := []byte(strings.Repeat("the quick brown fox jumps over the lazy dog 0123456789\n", 1200))
	b.SetBytes(int64(len(line)))
	var dst []byte
	for b.Loop() {
		dst, _ = appendJSONText(dst[:0], line)
	}
}

// BenchmarkOutputEvents: what a follower's encoder does per ring read: cut
// 64 KiB of program text (lines with a tab and a quote) into events and
// encode them (nextOutputEvent: textFit, then appendOutputEvent).
func BenchmarkOutputEvents(b *testing.B) {
	data := []byte(strings.Repeat("the quick brown fox\tjumps over the \"lazy\" dog 0123456789\n", 64<<10/56))
	b.SetBytes(int64(len(data)))
	var dst []byte
	for b.Loop() {
		for off := 0; off < len(data); {
			var n int
			dst, n = nextOutputEvent(dst[:0], ringbuf.Stdout, int64(off), data[off:])
			off += n
		}
	}
}

// TestTextFitBoundsEncodedEvents checks that an event's JSON text stays
// within maxEventText whatever the bytes, and that the cut never splits a
// character or drops a byte.
func TestTextFitBoundsEncodedEvents(t *testing.T) {
	inputs := map[string][]byte{
		"nul":     make([]byte, maxEventData),
		"ascii":   bytes.Repeat([]byte("a"), maxEventData),
		"newline": bytes.Repeat([]byte("y\n"), maxEventData/2),
		"quotes":  bytes.Repeat([]byte(`"\`), maxEventData/2),
		"euro":    bytes.Repeat([]byte("€\x01"), maxEventData/4),
		"control": bytes.Repeat([]byte{0x1b, '[', 'K', 0x07}, maxEventData/4),
	}
	for name, data := range inputs {
		var got []byte
		events := 0
		for off := 0; off < len(data); {
			n := textFit(data[off:], maxEventText)
			if n <= 0 {
				t.Fatalf("%s: textFit returned %d at %d", name, n, off)
			}
			chunk := data[off : off+n]
			if !utf8.Valid(chunk) {
				t.Fatalf("%s: chunk at %d of %d bytes splits a character", name, off, n)
			}
			text, ok := appendJSONText(nil, chunk)
			if !ok || len(text) > maxEventText {
				t.Fatalf("%s: chunk at %d of %d bytes encodes to %d bytes (ok %v); bound %d", name, off, n, len(text), ok, maxEventText)
			}
			got = append(got, chunk...)
			off += n
			events++
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: the chunks do not add up to the input", name)
		}
		t.Logf("%s: %d bytes in %d events", name, len(data), events)
	}
}
