package legacy

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	"github.com/sandbox-runtime/sandbox-runtime/pycompat"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// answerModel is the answer built the naive way, as a whole: the reference
// the streaming encoder must match byte for byte.
func answerModel(stdout, stderr []byte, res runtime.ExecResult) []byte {
	text := func(b []byte) string {
		s := pycompat.DecodeUTF8(b)
		return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
	}
	out := legacyExecResponse{Stdout: text(stdout), Stderr: text(stderr), ExitCode: res.ExitCode}
	var notes []string
	if res.StdoutDropped > 0 {
		notes = append(notes, fmt.Sprintf("[stdout truncated: %d bytes dropped]", res.StdoutDropped))
	}
	if res.StderrDropped > 0 {
		notes = append(notes, fmt.Sprintf("[stderr truncated: %d bytes dropped]", res.StderrDropped))
	}
	if res.Terminated {
		notes = append(notes, "[terminated: the sandbox runtime is shutting down]")
	}
	for _, n := range notes {
		if out.Stderr != "" && !strings.HasSuffix(out.Stderr, "\n") {
			out.Stderr += "\n"
		}
		out.Stderr += n + "\n"
	}
	return httpx.Marshal(out)
}

// answerStreamed encodes stdout and stderr cut into the given chunks.
func answerStreamed(t testing.TB, outChunks, errChunks [][]byte, res runtime.ExecResult) []byte {
	res.Stdout = runtime.CaptureOf(outChunks...)
	res.Stderr = runtime.CaptureOf(errChunks...)
	var buf bytes.Buffer
	if err := writeLegacyExecAnswer(&buf, []string{"x"}, 1, &res, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// cut splits b at random points (chunks of 0 to 5 bytes, and larger ones).
func cut(r *rand.Rand, b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := r.IntN(6)
		if r.IntN(4) == 0 {
			n = r.IntN(len(b) + 1)
		}
		n = min(n, len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// answerAlphabet is the bytes the boundary cases are made of: ASCII,
// escapes, CR/LF, every kind of lead and continuation byte, and U+2028.
var answerAlphabet = [][]byte{
	{'a'}, {'"'}, {'\\'}, {'\r'}, {'\n'}, {'\t'}, {0}, {1}, {0x1f}, {0x7f}, {'<'}, {'\b'}, {'\f'},
	{0x80}, {0xbf}, {0xc0}, {0xc2}, {0xdf}, {0xe0}, {0xe2}, {0xed}, {0xef}, {0xf0}, {0xf4}, {0xf5}, {0xff},
	[]byte("é"), []byte("€"), []byte("😀"), []byte("\u2028"), []byte("\u2029"), []byte("\ufffd"),
	[]byte("😀")[:3], []byte("€")[:2], {0xa0, 0x80}, {0x90, 0x80, 0x80},
}

func TestLegacyAnswerMatchesModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		var stdout, stderr []byte
		for range r.IntN(12) {
			stdout = append(stdout, answerAlphabet[r.IntN(len(answerAlphabet))]...)
		}
		for range r.IntN(12) {
			stderr = append(stderr, answerAlphabet[r.IntN(len(answerAlphabet))]...)
		}
		res := runtime.ExecResult{ExitCode: r.IntN(3) - 1, Terminated: r.IntN(4) == 0}
		if r.IntN(3) == 0 {
			res.StdoutDropped = int64(r.IntN(100))
		}
		if r.IntN(3) == 0 {
			res.StderrDropped = int64(r.IntN(100))
		}
		want := answerModel(stdout, stderr, res)
		got := answerStreamed(t, cut(r, stdout), cut(r, stderr), res)
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: stdout %q stderr %q %+v:\ngot  %s\nwant %s", i, stdout, stderr, res, got, want)
		}
	}
}

func FuzzLegacyAnswer(f *testing.F) {
	f.Add([]byte("hello\r\nworld\r"), []byte("\xe2\x82"), uint8(1))
	f.Add([]byte("\xf0\x9f\x98\x80\xed\xa0\x80"), []byte("\x01\"\\"), uint8(3))
	f.Fuzz(func(t *testing.T, stdout, stderr []byte, step uint8) {
		n := int(step%7) + 1
		chunks := func(b []byte) [][]byte {
			var out [][]byte
			for len(b) > 0 {
				k := min(n, len(b))
				out = append(out, b[:k])
				b = b[k:]
			}
			return out
		}
		res := runtime.ExecResult{StdoutDropped: int64(step % 2), Terminated: step%3 == 0}
		want := answerModel(stdout, stderr, res)
		if got := answerStreamed(t, chunks(stdout), chunks(stderr), res); !bytes.Equal(got, want) {
			t.Fatalf("stdout %q stderr %q step %d:\ngot  %s\nwant %s", stdout, stderr, n, got, want)
		}
	})
}

// benchOutput is 8 MiB of each kind the answer must encode: control bytes
// (six bytes of JSON each), text with CRLF, and invalid UTF-8.
func benchOutput() (ctl, text []byte) {
	ctl = bytes.Repeat([]byte{1}, 8<<20)
	text = bytes.Repeat([]byte("héllo wörld\r\n\xff"), (8<<20)/16)
	return ctl, text
}

func chunked(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := min(64<<10, len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// BenchmarkLegacyAnswer compares the streamed answer with the whole-answer
// encoding it replaced (answerModel: decode to strings, replace, marshal).
func BenchmarkLegacyAnswer(b *testing.B) {
	ctl, text := benchOutput()
	res := runtime.ExecResult{StdoutDropped: 5}
	b.Run("streamed", func(b *testing.B) {
		b.SetBytes(int64(len(ctl) + len(text)))
		b.ReportAllocs()
		for b.Loop() {
			r := res
			r.Stdout, r.Stderr = runtime.CaptureOf(chunked(ctl)...), runtime.CaptureOf(chunked(text)...)
			if err := writeLegacyExecAnswer(io.Discard, []string{"x"}, 1, &r, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("whole", func(b *testing.B) {
		b.SetBytes(int64(len(ctl) + len(text)))
		b.ReportAllocs()
		for b.Loop() {
			io.Discard.Write(answerModel(ctl, text, res))
		}
	})
}
