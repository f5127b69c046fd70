package fsroot

import (
	"container/heap"
	"io"
	"os"
	"sort"
)

// ListPassBytes bounds the names SortedEach holds at once (each counted
// with 16 bytes of overhead): 4 MiB is about 18,000 names of 207 bytes.
const ListPassBytes = 4 << 20

// listBatch is how many names one ReadDir step reads.
const listBatch = 512

// Hidden reports whether a directory entry is this package's own
// temporary file (TempPrefix, 16 hex digits, ".tmp"), which listings leave
// out: one exists only while a write is in progress, or after a crash
// (CleanTemps removes those).
func Hidden(name string) bool {
	const hexLen = 16
	if len(name) != len(TempPrefix)+hexLen+len(".tmp") || name[:len(TempPrefix)] != TempPrefix || name[len(name)-4:] != ".tmp" {
		return false
	}
	for _, c := range name[len(TempPrefix) : len(TempPrefix)+hexLen] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// EachName calls fn with every name of the open directory f but the
// Hidden ones, in directory order, reading listBatch names at a time: the
// memory held does not grow with the directory. It stops at fn's first
// error and returns it.
func EachName(f *os.File, fn func(name string) error) error {
	for {
		names, err := f.Readdirnames(listBatch)
		for _, n := range names {
			if Hidden(n) {
				continue
			}
			if ferr := fn(n); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// SortedEach calls fn with every name of the open directory f but the
// Hidden ones, in byte order, holding at most ListPassBytes of names at
// once: it reads the directory in passes, each keeping the smallest names
// after the last one given to fn, so memory does not grow with the
// directory (time grows by one directory read per ListPassBytes of names).
// Like readdir, a name created, removed or renamed during the listing may
// or may not be seen; no name is given twice. It stops at fn's first error
// and returns it.
func SortedEach(f *os.File, fn func(name string) error) error {
	return sortedEach(f, ListPassBytes, fn)
}

// sortedEach is SortedEach holding at most passBytes of names.
func sortedEach(f *os.File, passBytes int, fn func(name string) error) error {
	var last string
	for pass := 0; ; pass++ {
		if pass > 0 {
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return err
			}
		}
		var h maxHeap
		held, dropped := 0, false
		err := EachName(f, func(n string) error {
			if pass > 0 && n <= last {
				return nil // given in an earlier pass
			}
			if dropped && n >= h[0] {
				return nil // not among this pass's names
			}
			heap.Push(&h, n)
			held += len(n) + 16
			for held > passBytes && len(h) > 1 {
				held -= len(heap.Pop(&h).(string)) + 16
				dropped = true
			}
			return nil
		})
		if err != nil {
			return err
		}
		names := []string(h)
		sort.Strings(names)
		for _, n := range names {
			if err := fn(n); err != nil {
				return err
			}
		}
		if !dropped {
			return nil
		}
		last = names[len(names)-1]
	}
}

// maxHeap is a container/heap of names, the greatest at [0].
type maxHeap []string

func (h maxHeap) Len() int           { return len(h) }
func (h maxHeap) Less(i, j int) bool { return h[i] > h[j] }
func (h maxHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *maxHeap) Push(x any)        { *h = append(*h, x.(string)) }
func (h *maxHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
