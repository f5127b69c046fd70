package wire

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// reference is the encoding the daemon sent before AppendJSON: encoding/json
// with HTML left unescaped, without the newline.
func reference(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// randomStatus builds a status from rng, with strings taken from pieces of s
// (which the fuzzer varies) and from a set of awkward ones.
func randomStatus(rng *rand.Rand, s string) *Status {
	awkward := []string{"", "echo hi", "<a&b>", "\"q\" \\ /", "\x00\x1f\x7f", "\b\f\n\r\t", "héllo ✓ 🙂",
		"\u2028\u2029", "\xff\xfe", "a\xe2\x82", "\xed\xa0\x80", "\U0010ffff"}
	str := func() string {
		if len(s) > 0 && rng.IntN(2) == 0 {
			i := rng.IntN(len(s) + 1)
			j := i + rng.IntN(len(s)-i+1)
			return s[i:j]
		}
		return awkward[rng.IntN(len(awkward))]
	}
	i64 := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return rng.Int64()
		case 2:
			return -rng.Int64()
		}
		return rng.Int64N(1 << 20)
	}
	tm := func() time.Time {
		zones := []*time.Location{time.UTC, time.Local, time.FixedZone("x", 5*3600+30*60), time.FixedZone("y", -11*3600)}
		t := time.Unix(rng.Int64N(253402300799), rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))])
		if rng.IntN(4) == 0 {
			t = t.Truncate(time.Second)
		}
		return t
	}
	tp := func() *time.Time {
		if rng.IntN(3) == 0 {
			return nil
		}
		t := tm()
		return &t
	}
	floats := []float64{0, 1, 30, 0.5, 1e-7, 1.5e-6, 1e21, 123456789.125, 1e20, -2.5, math.SmallestNonzeroFloat64, math.MaxFloat64, -0.0}
	st := &Status{
		CommandID:       str(),
		Cwd:             str(),
		State:           State(str()),
		PID:             int(int32(i64())),
		Stdin:           rng.IntN(2) == 0,
		StdinClosed:     rng.IntN(2) == 0,
		CreatedAt:       tm(),
		StartedAt:       tp(),
		FinishedAt:      tp(),
		ExpiresAt:       tp(),
		StdoutBytes:     i64(),
		StderrBytes:     i64(),
		RetainedFrom:    i64(),
		NextCursor:      i64(),
		OutputTruncated: rng.IntN(2) == 0,
		PTYBytes:        i64(),
		OOMKilled:       rng.IntN(2) == 0,
	}
	if rng.IntN(2) == 0 {
		st.TimeoutSeconds = floats[rng.IntN(len(floats))]
	} else {
		st.TimeoutSeconds = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(40)-20))
	}
	if n := rng.IntN(5); n > 0 || rng.IntN(2) == 0 {
		st.Argv = make([]string, n)
		for i := range st.Argv {
			st.Argv[i] = str()
		}
	}
	if rng.IntN(2) == 0 {
		c := int(int32(i64()))
		st.ExitCode = &c
	}
	if rng.IntN(2) == 0 {
		sig := str()
		st.Signal = &sig
	}
	if rng.IntN(2) == 0 {
		st.Resources = &Resources{UserCPUMillis: i64(), SystemCPUMillis: i64(), MaxRSSKB: i64()}
	}
	if rng.IntN(2) == 0 {
		st.PTY = &PTYStatus{Cols: int(int16(i64())), Rows: int(int16(i64())), Term: str()}
	}
	if rng.IntN(3) > 0 {
		w := rng.IntN(2) == 0
		st.WaitingForInput = &w
	}
	return st
}

// FuzzStatusJSON: AppendJSON and AppendStatusEvent produce exactly
// encoding/json's bytes for random statuses.
func FuzzStatusJSON(f *testing.F) {
	for i, s := range []string{"", "echo hi", "sh -c 'x <y> & z'", "\xff\u2028\"\\\n", "héllo wörld ✓"} {
		f.Add(uint64(i), s)
	}
	f.Fuzz(func(t *testing.T, seed uint64, s string) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		for range 20 {
			st := randomStatus(rng, s)
			want := reference(t, st)
			prefix := []byte("x")
			got := st.AppendJSON(prefix)
			if !bytes.Equal(got[1:], want) || got[0] != 'x' {
				t.Fatalf("AppendJSON\n got %s\nwant %s", got[1:], want)
			}
			for _, typ := range []string{EventStarted, EventExit} {
				next := rng.Int64N(1 << 40)
				want := reference(t, Event{Type: typ, Status: st, NextCursor: next})
				if got := AppendStatusEvent(nil, typ, st, next); !bytes.Equal(got, want) {
					t.Fatalf("AppendStatusEvent\n got %s\nwant %s", got, want)
				}
			}
		}
	})
}

// TestStatusJSONRefusesWhatJSONRefuses: values encoding/json cannot encode
// are not given a made-up encoding.
func TestStatusJSONRefusesWhatJSONRefuses(t *testing.T) {
	for name, st := range map[string]*Status{
		"NaN timeout": {TimeoutSeconds: math.NaN()},
		"year 10000":  {CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(strings.ToLower(toString(r)), "json") {
					t.Errorf("%s: AppendJSON did not refuse it (recovered %v)", name, r)
				}
			}()
			st.AppendJSON(nil)
		}()
	}
}

func toString(v any) string {
	if err, ok := v.(error); ok {
		return err.Error()
	}
	s, _ := v.(string)
	return s
}

func BenchmarkStatusJSON(b *testing.B) {
	code, sig, w := 0, "SIGKILL", false
	now := time.Now().UTC()
	st := &Status{CommandID: "0b8f7c7e-8c1e-4c8e-9a57-6f4a2d3e1b90", Argv: []string{"echo", "hi"}, Cwd: "/home/user",
		State: StateExited, PID: 1234, ExitCode: &code, Signal: &sig, TimeoutSeconds: 30, CreatedAt: now, StartedAt: &now,
		FinishedAt: &now, ExpiresAt: &now, StdoutBytes: 3, Resources: &Resources{1, 2, 3000}, WaitingForInput: &w}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = AppendStatusEvent(buf[:0], EventExit, st, 3)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.Encode(Event{Type: EventExit, Status: st, NextCursor: 3})
		}
	})
}
