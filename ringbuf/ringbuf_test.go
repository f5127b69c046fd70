package ringbuf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// fmtRecords renders records compactly: "o@0:abc e@3:de" (o = stdout, e = stderr).
func fmtRecords(recs []Record) string {
	var b strings.Builder
	for i, rec := range recs {
		if i > 0 {
			b.WriteByte(' ')
		}
		switch rec.Stream {
		case Stdout:
			b.WriteByte('o')
		case Stderr:
			b.WriteByte('e')
		default:
			b.WriteString(rec.Stream.String())
		}
		fmt.Fprintf(&b, "@%d:%s", rec.Cursor, rec.Data)
	}
	return b.String()
}

type write struct {
	s    Stream
	data string
}

func o(s string) write { return write{Stdout, s} }
func e(s string) write { return write{Stderr, s} }

func TestStreamString(t *testing.T) {
	for s, want := range map[Stream]string{Stdout: "stdout", Stderr: "stderr", 0: "Stream(0)", 7: "Stream(7)"} {
		if got := s.String(); got != want {
			t.Errorf("Stream(%d).String() = %q; want %q", s, got, want)
		}
	}
}

func TestNewPanics(t *testing.T) {
	for _, lim := range [][2]int{{0, 1}, {1, 0}, {-1, 5}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%d, %d) did not panic", lim[0], lim[1])
				}
			}()
			New(lim[0], lim[1])
		}()
	}
}

func TestBoundaries(t *testing.T) {
	tests := []struct {
		name       string
		maxBytes   int
		maxRecords int
		writes     []write
		cursor     int64
		limit      int
		want       string // fmtRecords of the result
		wantGap    bool   // GapFrom is then Stats().Start
		wantNext   int64
		wantErr    error
		wantStart  int64
		wantRecs   int
	}{
		{name: "empty ring", maxBytes: 8, maxRecords: 4,
			want: "", wantNext: 0},
		{name: "empty writes are no-ops", maxBytes: 8, maxRecords: 4, writes: []write{o(""), e(""), o("ab"), e(""), o("c")},
			want: "o@0:abc", wantNext: 3, wantRecs: 1},
		{name: "exact capacity", maxBytes: 8, maxRecords: 4, writes: []write{o("abcd"), e("efgh")},
			want: "o@0:abcd e@4:efgh", wantNext: 8, wantRecs: 2},
		{name: "exact capacity in one write", maxBytes: 8, maxRecords: 4, writes: []write{o("abcdefgh")},
			want: "o@0:abcdefgh", wantNext: 8, wantRecs: 1},
		{name: "one byte over trims the oldest record", maxBytes: 8, maxRecords: 4, writes: []write{o("abcd"), e("efgh"), o("i")},
			cursor: 1, want: "o@1:bcd e@4:efgh o@8:i", wantNext: 9, wantStart: 1, wantRecs: 3},
		{name: "one byte over drops a one-byte record", maxBytes: 8, maxRecords: 4, writes: []write{o("a"), e("bcdefgh"), o("i")},
			cursor: 1, want: "e@1:bcdefgh o@8:i", wantNext: 9, wantStart: 1, wantRecs: 2},
		{name: "same stream extends the record", maxBytes: 8, maxRecords: 1, writes: []write{o("ab"), o("cd"), o("ef")},
			want: "o@0:abcdef", wantNext: 6, wantRecs: 1},
		{name: "record limit hit by alternating streams", maxBytes: 100, maxRecords: 3, writes: []write{o("a"), e("bb"), o("ccc"), e("dddd")},
			cursor: 1, want: "e@1:bb o@3:ccc e@6:dddd", wantNext: 10, wantStart: 1, wantRecs: 3},
		{name: "record limit one", maxBytes: 100, maxRecords: 1, writes: []write{o("abc"), e("de"), o("f")},
			cursor: 5, want: "o@5:f", wantNext: 6, wantStart: 5, wantRecs: 1},
		{name: "record and byte limits together", maxBytes: 5, maxRecords: 2, writes: []write{o("abc"), e("de"), o("fgh")},
			cursor: 3, want: "e@3:de o@5:fgh", wantNext: 8, wantStart: 3, wantRecs: 2},
		{name: "cursor just before the retained start", maxBytes: 4, maxRecords: 4, writes: []write{o("abcdef")},
			cursor: 1, want: "o@2:cdef", wantGap: true, wantNext: 6, wantStart: 2, wantRecs: 1},
		{name: "cursor zero after eviction", maxBytes: 4, maxRecords: 4, writes: []write{o("abc"), e("def")},
			cursor: 0, want: "o@2:c e@3:def", wantGap: true, wantNext: 6, wantStart: 2, wantRecs: 2},
		{name: "cursor at the retained start", maxBytes: 4, maxRecords: 4, writes: []write{o("abc"), e("def")},
			cursor: 2, want: "o@2:c e@3:def", wantNext: 6, wantStart: 2, wantRecs: 2},
		{name: "cursor just after the retained start", maxBytes: 4, maxRecords: 4, writes: []write{o("abc"), e("def")},
			cursor: 3, want: "e@3:def", wantNext: 6, wantStart: 2, wantRecs: 2},
		{name: "cursor inside a record", maxBytes: 4, maxRecords: 4, writes: []write{o("abc"), e("def")},
			cursor: 4, want: "e@4:ef", wantNext: 6, wantStart: 2, wantRecs: 2},
		{name: "cursor at end", maxBytes: 4, maxRecords: 4, writes: []write{o("abc"), e("def")},
			cursor: 6, want: "", wantNext: 6, wantStart: 2, wantRecs: 2},
		{name: "cursor ahead", maxBytes: 4, maxRecords: 4, writes: []write{o("abc"), e("def")},
			cursor: 7, wantErr: ErrCursorAhead, wantNext: 0, wantStart: 2, wantRecs: 2},
		{name: "cursor ahead of an empty ring", maxBytes: 4, maxRecords: 4,
			cursor: 1, wantErr: ErrCursorAhead},
		{name: "negative cursor", maxBytes: 4, maxRecords: 4, writes: []write{o("abc")},
			cursor: -1, wantErr: ErrNegativeCursor, wantRecs: 1},
		{name: "huge single append keeps its tail", maxBytes: 4, maxRecords: 4, writes: []write{e("xy"), o("abcdefghij")},
			cursor: 0, want: "o@8:ghij", wantGap: true, wantNext: 12, wantStart: 8, wantRecs: 1},
		{name: "huge append to the same stream", maxBytes: 4, maxRecords: 4, writes: []write{o("xy"), o("abcdefghij"), e("k")},
			cursor: 8, want: "o@9:hij e@12:k", wantGap: true, wantNext: 13, wantStart: 9, wantRecs: 2},
		{name: "huge append then more", maxBytes: 4, maxRecords: 4, writes: []write{o("abcdefghij"), e("kl")},
			cursor: 6, want: "o@8:ij e@10:kl", wantGap: true, wantNext: 12, wantStart: 8, wantRecs: 2},
		{name: "limit cuts a record", maxBytes: 16, maxRecords: 4, writes: []write{o("abc"), e("defg"), o("h")},
			cursor: 1, limit: 4, want: "o@1:bc e@3:de", wantNext: 5, wantRecs: 3},
		{name: "limit at a record boundary", maxBytes: 16, maxRecords: 4, writes: []write{o("abc"), e("defg"), o("h")},
			cursor: 0, limit: 3, want: "o@0:abc", wantNext: 3, wantRecs: 3},
		{name: "limit with a gap", maxBytes: 4, maxRecords: 4, writes: []write{o("abcdef")},
			cursor: 0, limit: 1, want: "o@2:c", wantGap: true, wantNext: 3, wantStart: 2, wantRecs: 1},
		{name: "wrap around the buffer", maxBytes: 5, maxRecords: 8, writes: []write{o("abc"), e("de"), o("fg"), e("hij")},
			cursor: 5, want: "o@5:fg e@7:hij", wantNext: 10, wantStart: 5, wantRecs: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Tiny initial sizes so that growth and wrap-around are exercised.
			for _, init := range [][2]int{{1, 1}, {3, 2}, {1 << 20, 1 << 20}} {
				r := newRing(tc.maxBytes, tc.maxRecords, init[0], init[1])
				for _, w := range tc.writes {
					r.Append(w.s, []byte(w.data))
				}
				res, err := r.Read(tc.cursor, tc.limit, nil, nil)
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("init %v: Read(%d, %d) error = %v; want %v", init, tc.cursor, tc.limit, err, tc.wantErr)
				}
				st := r.Stats()
				if got := fmtRecords(res.Records); got != tc.want {
					t.Errorf("init %v: Read(%d, %d) = %q; want %q", init, tc.cursor, tc.limit, got, tc.want)
				}
				wantGapFrom := int64(0)
				if tc.wantGap {
					wantGapFrom = st.Start
				}
				if res.Gap != tc.wantGap || res.GapFrom != wantGapFrom {
					t.Errorf("init %v: Gap, GapFrom = %v, %d; want %v, %d", init, res.Gap, res.GapFrom, tc.wantGap, wantGapFrom)
				}
				if res.Next != tc.wantNext {
					t.Errorf("init %v: Next = %d; want %d", init, res.Next, tc.wantNext)
				}
				if res.Done {
					t.Errorf("init %v: Done before Close", init)
				}
				var end int64
				for _, w := range tc.writes {
					end += int64(len(w.data))
				}
				if st.Start != tc.wantStart || st.End != end || st.Records != tc.wantRecs || st.Truncated != (tc.wantStart > 0) {
					t.Errorf("init %v: Stats = %+v; want Start %d, End %d, Records %d, Truncated %v", init, st, tc.wantStart, end, tc.wantRecs, tc.wantStart > 0)
				}
				checkInvariants(t, r)
			}
		})
	}
}

// checkInvariants checks the ring's internal invariants.
func checkInvariants(t testing.TB, r *Ring) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.start < 0 || r.start > r.end || r.end-r.start > int64(r.maxBytes) {
		t.Fatalf("window [%d, %d) with maxBytes %d", r.start, r.end, r.maxBytes)
	}
	if len(r.buf) > r.maxBytes || int64(len(r.buf)) < r.end-r.start || len(r.recs) > r.maxRecords || r.nrec > len(r.recs) {
		t.Fatalf("len(buf) %d, len(recs) %d, nrec %d, window %d, limits %d/%d", len(r.buf), len(r.recs), r.nrec, r.end-r.start, r.maxBytes, r.maxRecords)
	}
	if (r.nrec == 0) != (r.start == r.end) {
		t.Fatalf("nrec %d with window [%d, %d)", r.nrec, r.start, r.end)
	}
	if r.nrec > 0 && r.recAt(0).cursor != r.start {
		t.Fatalf("first record at %d; start %d", r.recAt(0).cursor, r.start)
	}
	for i := range r.nrec {
		if r.recEnd(i) <= r.recAt(i).cursor {
			t.Fatalf("record %d empty or reversed: [%d, %d)", i, r.recAt(i).cursor, r.recEnd(i))
		}
		if i > 0 && r.recAt(i).stream == r.recAt(i-1).stream {
			t.Fatalf("records %d and %d have the same stream", i-1, i)
		}
	}
}

func TestReadResumesWithNext(t *testing.T) {
	r := newRing(64, 16, 2, 1)
	want := []write{o("hello "), e("warn"), o("world"), e("!"), o("x")}
	for _, w := range want {
		r.Append(w.s, []byte(w.data))
	}
	r.Close()
	for limit := 1; limit <= 20; limit++ {
		var (
			got     []string
			buf     []byte
			recs    []Record
			cursor  int64
			lastStr Stream
		)
		for i := 0; ; i++ {
			if i > 100 {
				t.Fatalf("limit %d: no progress", limit)
			}
			res, err := r.Read(cursor, limit, buf[:0], recs[:0])
			if err != nil {
				t.Fatalf("limit %d: Read(%d): %v", limit, cursor, err)
			}
			n := 0
			for _, rec := range res.Records {
				if rec.Cursor != cursor+int64(n) {
					t.Fatalf("limit %d: record at %d; want %d", limit, rec.Cursor, cursor+int64(n))
				}
				n += len(rec.Data)
				// Merge the pieces of a record that a limit cut.
				if len(got) > 0 && rec.Stream == lastStr {
					got[len(got)-1] += string(rec.Data)
				} else {
					got = append(got, rec.Stream.String()+":"+string(rec.Data))
				}
				lastStr = rec.Stream
			}
			if n > limit {
				t.Fatalf("limit %d: read %d bytes", limit, n)
			}
			if res.Next != cursor+int64(n) {
				t.Fatalf("limit %d: Next %d; want %d", limit, res.Next, cursor+int64(n))
			}
			cursor, buf, recs = res.Next, res.Buf, res.Records
			if res.Done {
				break
			}
		}
		if g := strings.Join(got, " "); g != "stdout:hello  stderr:warn stdout:world stderr:! stdout:x" {
			t.Errorf("limit %d: got %q", limit, g)
		}
	}
}

func TestReadAppendsToDst(t *testing.T) {
	r := New(16, 4)
	r.Append(Stdout, []byte("abc"))
	r.Append(Stderr, []byte("de"))
	dst := make([]byte, 3, 64)
	copy(dst, "xyz")
	prev := []Record{{Stream: Stdout, Cursor: 99, Data: dst[:1]}}
	res, err := r.Read(1, 0, dst, prev)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Buf) != "xyzbcde" {
		t.Errorf("Buf = %q; want %q", res.Buf, "xyzbcde")
	}
	if &res.Buf[0] != &dst[0] {
		t.Errorf("Read reallocated a buffer with room to spare")
	}
	if got := fmtRecords(res.Records); got != "o@99:x o@1:bc e@3:de" {
		t.Errorf("Records = %q", got)
	}
	// The data must be copies: changing the ring must not change them.
	r.Append(Stdout, []byte("0123456789abcdef"))
	if got := fmtRecords(res.Records[1:]); got != "o@1:bc e@3:de" {
		t.Errorf("Records after more appends = %q", got)
	}
	r.mu.Lock()
	lo, hi := uintptr(unsafe.Pointer(unsafe.SliceData(r.buf))), uintptr(unsafe.Pointer(unsafe.SliceData(r.buf)))+uintptr(len(r.buf))
	r.mu.Unlock()
	for _, rec := range res.Records {
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(rec.Data))); p >= lo && p < hi {
			t.Errorf("record %d aliases the ring", rec.Cursor)
		}
	}
}

func TestCloseAndDone(t *testing.T) {
	r := New(8, 4)
	r.Append(Stdout, []byte("ab"))
	r.Close()
	r.Close() // idempotent
	r.Append(Stdout, []byte("cd"))
	st := r.Stats()
	if !st.Closed || st.End != 2 || st.StdoutTotal != 2 {
		t.Fatalf("Stats after Close = %+v", st)
	}
	res, err := r.Read(0, 1, nil, nil)
	if err != nil || res.Done || res.Next != 1 {
		t.Fatalf("Read(0, 1) = Next %d Done %v, %v; want 1, false", res.Next, res.Done, err)
	}
	res, err = r.Read(1, 0, nil, nil)
	if err != nil || !res.Done || res.Next != 2 {
		t.Fatalf("Read(1, 0) = Next %d Done %v, %v; want 2, true", res.Next, res.Done, err)
	}
	res, err = r.Read(2, 0, nil, nil)
	if err != nil || !res.Done || len(res.Records) != 0 {
		t.Fatalf("Read(2, 0) = %q Done %v, %v; want nothing, true", fmtRecords(res.Records), res.Done, err)
	}
	select {
	case <-r.Notify():
	default:
		t.Error("Notify after Close returned an open channel")
	}
}

func TestStatsTotals(t *testing.T) {
	r := New(4, 2)
	r.Append(Stdout, []byte("abcdef"))
	r.Append(Stderr, []byte("gh"))
	r.Append(Stdout, []byte("i"))
	r.Append(Stream(9), []byte("j"))
	st := r.Stats()
	want := Stats{Start: 8, End: 10, StdoutTotal: 7, StderrTotal: 2, Records: 2, Truncated: true}
	if st != want {
		t.Errorf("Stats = %+v; want %+v", st, want)
	}
	if r.Start() != 8 || r.End() != 10 || !r.Truncated() {
		t.Errorf("Start, End, Truncated = %d, %d, %v", r.Start(), r.End(), r.Truncated())
	}
}

func TestLazyGrowth(t *testing.T) {
	r := New(1<<20, 1024)
	if r.buf != nil || r.recs != nil {
		t.Fatal("New allocated buffers")
	}
	r.Append(Stdout, []byte("x"))
	if len(r.buf) != initialBytes || len(r.recs) != initialRecords {
		t.Fatalf("after one byte: len(buf) %d, len(recs) %d; want %d, %d", len(r.buf), len(r.recs), initialBytes, initialRecords)
	}
	chunk := make([]byte, 4096)
	r.Append(Stderr, chunk)
	if len(r.buf) != 1<<20 {
		t.Fatalf("after 4097 bytes: len(buf) %d; want the whole ring (%d)", len(r.buf), 1<<20)
	}
	for range 300 {
		r.Append(Stdout, chunk)
		r.Append(Stderr, chunk)
	}
	for range 600 {
		r.Append(Stdout, chunk[:10])
		r.Append(Stderr, chunk[:10])
	}
	if len(r.buf) != 1<<20 || len(r.recs) != 1024 {
		t.Fatalf("full: len(buf) %d, len(recs) %d", len(r.buf), len(r.recs))
	}
	checkInvariants(t, r)
	if n := testing.AllocsPerRun(100, func() { r.Append(Stdout, chunk); r.Append(Stderr, chunk[:100]) }); n != 0 {
		t.Errorf("Append on a full ring allocates %v times per run", n)
	}
	var res ReadResult
	if n := testing.AllocsPerRun(100, func() {
		var err error
		res, err = r.Read(r.Start()+10, 32<<10, res.Buf[:0], res.Records[:0])
		if err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Read with reused buffers allocates %v times per run", n)
	}
}

// waitForWaiter returns once someone holds the ring's notify channel: a goroutine
// blocked in Wait, in these tests, where nothing else calls Notify.
func waitForWaiter(r *Ring) {
	for {
		r.mu.Lock()
		ok := r.notify != nil
		r.mu.Unlock()
		if ok {
			return
		}
		runtime.Gosched()
	}
}

func TestWaitWokenByAppend(t *testing.T) {
	r := New(8, 4)
	r.Append(Stdout, []byte("ab"))
	if err := r.Wait(context.Background(), 1); err != nil {
		t.Fatalf("Wait below End = %v", err)
	}
	done := make(chan error)
	for range 3 {
		go func() { done <- r.Wait(context.Background(), 2) }()
	}
	waitForWaiter(r)
	r.Append(Stdout, nil) // not data: must not wake anyone for good
	r.Append(Stderr, []byte("c"))
	for range 3 {
		if err := <-done; err != nil {
			t.Fatalf("Wait = %v; want nil", err)
		}
	}
}

func TestWaitWokenByClose(t *testing.T) {
	r := New(8, 4)
	done := make(chan error)
	go func() { done <- r.Wait(context.Background(), 0) }()
	waitForWaiter(r)
	r.Close()
	if err := <-done; err != nil {
		t.Fatalf("Wait = %v; want nil", err)
	}
	if err := r.Wait(context.Background(), 5); err != nil {
		t.Fatalf("Wait on a closed ring = %v; want nil", err)
	}
}

func TestWaitContext(t *testing.T) {
	r := New(8, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Wait(ctx, 0) }()
	waitForWaiter(r)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v; want context.Canceled", err)
	}
	// A satisfied Wait returns nil even with ctx done.
	r.Append(Stdout, []byte("a"))
	if err := r.Wait(ctx, 0); err != nil {
		t.Fatalf("satisfied Wait with cancelled ctx = %v; want nil", err)
	}
	if err := r.Wait(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with cancelled ctx = %v; want context.Canceled", err)
	}
}

func TestNotify(t *testing.T) {
	r := New(8, 4)
	a, b := r.Notify(), r.Notify()
	if a != b {
		t.Fatal("Notify returned different channels between appends")
	}
	r.Append(Stdout, nil)
	select {
	case <-a:
		t.Fatal("empty Append closed the notify channel")
	default:
	}
	r.Append(Stdout, []byte("x"))
	select {
	case <-a:
	default:
		t.Fatal("Append did not close the notify channel")
	}
	c := r.Notify()
	select {
	case <-c:
		t.Fatal("new notify channel is already closed")
	default:
	}
	r.Close()
	<-c
}

// pattern returns the test output: n bytes split into chunks of random length and
// stream, seeded by seed.
func pattern(seed uint64, n int) (data []byte, streams []Stream, chunks []int) {
	rng := rand.New(rand.NewPCG(seed, 1))
	data = make([]byte, n)
	streams = make([]Stream, n)
	for i := 0; i < n; {
		k := min(n-i, 1+rng.IntN(3000))
		s := Stream(1 + rng.IntN(2))
		for j := i; j < i+k; j++ {
			data[j] = byte(rng.Uint32())
			streams[j] = s
		}
		chunks = append(chunks, k)
		i += k
	}
	return data, streams, chunks
}

// TestConcurrentReaders runs one writer and many readers; run it with -race. With
// a ring that holds everything, every reader rebuilds the exact output; with a
// small one, every byte a reader gets is right and every gap is honest.
func TestConcurrentReaders(t *testing.T) {
	const total = 400 << 10
	data, streams, chunks := pattern(42, total)
	for _, tc := range []struct {
		name                 string
		maxBytes, maxRecords int
		exact                bool
	}{
		{"holds everything", total, len(chunks), true},
		{"small ring", 8 << 10, 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New(tc.maxBytes, tc.maxRecords)
			const readers = 16
			var wg sync.WaitGroup
			errs := make(chan error, readers)
			for i := range readers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- readAll(r, i, data, streams, tc.exact)
				}()
			}
			var at int
			for _, k := range chunks {
				r.Append(streams[at], data[at:at+k])
				at += k
			}
			r.Close()
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// readAll follows r from cursor 0 to the end and checks what it gets against data
// and streams.
func readAll(r *Ring, id int, data []byte, streams []Stream, exact bool) error {
	var (
		res    ReadResult
		cursor int64
		got    int
		limit  = 1000 + 997*id // readers with various limits; reader 0 the smallest
	)
	for {
		ch := r.Notify()
		var err error
		res, err = r.Read(cursor, limit, res.Buf[:0], res.Records[:0])
		if err != nil {
			return fmt.Errorf("reader %d: Read(%d): %v", id, cursor, err)
		}
		if res.Gap {
			if exact {
				return fmt.Errorf("reader %d: gap at %d", id, cursor)
			}
			if res.GapFrom <= cursor {
				return fmt.Errorf("reader %d: gap from %d at cursor %d", id, res.GapFrom, cursor)
			}
			cursor = res.GapFrom
		}
		for _, rec := range res.Records {
			if rec.Cursor != cursor {
				return fmt.Errorf("reader %d: record at %d; want %d", id, rec.Cursor, cursor)
			}
			end := rec.Cursor + int64(len(rec.Data))
			if !bytes.Equal(rec.Data, data[rec.Cursor:end]) {
				return fmt.Errorf("reader %d: wrong data at %d", id, rec.Cursor)
			}
			for c := rec.Cursor; c < end; c++ {
				if streams[c] != rec.Stream {
					return fmt.Errorf("reader %d: byte %d is %v; want %v", id, c, rec.Stream, streams[c])
				}
			}
			got += len(rec.Data)
			cursor = end
		}
		if res.Next != cursor {
			return fmt.Errorf("reader %d: Next %d; want %d", id, res.Next, cursor)
		}
		if res.Done {
			break
		}
		if len(res.Records) == 0 {
			<-ch
		}
	}
	if cursor != int64(len(data)) || (exact && got != len(data)) {
		return fmt.Errorf("reader %d: ended at %d with %d bytes; want %d", id, cursor, got, len(data))
	}
	return nil
}

// model is the naive reference for FuzzRing: every retained byte with its stream,
// trimmed from the front to maxBytes and then to maxRecords runs.
type model struct {
	maxBytes, maxRecords int
	data                 []byte
	streams              []Stream
	start, end           int64
	stdout, stderr       int64
	closed               bool
}

func (m *model) append(s Stream, p []byte) {
	if m.closed || len(p) == 0 {
		return
	}
	if s == Stdout {
		m.stdout += int64(len(p))
	} else {
		m.stderr += int64(len(p))
	}
	for _, b := range p {
		m.data = append(m.data, b)
		m.streams = append(m.streams, s)
	}
	m.end += int64(len(p))
	if over := len(m.data) - m.maxBytes; over > 0 {
		m.trim(over)
	}
	for m.runs() > m.maxRecords {
		i := 1
		for i < len(m.streams) && m.streams[i] == m.streams[0] {
			i++
		}
		m.trim(i)
	}
}

func (m *model) trim(n int) {
	m.data, m.streams = m.data[n:], m.streams[n:]
	m.start += int64(n)
}

func (m *model) runs() int {
	n := 0
	for i := range m.streams {
		if i == 0 || m.streams[i] != m.streams[i-1] {
			n++
		}
	}
	return n
}

// read returns what Read should: records as fmtRecords, gap, next, done and error.
func (m *model) read(cursor int64, limit int) (recs string, gap bool, gapFrom, next int64, done bool, err error) {
	if cursor < 0 {
		return "", false, 0, 0, false, ErrNegativeCursor
	}
	if cursor > m.end {
		return "", false, 0, 0, false, ErrCursorAhead
	}
	from := cursor
	if from < m.start {
		from, gap, gapFrom = m.start, true, m.start
	}
	n := m.end - from
	if limit > 0 {
		n = min(n, int64(limit))
	}
	var out []Record
	i0 := int(from - m.start)
	for i := i0; i < i0+int(n); i++ {
		if len(out) == 0 || out[len(out)-1].Stream != m.streams[i] {
			out = append(out, Record{Stream: m.streams[i], Cursor: m.start + int64(i)})
		}
		out[len(out)-1].Data = append(out[len(out)-1].Data, m.data[i])
	}
	next = from + n
	return fmtRecords(out), gap, gapFrom, next, m.closed && next == m.end, nil
}

func (m *model) stats() Stats {
	return Stats{Start: m.start, End: m.end, StdoutTotal: m.stdout, StderrTotal: m.stderr,
		Records: m.runs(), Truncated: m.start > 0, Closed: m.closed}
}

// FuzzRing drives a ring and the naive model with the same random operations and
// compares every read. The input's first bytes set the limits and the initial
// buffer sizes; then each operation takes an opcode byte and an argument byte.
func FuzzRing(f *testing.F) {
	f.Add([]byte{8, 3, 0, 0, 0, 4, 3, 5, 5, 0, 5, 9, 6, 1})
	f.Add([]byte{4, 1, 1, 0, 0, 3, 3, 3, 0, 9, 5, 0, 5, 5, 7, 0, 5, 1})
	f.Add([]byte{1, 0, 0, 0, 0, 1, 3, 1, 5, 4, 5, 8, 7, 0, 6, 2})
	f.Add([]byte{30, 5, 3, 2, 0, 40, 3, 7, 1, 2, 4, 9, 6, 0, 5, 13, 5, 77, 0, 200, 3, 60, 5, 2, 7, 4, 6, 3})
	f.Add([]byte{16, 2, 7, 3, 0, 15, 3, 1, 0, 1, 0, 17, 3, 33, 5, 6, 5, 10, 6, 9, 7, 0, 5, 1, 6, 5})
	f.Fuzz(func(t *testing.T, in []byte) {
		next := func() byte {
			if len(in) == 0 {
				return 0
			}
			b := in[0]
			in = in[1:]
			return b
		}
		maxBytes := 1 + int(next()%40)
		maxRecords := 1 + int(next()%6)
		initBytes, initRecs := 1+int(next()%8), 1+int(next()%4)
		r := newRing(maxBytes, maxRecords, initBytes, initRecs)
		m := &model{maxBytes: maxBytes, maxRecords: maxRecords}
		var (
			res    ReadResult
			prefix = []byte("pre")
		)
		for len(in) > 0 {
			op, arg := next(), next()
			switch op % 8 {
			case 0, 1, 2, 3, 4: // append
				s := Stdout
				if op%8 >= 3 {
					s = Stderr
				}
				n := int(arg) % (2*maxBytes + 3)
				p := make([]byte, n)
				for i := range p {
					p[i] = byte((m.end+int64(i))*131>>3) ^ byte(m.end+int64(i))
				}
				ch := r.Notify()
				wasClosed := m.closed
				// WaitRoom's prediction of where the window will start.
				var predicted int64 = -1
				if n > 0 && n <= maxBytes && !wasClosed {
					r.mu.Lock()
					predicted, _ = r.evictionStart(s, int64(n))
					r.mu.Unlock()
				}
				r.Append(s, p)
				m.append(s, p)
				if predicted >= 0 && predicted != m.start {
					t.Fatalf("evictionStart(%v, %d) = %d; the Append moved Start to %d", s, n, predicted, m.start)
				}
				select {
				case <-ch:
					if n == 0 && !wasClosed {
						t.Fatalf("empty Append closed the notify channel")
					}
				default:
					if n > 0 || wasClosed {
						t.Fatalf("Append of %d bytes (closed %v) left the notify channel open", n, wasClosed)
					}
				}
			case 5, 6: // read, then read on from Next to the end
				var cursor int64
				a := next()
				switch arg % 4 {
				case 0:
					cursor = m.start + int64(a%4) - 2
				case 1:
					cursor = m.end + int64(a%4) - 2
				case 2:
					cursor = int64(a) % (m.end + 2)
				case 3:
					cursor = -int64(a%3) - 1
				}
				limit := int(next()%uint8(maxBytes+3)) - 1
				for step := 0; ; step++ {
					dst := res.Buf[:0]
					if op%8 == 6 {
						dst = append(dst, prefix...)
					}
					base := len(dst)
					var err error
					res, err = r.Read(cursor, limit, dst, res.Records[:0])
					wantRecs, wantGap, wantGapFrom, wantNext, wantDone, wantErr := m.read(cursor, limit)
					if !errors.Is(err, wantErr) || (err == nil) != (wantErr == nil) {
						t.Fatalf("Read(%d, %d) error %v; want %v", cursor, limit, err, wantErr)
					}
					if err != nil {
						if len(res.Records) != 0 || len(res.Buf) != base {
							t.Fatalf("failed Read returned data")
						}
						break
					}
					if got := fmtRecords(res.Records); got != wantRecs {
						t.Fatalf("Read(%d, %d) = %q; want %q (model window [%d,%d))", cursor, limit, got, wantRecs, m.start, m.end)
					}
					if res.Gap != wantGap || res.GapFrom != wantGapFrom || res.Next != wantNext || res.Done != wantDone {
						t.Fatalf("Read(%d, %d): Gap %v GapFrom %d Next %d Done %v; want %v %d %d %v",
							cursor, limit, res.Gap, res.GapFrom, res.Next, res.Done, wantGap, wantGapFrom, wantNext, wantDone)
					}
					if !bytes.Equal(res.Buf[:base], prefix[:base]) {
						t.Fatalf("Read overwrote dst's prefix: %q", res.Buf[:base])
					}
					at := base
					for _, rec := range res.Records {
						if len(rec.Data) == 0 || &rec.Data[0] != &res.Buf[at] {
							t.Fatalf("record %d does not point into Buf at %d", rec.Cursor, at)
						}
						at += len(rec.Data)
					}
					if at != len(res.Buf) {
						t.Fatalf("Buf has %d bytes after the prefix; records hold %d", len(res.Buf)-base, at-base)
					}
					if res.Next == m.end || step > 2*maxBytes {
						break
					}
					cursor = res.Next
				}
			case 7: // close, sometimes; otherwise check Wait with a done ctx
				if arg%4 == 0 {
					r.Close()
					m.closed = true
					continue
				}
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				cursor := m.end - int64(arg%3)
				err := r.Wait(ctx, cursor)
				if want := m.end > cursor || m.closed; (err == nil) != want {
					t.Fatalf("Wait(done ctx, %d) = %v at End %d closed %v", cursor, err, m.end, m.closed)
				}
			}
			if got, want := r.Stats(), m.stats(); got != want {
				t.Fatalf("Stats = %+v; want %+v", got, want)
			}
			checkInvariants(t, r)
		}
	})
}

func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{4 << 10, 32 << 10} {
		b.Run(fmt.Sprintf("chunk=%dKiB", size>>10), func(b *testing.B) {
			r := New(1<<20, 4096)
			chunk := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r.Append(Stream(1+i&1), chunk)
				i++
			}
		})
	}
}

func BenchmarkRead(b *testing.B) {
	r := New(1<<20, 4096)
	chunk := make([]byte, 4<<10)
	for i := range 512 { // 2 MiB through a 1 MiB ring: full and wrapped
		r.Append(Stream(1+i%2), chunk[:1000+i%3000])
	}
	const limit = 32 << 10
	b.SetBytes(limit)
	b.ReportAllocs()
	var res ReadResult
	st := r.Stats()
	cursor := st.Start
	for b.Loop() {
		var err error
		res, err = r.Read(cursor, limit, res.Buf[:0], res.Records[:0])
		if err != nil {
			b.Fatal(err)
		}
		cursor = res.Next
		if cursor == st.End {
			cursor = st.Start
		}
	}
}
