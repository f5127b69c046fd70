package watch

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// collector follows a watch from cursor 0 and keeps every event.
type collector struct {
	mu     sync.Mutex
	events []Event
	gaps   int
	over   int
	ch     chan struct{} // signalled on every batch
	done   chan struct{}
	stop   chan struct{}
}

func follow(w *Watch) *collector {
	c := &collector{ch: make(chan struct{}, 1), done: make(chan struct{}), stop: make(chan struct{})}
	go func() {
		defer close(c.done)
		var cursor int64
		var buf []Event
		for {
			r, more := w.ReadFrom(cursor, 512, buf)
			c.mu.Lock()
			if r.Gap {
				c.gaps++
			}
			for _, e := range r.Events {
				if e.Type == Overflow {
					c.over++
				}
				c.events = append(c.events, e)
			}
			c.mu.Unlock()
			cursor = r.Next
			buf = r.Events
			select {
			case c.ch <- struct{}{}:
			default:
			}
			if r.Ended {
				return
			}
			if len(r.Events) > 0 {
				continue
			}
			select {
			case <-more:
			case <-c.stop:
				return
			}
		}
	}()
	return c
}

// waitFor waits (bounded) until cond holds over the events so far.
func (c *collector) waitFor(t *testing.T, d time.Duration, what string, cond func(evs []Event) bool) {
	t.Helper()
	deadline := time.After(d)
	for {
		c.mu.Lock()
		ok := cond(c.events)
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-c.ch:
		case <-deadline:
			c.mu.Lock()
			n := len(c.events)
			c.mu.Unlock()
			t.Fatalf("timed out waiting for %s (%d events so far)", what, n)
		}
	}
}

func (c *collector) close() {
	close(c.stop)
	<-c.done
}

func openRoot(t *testing.T, dir string) *os.Root {
	t.Helper()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestRecursiveNestedBurst: 10,000 files in 100 new nested directories
// (10 top dirs of 10 subdirs, created while the watch runs): every file is
// reported, or an overflow/gap is said. Never a silent miss.
func TestRecursiveNestedBurst(t *testing.T) {
	base := t.TempDir()
	w, err := Open(openRoot(t, base), base, "", true, Limits{LogEvents: 1 << 15, LogBytes: 8 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c := follow(w)
	defer c.close()
	want := map[string]bool{}
	for i := range 10 {
		for j := range 10 {
			d := filepath.Join(base, fmt.Sprintf("t%d", i), fmt.Sprintf("s%d", j))
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			for k := range 100 {
				name := fmt.Sprintf("t%d/s%d/f%d", i, j, k)
				if err := os.WriteFile(filepath.Join(base, name), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				want[name] = true
			}
		}
	}
	c.waitFor(t, 60*time.Second, "every file or an overflow", func(evs []Event) bool {
		if c.gaps > 0 || c.over > 0 {
			return true
		}
		seen := 0
		got := map[string]bool{}
		for _, e := range evs {
			if e.Type == Create && want[e.Path] && !got[e.Path] {
				got[e.Path] = true
				seen++
			}
		}
		return seen == len(want)
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gaps > 0 || c.over > 0 {
		t.Logf("overflow said (gaps %d, overflows %d): acceptable", c.gaps, c.over)
		return
	}
	creates := map[string]int{}
	for _, e := range c.events {
		if e.Type == Create {
			creates[e.Path]++
		}
	}
	dups := 0
	for p, n := range creates {
		if n > 1 && want[p] {
			dups++
		}
	}
	t.Logf("%d events, %d files reported more than once, %d dirs watched", len(c.events), dups, w.Dirs())
	if w.Dirs() != 111 {
		t.Errorf("watched %d dirs, want 111 (base, 10, 100)", w.Dirs())
	}
}

// TestRenameAcrossDirs: a rename from one watched dir to another is one
// rename event with the old and the new path.
func TestRenameAcrossDirs(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{"a", "b"} {
		os.Mkdir(filepath.Join(base, d), 0o755)
	}
	os.WriteFile(filepath.Join(base, "a/x"), []byte("1"), 0o644)
	w, err := Open(openRoot(t, base), base, "", true, Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c := follow(w)
	defer c.close()
	if err := os.Rename(filepath.Join(base, "a/x"), filepath.Join(base, "b/y")); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, 10*time.Second, "the rename", func(evs []Event) bool {
		for _, e := range evs {
			if e.Type == Rename && e.OldPath == "a/x" && e.Path == "b/y" {
				return true
			}
		}
		return false
	})
	// A directory renamed keeps being watched under its new name.
	os.Mkdir(filepath.Join(base, "a/sub"), 0o755)
	c.waitFor(t, 10*time.Second, "a/sub created", func(evs []Event) bool { return has(evs, Create, "a/sub") })
	if err := os.Rename(filepath.Join(base, "a/sub"), filepath.Join(base, "b/sub2")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(base, "b/sub2/z"), nil, 0o644)
	c.waitFor(t, 10*time.Second, "b/sub2/z created", func(evs []Event) bool { return has(evs, Create, "b/sub2/z") })
	// A move out of the watch is a remove.
	out := t.TempDir()
	os.Rename(filepath.Join(base, "b/y"), filepath.Join(out, "y"))
	c.waitFor(t, 10*time.Second, "b/y removed", func(evs []Event) bool { return has(evs, Remove, "b/y") })
}

func has(evs []Event, typ, p string) bool {
	for _, e := range evs {
		if e.Type == typ && e.Path == p {
			return true
		}
	}
	return false
}

// TestWritesCoalesced: many writes to one file within the window are few
// events, and the last write is always reported.
func TestWritesCoalesced(t *testing.T) {
	base := t.TempDir()
	w, err := Open(openRoot(t, base), base, "", false, Limits{CoalesceWindow: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c := follow(w)
	defer c.close()
	f, err := os.Create(filepath.Join(base, "f"))
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		f.Write([]byte("x"))
	}
	f.Close()
	os.Remove(filepath.Join(base, "f"))
	c.waitFor(t, 10*time.Second, "the remove", func(evs []Event) bool { return has(evs, Remove, "f") })
	c.mu.Lock()
	defer c.mu.Unlock()
	writes := 0
	for _, e := range c.events {
		if e.Type == Write {
			writes++
		}
	}
	if writes < 1 || writes > 3 {
		t.Fatalf("%d write events for 1000 writes within the window, want 1..3: %v", writes, c.events)
	}
}

// TestSymlinkSwapRace: while the watch adds directories, a goroutine swaps
// a directory for a symlink to a tree outside the base. The watch never
// reports a path of the outside tree and never holds an inotify watch on
// an inode outside the base (its fdinfo).
func TestSymlinkSwapRace(t *testing.T) {
	base, outside := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(outside, "t"), 0o755); err != nil {
		t.Fatal(err)
	}
	outIno := map[uint64]bool{}
	for _, d := range []string{outside, filepath.Join(outside, "t")} {
		var st syscall.Stat_t
		syscall.Stat(d, &st)
		outIno[st.Ino] = true
	}
	w, err := Open(openRoot(t, base), base, "", true, Limits{LogEvents: 1 << 16, LogBytes: 16 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c := follow(w)
	defer c.close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the outside tree keeps changing
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			p := filepath.Join(outside, "t", "OUT-"+strconv.Itoa(i%50))
			os.WriteFile(p, nil, 0o644)
			os.Remove(p)
		}
	}()
	go func() { // s is a dir with a t inside, then a symlink to outside
		defer wg.Done()
		s := filepath.Join(base, "s")
		for !stop.Load() {
			os.RemoveAll(s)
			os.Mkdir(s, 0o755)
			os.Mkdir(filepath.Join(s, "t"), 0o755)
			os.RemoveAll(s)
			os.Symlink(outside, s)
		}
	}()
	bad := ""
	deadline := time.Now().Add(3 * time.Second)
	samples := 0
	for time.Now().Before(deadline) && bad == "" {
		ws, err := FDInfo(w.InotifyFD())
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ws {
			if outIno[e.Ino] {
				bad = fmt.Sprintf("wd %d watches outside inode %d", e.WD, e.Ino)
			}
		}
		samples++
		select {
		case <-c.ch:
		case <-time.After(10 * time.Millisecond): // a sampling period, not a synchronisation
		}
	}
	stop.Store(true)
	wg.Wait()
	if bad != "" {
		t.Fatal(bad)
	}
	c.mu.Lock()
	n := len(c.events)
	for _, e := range c.events {
		if strings.Contains(e.Path, "OUT-") || strings.Contains(e.OldPath, "OUT-") {
			c.mu.Unlock()
			t.Fatalf("reported a change outside the base: %+v", e)
		}
	}
	c.mu.Unlock()
	// Every watch left is on an inode inside the base.
	inside := map[uint64]bool{}
	filepath.Walk(base, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			inside[fi.Sys().(*syscall.Stat_t).Ino] = true
		}
		return nil
	})
	ws, _ := FDInfo(w.InotifyFD())
	for _, e := range ws {
		if outIno[e.Ino] {
			t.Fatalf("wd %d watches outside inode %d at the end", e.WD, e.Ino)
		}
	}
	t.Logf("%d fdinfo samples, %d events, %d watches at the end", samples, n, len(ws))
}

// TestNeverReadingBounded: a watch nobody reads keeps at most its log's
// bounds, and a reader at cursor 0 then gets a gap.
func TestNeverReadingBounded(t *testing.T) {
	base := t.TempDir()
	lim := Limits{LogEvents: 1000, LogBytes: 16 << 10}
	w, err := Open(openRoot(t, base), base, "", false, lim, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	name := strings.Repeat("n", 100)
	for i := range 5000 {
		p := filepath.Join(base, name+strconv.Itoa(i))
		os.WriteFile(p, nil, 0o644)
		os.Remove(p)
	}
	// Wait (bounded) until the watch has read most of them.
	deadline := time.Now().Add(30 * time.Second)
	for w.NextSeq() < 10000 && time.Now().Before(deadline) {
		_, more := w.ReadFrom(w.NextSeq(), 0, nil)
		select {
		case <-more:
		case <-time.After(time.Second):
		}
	}
	w.mu.Lock()
	n, bytes, next := w.n, w.bytes, w.next
	w.mu.Unlock()
	if next < 10000 {
		t.Fatalf("only %d events seen", next)
	}
	if n > lim.LogEvents || bytes > lim.LogBytes {
		t.Fatalf("log holds %d events, %d bytes; bounds %d, %d", n, bytes, lim.LogEvents, lim.LogBytes)
	}
	r, _ := w.ReadFrom(0, 10, nil)
	if !r.Gap || r.GapTo <= 0 {
		t.Fatalf("an old cursor gave no gap: %+v", r)
	}
	t.Logf("%d events seen, log holds %d (%d path bytes), gap to %d", next, n, bytes, r.GapTo)
}

func countFDs(t *testing.T) (fds, inotifyWatches int) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fd, _ := strconv.Atoi(e.Name())
		if ws, err := FDInfo(fd); err == nil {
			inotifyWatches += len(ws)
		}
	}
	return len(ents), inotifyWatches
}

// TestCreateDeleteCycles: 200 watch create/delete cycles through a Manager
// leave no descriptor and no inotify watch behind.
func TestCreateDeleteCycles(t *testing.T) {
	base := t.TempDir()
	for i := range 5 {
		os.MkdirAll(filepath.Join(base, "d"+strconv.Itoa(i), "e"), 0o755)
	}
	m, err := NewManager(base, ManagerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	fd0, iw0 := countFDs(t)
	for i := range 200 {
		h, err := m.Create("", i%2 == 0)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 && h.Dirs() != 11 {
			t.Fatalf("recursive watch has %d dirs, want 11", h.Dirs())
		}
		if err := m.Delete(h.ID); err != nil {
			t.Fatal(err)
		}
	}
	fd1, iw1 := countFDs(t)
	if fd1 != fd0 || iw1 != iw0 || m.DirsUsed() != 0 {
		t.Fatalf("after 200 cycles: fds %d→%d, inotify watches %d→%d, budget %d", fd0, fd1, iw0, iw1, m.DirsUsed())
	}
}

// TestConfinedPath: a path outside the base (through a symlink) is refused.
func TestConfinedPath(t *testing.T) {
	base, outside := t.TempDir(), t.TempDir()
	os.Symlink(outside, filepath.Join(base, "l"))
	m, err := NewManager(base, ManagerOptions{MaxWatches: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Create("l", true); err != ErrOutside {
		t.Fatalf("watching a symlink to outside: %v, want ErrOutside", err)
	}
	if _, err := m.Create("", true); err != nil {
		t.Fatalf("the base: %v", err)
	}
	if _, err := m.Create("", true); err != ErrTooMany {
		t.Fatalf("a second watch over MaxWatches 1: %v, want ErrTooMany", err)
	}
}

// TestRemovedRoot: removing the watched dir ends the watch with removed_root.
func TestRemovedRoot(t *testing.T) {
	base := t.TempDir()
	os.Mkdir(filepath.Join(base, "w"), 0o755)
	w, err := Open(openRoot(t, base), base, "w", true, Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c := follow(w)
	os.RemoveAll(filepath.Join(base, "w"))
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end")
	}
	if !has(c.events, RemovedRoot, "w") {
		t.Fatalf("no removed_root: %+v", c.events)
	}
}

// TestIdleExpiry: a watch nobody reads is closed after IdleTimeout; one
// with an open reader is not.
func TestIdleExpiry(t *testing.T) {
	base := t.TempDir()
	m, err := NewManager(base, ManagerOptions{IdleTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	idle, _ := m.Create("", false)
	read, _ := m.Create("", false)
	done := read.Reading()
	select {
	case <-idle.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the idle watch did not expire")
	}
	if _, err := m.Get(idle.ID); err != ErrNotFound {
		t.Fatalf("an expired watch: %v, want ErrNotFound", err)
	}
	if _, err := m.Get(read.ID); err != nil {
		t.Fatalf("the read watch expired: %v", err)
	}
	done()
	select {
	case <-read.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not expire once its reader left")
	}
}

// TestEndedWatchForgotten: a watch whose directory was removed leaves the
// manager's list once nobody reads it.
func TestEndedWatchForgotten(t *testing.T) {
	base := t.TempDir()
	os.Mkdir(filepath.Join(base, "w"), 0o755)
	m, err := NewManager(base, ManagerOptions{IdleTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h, err := m.Create("w", false)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(base, "w"))
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end")
	}
	for end := time.Now().Add(10 * time.Second); len(m.List()) != 0; {
		if time.Now().After(end) {
			t.Fatal("the ended watch is still listed")
		}
		time.Sleep(50 * time.Millisecond) // polling a condition with a bound
	}
}

// TestDotDotOutside: a path whose `..` leaves the base is ErrOutside, not
// the base (path.Clean("/"+rel) would make it so); a `..` that stays
// inside is where it leads.
func TestDotDotOutside(t *testing.T) {
	base := t.TempDir()
	os.MkdirAll(filepath.Join(base, "d", "e"), 0o755)
	os.Mkdir(filepath.Join(base, "r"), 0o755)
	root := openRoot(t, base)
	for _, rel := range []string{"..", "../", "/..", "d/../../r", "d/e/../../..", "./../" + filepath.Base(base)} {
		w, err := Open(root, base, rel, false, Limits{}, nil)
		if err == nil {
			t.Errorf("Open(%q) watches %q, want ErrOutside", rel, w.Path())
			w.Close()
			continue
		}
		if err != ErrOutside {
			t.Errorf("Open(%q): %v, want ErrOutside", rel, err)
		}
	}
	w, err := Open(root, base, "d/e/../../r", false, Limits{}, nil)
	if err != nil || w.Path() != "r" {
		t.Fatalf("Open(d/e/../../r): %v, want a watch of r", err)
	}
	w.Close()
}

// TestNotDir: a path that is a regular file is ErrNotDir (the API's 400),
// one that does not exist is not.
func TestNotDir(t *testing.T) {
	base := t.TempDir()
	os.WriteFile(filepath.Join(base, "f"), nil, 0o644)
	root := openRoot(t, base)
	if _, err := Open(root, base, "f", false, Limits{}, nil); err != ErrNotDir {
		t.Errorf("Open(f): %v, want ErrNotDir", err)
	}
	if _, err := Open(root, base, "nope", false, Limits{}, nil); err == nil || err == ErrNotDir {
		t.Errorf("Open(nope): %v, want a not-exist error", err)
	}
}
