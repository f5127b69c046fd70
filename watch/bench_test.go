package watch

import (
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"time"
)

// BenchmarkEventsOneWatch: create+remove of files in a watched dir, each
// op two events, read back through the log by one reader.
// go test -run '^$' -bench EventsOneWatch -benchtime 20000x ./watch/
func BenchmarkEventsOneWatch(b *testing.B) {
	base := b.TempDir()
	r, _ := os.OpenRoot(base)
	defer r.Close()
	w, err := Open(r, base, "", false, Limits{LogEvents: 1 << 16, LogBytes: 16 << 20}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	want := int64(2 * b.N)
	done := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() { // the reader follows the log as a stream does
		var cursor int64
		deadline := time.After(120 * time.Second)
		for cursor < want {
			res, more := w.ReadFrom(cursor, 4096, nil)
			if res.Gap {
				done <- fmt.Errorf("gap at %d", cursor)
				return
			}
			cursor = res.Next
			if len(res.Events) > 0 {
				continue
			}
			select {
			case <-more:
			case <-deadline:
				done <- fmt.Errorf("only %d of %d events", cursor, want)
				return
			}
		}
		done <- nil
	}()
	for i := 0; i < b.N; i++ {
		p := filepath.Join(base, fmt.Sprintf("f%d", i%1000))
		os.WriteFile(p, nil, 0o644)
		os.Remove(p)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	b.ReportMetric(float64(want)/el.Seconds(), "events/s")
}

// BenchmarkMemory1000Dirs: the Go heap a recursive watch of 1,000
// directories holds (the kernel's marks are not counted here).
// go test -run '^$' -bench Memory1000Dirs -benchtime 3x ./watch/
func BenchmarkMemory1000Dirs(b *testing.B) {
	base := b.TempDir()
	for i := range 10 {
		for j := range 100 {
			os.MkdirAll(filepath.Join(base, fmt.Sprintf("d%d/e%02d", i, j)), 0o755)
		}
	}
	r, _ := os.OpenRoot(base)
	defer r.Close()
	var heap, dirs float64
	var took time.Duration
	for i := 0; i < b.N; i++ {
		var m0, m1 goruntime.MemStats
		goruntime.GC()
		goruntime.ReadMemStats(&m0)
		t0 := time.Now()
		w, err := Open(r, base, "", true, Limits{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		took += time.Since(t0)
		goruntime.GC()
		goruntime.ReadMemStats(&m1)
		heap += float64(m1.HeapAlloc) - float64(m0.HeapAlloc)
		dirs = float64(w.Dirs())
		w.Close()
	}
	b.ReportMetric(dirs, "dirs")
	b.ReportMetric(heap/float64(b.N), "heap-bytes")
	b.ReportMetric(heap/float64(b.N)/dirs, "heap-bytes/dir")
	b.ReportMetric(took.Seconds()/float64(b.N)*1000, "ms-to-add")
}
