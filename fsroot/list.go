package fsroot

import (
	"container/heap"
	"io"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"
)

// ListPassBytes bounds the names SortedEach holds at once (each counted
// with 16 bytes of overhead): 4 MiB is about 18,000 names of 207 bytes.
const ListPassBytes = 4 << 20

// listBatch is how many names one ReadDir step reads.
const listBatch = 512

// UploadTempPrefix starts the name of the legacy /upload's temporary file
// (a UUID and ".tmp" follow), at the top of the base dir.
const UploadTempPrefix = ".sandbox-upload-"

// Hidden reports whether a directory entry is one of the daemon's own
// temporary names, which listings leave out: TempPrefix, 16 hex digits and
// ".tmp" (a file being written, or the parents a PUT is creating), or
// UploadTempPrefix, a UUID and ".tmp". One exists only while a write is in
// progress, or after a crash (CleanTemps removes those at start).
func Hidden(name string) bool {
	if !strings.HasSuffix(name, ".tmp") {
		return false
	}
	switch {
	case strings.HasPrefix(name, TempPrefix):
		return isHex(name[len(TempPrefix):len(name)-4], 16)
	case strings.HasPrefix(name, UploadTempPrefix):
		u := name[len(UploadTempPrefix) : len(name)-4]
		return len(u) == 36 && u[8] == '-' && u[13] == '-' && u[18] == '-' && u[23] == '-' &&
			isHex(u[:8]+u[9:13]+u[14:18]+u[19:23]+u[24:], 32)
	}
	return false
}

// Reserved returns the first component of the relative name rel that is
// one of the daemon's temporary names (Hidden), "" when none is: a PUT of
// such a name is refused, as the file would be hidden from listings, left
// by a recursive DELETE and removed at the next start.
func Reserved(rel string) string {
	for _, c := range Components(rel) {
		if Hidden(c) {
			return c
		}
	}
	return ""
}

// isHex: s is n lower-case hex digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// CleanTemps removes, anywhere below root, the Hidden names last modified
// before since (files, and directories with what is in them): what a
// write cut by a crash or a SIGKILL left. Names modified since are kept:
// they may belong to a write in progress. It walks directories without
// following symlinks, a batch of entries at a time, removes nothing below
// another mount (RemoveAllSameMount), and stops early when stop is
// closed. Unreadable directories are skipped; it returns the names
// removed (relative to root) and the first error.
func CleanTemps(root *os.Root, since time.Time, stop <-chan struct{}) (removed []string, err error) {
	queue := []string{"."}
	for len(queue) > 0 {
		if stopped(stop) {
			return removed, nil
		}
		dir := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		f, oerr := root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
		if oerr != nil {
			continue
		}
		for {
			ents, rerr := f.ReadDir(listBatch)
			for _, e := range ents {
				p := e.Name()
				if dir != "." {
					p = dir + "/" + p
				}
				if Hidden(e.Name()) {
					if fi, ierr := e.Info(); ierr == nil && fi.ModTime().Before(since) {
						// Never below a mount: one made inside a leftover
						// would take the removal outside.
						if rmErr := removeAllAt(f, e.Name()); rmErr != nil && err == nil {
							err = rmErr
						} else if rmErr == nil {
							removed = append(removed, p)
						}
						continue
					}
				}
				if e.IsDir() {
					queue = append(queue, p)
				}
			}
			if rerr != nil || stopped(stop) {
				break
			}
		}
		f.Close()
	}
	return removed, err
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
// once, and never more than lease can get from its Budget (nil: no shared
// budget): it reads the directory in passes, each keeping the smallest
// names after the last one given to fn, so memory does not grow with the
// directory (time grows by one directory read per pass). Like readdir, a
// name created, removed or renamed during the listing may or may not be
// seen; no name is given twice. It stops at fn's first error and returns
// it.
func SortedEach(f *os.File, lease *Lease, fn func(name string) error) error {
	return sortedEach(f, ListPassBytes, lease, fn)
}

// sortedEach is SortedEach holding at most passBytes of names.
func sortedEach(f *os.File, passBytes int, lease *Lease, fn func(name string) error) error {
	var last string
	for pass := 0; ; pass++ {
		if pass > 0 {
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return err
			}
		}
		// limit is what this pass may hold: a lease starts at its first
		// chunk and grows while the budget has chunks free.
		limit := passBytes
		if lease != nil {
			limit = min(passBytes, lease.bytes())
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
			for lease != nil && held > limit && limit < passBytes && lease.grow() {
				limit = min(passBytes, lease.bytes())
			}
			for held > limit && len(h) > 1 {
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
		if lease != nil {
			lease.shrink() // the pass's names are given: free what it added
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

// stopped: stop is closed.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}
