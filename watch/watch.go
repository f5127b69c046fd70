// Package watch watches a directory below the base dir for changes with
// inotify (golang.org/x/sys/unix directly) and keeps what it saw in a
// bounded, sequence-numbered log that readers resume from by cursor
// (docs/watch.md).
//
// Why not fsnotify: fsnotify adds watches by path and gives no way to check
// what a path resolved to, so a directory swapped for a symlink between the
// listing and the add makes it watch (and report) outside the base. Here
// every directory is first opened through the base dir's os.Root (which
// refuses to leave the base), then watched by path with
// IN_DONT_FOLLOW|IN_ONLYDIR, and the watch is kept only if it is the one on
// the inode of the descriptor opened through the root (adding a watch of
// /proc/self/fd/<that descriptor> answers the same watch descriptor:
// verify). A watch that does not match is removed before any of its events
// are reported.
//
// Recursive watches have no blind window: a new directory is watched first
// and listed (through its descriptor) after, so what was created in it
// before its watch landed is reported by the listing; an entry both listed
// and seen by inotify is reported once.
package watch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandbox-runtime/sandbox-runtime/fsroot"
)

// Event types.
const (
	Create      = "create"
	Write       = "write"
	Remove      = "remove"
	Rename      = "rename"
	Attrib      = "attrib"
	Overflow    = "overflow"     // the kernel queue or a watch bound overflowed: re-list
	RemovedRoot = "removed_root" // the watched directory is gone: the watch has ended
)

// Event is one change. Path (and OldPath of a rename) is relative to the
// base dir, in the form /v1/files takes.
type Event struct {
	Seq     int64
	Type    string
	Path    string
	OldPath string // rename only
	Dir     bool   // the entry is a directory
	Reason  string // overflow: "kernel_queue", "watch_limit", "dir_changed"
}

// Limits bound a watch. Zero fields take the defaults.
type Limits struct {
	MaxDirs        int           // directories one watch may watch (default 4096)
	LogEvents      int           // events the log keeps (default 8192)
	LogBytes       int           // path bytes the log keeps (default 1 MiB)
	CoalesceWindow time.Duration // writes to one file within it are one event (default 100 ms)
}

const (
	DefaultMaxDirs        = 4096
	DefaultLogEvents      = 8192
	DefaultLogBytes       = 1 << 20
	DefaultCoalesceWindow = 100 * time.Millisecond
)

func (l Limits) withDefaults() Limits {
	if l.MaxDirs <= 0 {
		l.MaxDirs = DefaultMaxDirs
	}
	if l.LogEvents <= 0 {
		l.LogEvents = DefaultLogEvents
	}
	if l.LogBytes <= 0 {
		l.LogBytes = DefaultLogBytes
	}
	if l.CoalesceWindow <= 0 {
		l.CoalesceWindow = DefaultCoalesceWindow
	}
	return l
}

// ErrOutside is returned when the path to watch is not a directory inside
// the base dir.
var ErrOutside = errors.New("watch: the path is outside the base directory")

// ErrNotDir is returned when the path to watch is not a directory (a
// regular file, a device…): a watch watches a directory, whose entries
// include the file.
var ErrNotDir = errors.New("watch: not a directory")

const mask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_DELETE_SELF |
	unix.IN_MOVE_SELF | unix.IN_DONT_FOLLOW | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// dir is one watched directory.
type dir struct {
	wd  int32
	rel string // relative to the base dir; "" is the base itself
}

// Watch is one inotify instance watching a directory (and, when recursive,
// the directories below it).
type Watch struct {
	base      string // the base dir's path (absolute, as opened)
	root      *os.Root
	rel       string // the watched dir, relative to base
	recursive bool
	lim       Limits
	budget    *Budget // nil: no total bound

	fd    int // inotify
	wake  int // eventfd: Close wakes the reader
	done  chan struct{}
	onEnd func()

	mu      sync.Mutex
	closed  bool
	ended   bool // removed_root or closed: no more events
	dirs    map[int32]*dir
	byPath  map[string]int32
	scanned map[string]struct{} // created entries reported by a listing, not yet seen by inotify
	log     []Event             // ring
	head    int                 // index of the oldest
	n       int
	bytes   int
	first   int64 // seq of log[head]
	next    int64 // seq of the next event
	notify  chan struct{}
	writes  map[string]*pendingWrite
	moved   map[uint32]movedFrom
	limited bool // a watch_limit overflow was reported (once per watch)
	// lastChanged is the seq of the last dir_changed overflow: another
	// right after it says nothing new.
	lastChanged int64
}

type pendingWrite struct {
	at    time.Time
	dirty bool // a write was held back since the last write event
}

type movedFrom struct {
	path string
	dir  bool
	at   time.Time
}

// Budget bounds the directories all watches of a Manager watch together.
type Budget struct {
	mu   sync.Mutex
	used int
	max  int
}

// NewBudget returns a budget of max directories.
func NewBudget(max int) *Budget { return &Budget{max: max} }

func (b *Budget) take() bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used >= b.max {
		return false
	}
	b.used++
	return true
}

func (b *Budget) give(n int) {
	if b == nil || n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// Used reports the directories watched under b.
func (b *Budget) Used() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Open starts watching rel (relative to base) below root, whose path is
// base. root stays the caller's; the watch uses it until Close.
func Open(root *os.Root, base, rel string, recursive bool, lim Limits, budget *Budget) (*Watch, error) {
	rel, err := cleanRel(rel)
	if err != nil {
		return nil, err
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("watch: inotify_init1: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch: eventfd: %w", err)
	}
	w := &Watch{base: base, root: root, rel: rel, recursive: recursive, lim: lim.withDefaults(), budget: budget,
		fd: fd, wake: wake, done: make(chan struct{}),
		dirs: map[int32]*dir{}, byPath: map[string]int32{}, scanned: map[string]struct{}{},
		writes: map[string]*pendingWrite{}, moved: map[uint32]movedFrom{}, notify: make(chan struct{}), lastChanged: -1}
	w.log = make([]Event, w.lim.LogEvents)
	w.mu.Lock()
	err = w.addDir(rel, false)
	w.mu.Unlock()
	if err != nil {
		w.release()
		return nil, err
	}
	go w.run()
	return w, nil
}

// cleanRel cleans rel (leading slashes ignored; "" and "." are the base).
// A `..` that leaves the base is ErrOutside: it is not clamped to the base.
// (Callers that follow symlinks first, as the API does, pass a path with
// no `..` left.)
func cleanRel(rel string) (string, error) {
	rel = path.Clean(strings.TrimLeft(rel, "/"))
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", ErrOutside
	}
	if rel == "." {
		rel = ""
	}
	return rel, nil
}

// release frees the descriptors and the budget; the reader has stopped.
func (w *Watch) release() {
	w.budget.give(len(w.dirs))
	w.dirs, w.byPath = map[int32]*dir{}, map[string]int32{}
	unix.Close(w.fd)
	unix.Close(w.wake)
}

// Close ends the watch and frees its inotify instance. It waits for the
// reader goroutine.
func (w *Watch) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		<-w.done
		return
	}
	w.closed = true
	w.mu.Unlock()
	var one [8]byte
	one[0] = 1
	unix.Write(w.wake, one[:])
	<-w.done
}

// Done is closed once the watch has ended (Close or removed_root) and its
// descriptors are freed.
func (w *Watch) Done() <-chan struct{} { return w.done }

// Dirs reports how many directories the watch watches.
func (w *Watch) Dirs() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.dirs)
}

// InotifyFD is the inotify descriptor (for tests that read its fdinfo).
func (w *Watch) InotifyFD() int { return w.fd }

// Path is the watched dir relative to the base.
func (w *Watch) Path() string { return w.rel }

// Recursive reports whether the watch covers subdirectories.
func (w *Watch) Recursive() bool { return w.recursive }

// addDir watches rel, which must be a directory inside the base, and (when
// scan) reports its entries as created; recursive watches descend.
// Called with mu held.
func (w *Watch) addDir(rel string, scan bool) error {
	if _, ok := w.byPath[rel]; ok {
		return nil
	}
	name := rel
	if name == "" {
		name = "."
	}
	d, err := w.root.Open(name)
	if err != nil {
		if fsroot.IsEscape(err) {
			return ErrOutside
		}
		return err
	}
	defer d.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if len(w.dirs) == 0 && rel == w.rel {
			return ErrNotDir // the path asked for: a watch watches a directory
		}
		return &fs.PathError{Op: "watch", Path: rel, Err: unix.ENOTDIR}
	}
	if len(w.dirs) >= w.lim.MaxDirs || !w.budget.take() {
		w.overflow("watch_limit")
		return nil
	}
	full := w.base
	if rel != "" {
		full = w.base + "/" + rel
	}
	wd, err := unix.InotifyAddWatch(w.fd, full, mask)
	first := len(w.dirs) == 0 && rel == w.rel // the watched dir itself: Open fails rather than watch nothing
	if err != nil {
		w.budget.give(1)
		return w.addFailed(rel, first, err)
	}
	w32 := int32(wd)
	if _, dup := w.dirs[w32]; dup {
		// The path resolved to a directory this watch already watches
		// (a swap to another dir inside): that watch stays as it is.
		w.budget.give(1)
		return nil
	}
	ok, err := w.verify(w32, d)
	if err != nil || !ok {
		// Not the directory opened through the root: a symlink swapped
		// in on the way. Drop it before any of its events are reported.
		unix.InotifyRmWatch(w.fd, uint32(wd))
		w.budget.give(1)
		if err != nil {
			return err
		}
		if first {
			return ErrOutside
		}
		w.overflow("dir_changed")
		return nil
	}
	w.dirs[w32] = &dir{wd: w32, rel: rel}
	w.byPath[rel] = w32
	if !scan && !w.recursive {
		return nil
	}
	w.scanDir(d, rel, scan)
	return nil
}

// addFailed is what addDir answers when inotify_add_watch of rel failed
// with err (first: rel is the watched dir itself, whose Open fails rather
// than watch nothing). Called with mu held.
func (w *Watch) addFailed(rel string, first bool, err error) error {
	if first {
		if err == unix.ENOTDIR || err == unix.ELOOP {
			return ErrOutside // swapped for a symlink since it was opened
		}
		return &fs.PathError{Op: "watch", Path: rel, Err: err}
	}
	switch err {
	case unix.ENOSPC: // fs.inotify.max_user_watches
		w.overflow("watch_limit")
		return nil
	case unix.ENOENT:
		return nil // gone since it was opened: its removal is reported by inotify
	case unix.ENOTDIR, unix.ELOOP:
		// Swapped for a symlink or a file since it was opened: not
		// watched, and the client is told to re-list.
		w.overflow("dir_changed")
		return nil
	}
	return fmt.Errorf("watch: inotify_add_watch %q: %w", rel, err)
}

// scanDir lists rel through d, its descriptor opened through the root:
// entries created before the watch landed are reported now (when scan),
// and, when recursive, subdirectories are watched. Called with mu held.
func (w *Watch) scanDir(d *os.File, rel string, scan bool) {
	ents, err := d.ReadDir(-1)
	if err != nil {
		return
	}
	for _, e := range ents {
		p := join(rel, e.Name())
		isDir := e.IsDir()
		if scan {
			w.scanned[p] = struct{}{}
			w.append(Event{Type: Create, Path: p, Dir: isDir})
		}
		if isDir && w.recursive {
			w.addDir(p, scan) // a subdirectory that cannot be watched is skipped, as before
		}
	}
}

// verify reports whether watch descriptor wd watches the directory d,
// the descriptor opened through the root. inotify_add_watch of
// /proc/self/fd/<d> reaches d's own inode (the magic link is the open file,
// not a name looked up again), and the kernel keeps one watch per inode and
// inotify descriptor: it answers wd again exactly when the watch added by
// path is on that inode. Any other answer is a new watch of d, removed here
// (unless this watch already had it). Called with mu held.
// (It compared the device and inode of the kernel's fdinfo listing, which
// the kernel formats whole, every watch of the descriptor, for each read: a
// recursive watch of 1,011 directories took 1.3 s to open, 4,041 took 8 s.)
func (w *Watch) verify(wd int32, d *os.File) (bool, error) {
	got, err := unix.InotifyAddWatch(w.fd, "/proc/self/fd/"+strconv.Itoa(int(d.Fd())), (mask&^unix.IN_DONT_FOLLOW)|unix.IN_MASK_ADD)
	if err != nil {
		return false, fmt.Errorf("watch: checking the new watch through /proc/self/fd: %w", err)
	}
	if int32(got) != wd {
		if _, known := w.dirs[int32(got)]; !known {
			// d's own new watch; one this watch already had (d was
			// watched under another name) stays.
			unix.InotifyRmWatch(w.fd, uint32(got))
		}
		return false, nil
	}
	return true, nil
}

// WatchedInode is one entry of an inotify descriptor's fdinfo.
type WatchedInode struct {
	WD  int32
	Ino uint64
	Dev uint64 // kernel encoding: major<<20 | minor
}

// FDInfo lists the watches of inotify descriptor fd (of this process).
func FDInfo(fd int) ([]WatchedInode, error) {
	data, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return nil, err
	}
	var out []WatchedInode
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if e, ok := parseFDInfoLine(sc.Text()); ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// parseFDInfoLine parses an "inotify wd:… ino:… sdev:…" line (hex numbers).
func parseFDInfoLine(line string) (WatchedInode, bool) {
	var e WatchedInode
	if !strings.HasPrefix(line, "inotify ") {
		return e, false
	}
	for _, f := range strings.Fields(line[len("inotify "):]) {
		k, v, _ := strings.Cut(f, ":")
		switch k {
		case "wd":
			n, _ := strconv.ParseInt(v, 16, 32)
			e.WD = int32(n)
		case "ino":
			e.Ino, _ = strconv.ParseUint(v, 16, 64)
		case "sdev":
			e.Dev, _ = strconv.ParseUint(v, 16, 64)
		}
	}
	return e, true
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// overflow logs an overflow event. A watch_limit overflow is reported
// once; dir_changed (a directory swapped while it was being added, so not
// watched) not twice in a row.
func (w *Watch) overflow(reason string) {
	if reason == "dir_changed" {
		if w.lastChanged == w.next-1 && w.next > 0 {
			return // the last event said so already
		}
		defer func() { w.lastChanged = w.next - 1 }()
	}
	if reason == "watch_limit" {
		if w.limited {
			return
		}
		w.limited = true
	}
	w.append(Event{Type: Overflow, Reason: reason})
}

// append adds e to the log, dropping the oldest events beyond the bounds.
// Called with mu held.
func (w *Watch) append(e Event) {
	if w.ended {
		return
	}
	e.Seq = w.next
	w.next++
	size := len(e.Path) + len(e.OldPath)
	for w.n > 0 && (w.n == len(w.log) || w.bytes+size > w.lim.LogBytes) {
		old := &w.log[w.head]
		w.bytes -= len(old.Path) + len(old.OldPath)
		*old = Event{}
		w.head = (w.head + 1) % len(w.log)
		w.n--
		w.first++
	}
	if w.n == 0 {
		w.first = e.Seq
	}
	w.log[(w.head+w.n)%len(w.log)] = e
	w.n++
	w.bytes += size
	close(w.notify)
	w.notify = make(chan struct{})
}

// Read is what ReadFrom returns.
type Read struct {
	Events []Event
	// Gap: the cursor was older than the log; events [cursor, GapTo) are
	// lost and the client must re-list.
	Gap   bool
	GapTo int64
	Next  int64 // the cursor to read from next
	Ended bool  // the watch has ended and Next is its last cursor
}

// ReadFrom returns up to max events from cursor (a sequence number) on,
// appended to buf, and a channel closed when more arrive.
func (w *Watch) ReadFrom(cursor int64, max int, buf []Event) (Read, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := Read{Events: buf[:0]}
	if cursor > w.next {
		cursor = w.next
	}
	if cursor < w.first && w.first > 0 || (w.n == 0 && cursor < w.next) {
		r.Gap, r.GapTo = true, w.first
		if w.n == 0 {
			r.GapTo = w.next
		}
		cursor = r.GapTo
	}
	for s := cursor; s < w.next && len(r.Events) < max; s++ {
		r.Events = append(r.Events, w.log[(w.head+int(s-w.first))%len(w.log)])
	}
	r.Next = cursor + int64(len(r.Events))
	r.Ended = w.ended && r.Next == w.next
	return r, w.notify
}

// NextSeq is the sequence number of the next event.
func (w *Watch) NextSeq() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next
}

// run reads inotify events until Close or the end of the watched dir.
func (w *Watch) run() {
	defer close(w.done)
	defer w.release()
	buf := make([]byte, 64<<10)
	fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}, {Fd: int32(w.wake), Events: unix.POLLIN}}
	for {
		timeout := -1
		w.mu.Lock()
		if len(w.writes) > 0 || len(w.moved) > 0 {
			timeout = int(w.lim.CoalesceWindow / time.Millisecond)
		}
		closed := w.closed || w.ended
		w.mu.Unlock()
		if closed {
			w.finish()
			return
		}
		n, err := unix.Poll(fds, timeout)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			w.finish()
			return
		}
		if n == 0 || fds[0].Revents&unix.POLLIN == 0 {
			w.mu.Lock()
			w.flush(time.Now(), true)
			w.mu.Unlock()
			continue
		}
		for {
			k, err := unix.Read(w.fd, buf)
			if err == unix.EINTR {
				continue
			}
			if err == unix.EAGAIN {
				w.mu.Lock()
				// The queue was empty after every listing so far:
				// whatever a listing reported that inotify has not
				// reported, it will not.
				clear(w.scanned)
				w.mu.Unlock()
				break
			}
			if err != nil || k <= 0 {
				w.finish()
				return
			}
			w.mu.Lock()
			w.handle(buf[:k])
			w.flush(time.Now(), false)
			w.mu.Unlock()
		}
	}
}

// finish marks the watch ended and wakes its readers.
func (w *Watch) finish() {
	w.mu.Lock()
	w.flush(time.Now(), true)
	for m := range w.moved {
		delete(w.moved, m)
	}
	w.ended = true
	close(w.notify)
	w.notify = make(chan struct{})
	onEnd := w.onEnd
	w.mu.Unlock()
	if onEnd != nil {
		onEnd()
	}
}

// flush reports the writes held back beyond the coalescing window (all of
// them when all) and renames whose other half did not come.
func (w *Watch) flush(now time.Time, all bool) {
	for p, pw := range w.writes {
		if all || now.Sub(pw.at) >= w.lim.CoalesceWindow {
			if pw.dirty {
				w.append(Event{Type: Write, Path: p})
			}
			delete(w.writes, p)
		}
	}
	for c, m := range w.moved {
		if all || now.Sub(m.at) >= w.lim.CoalesceWindow {
			w.movedAway(m)
			delete(w.moved, c)
		}
	}
}

// movedAway reports a move out of the watch as a removal.
func (w *Watch) movedAway(m movedFrom) {
	w.append(Event{Type: Remove, Path: m.path, Dir: m.dir})
	if m.dir {
		w.dropTree(m.path)
	}
}

// dropTree forgets the watches of p and below (they are moved or gone).
func (w *Watch) dropTree(p string) {
	for rel, wd := range w.byPath {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			unix.InotifyRmWatch(w.fd, uint32(wd))
			delete(w.byPath, rel)
			delete(w.dirs, wd)
			w.budget.give(1)
		}
	}
}

// renameTree moves the watches of old and below to new.
func (w *Watch) renameTree(old, new string) {
	for rel, wd := range w.byPath {
		if rel == old || strings.HasPrefix(rel, old+"/") {
			nr := new + rel[len(old):]
			delete(w.byPath, rel)
			w.byPath[nr] = wd
			w.dirs[wd].rel = nr
		}
	}
}

// handle turns one read of inotify events into log events. mu is held.
func (w *Watch) handle(b []byte) {
	var pendingFrom *uint32
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		size := unix.SizeofInotifyEvent + int(ev.Len)
		if size > len(b) {
			break
		}
		name := ""
		if ev.Len > 0 {
			nb := b[unix.SizeofInotifyEvent:size]
			if i := bytes.IndexByte(nb, 0); i >= 0 {
				nb = nb[:i]
			}
			name = string(nb)
		}
		b = b[size:]
		m := ev.Mask
		if m&unix.IN_Q_OVERFLOW != 0 {
			w.overflow("kernel_queue")
			continue
		}
		d, ok := w.dirs[ev.Wd]
		if !ok {
			continue // a watch dropped (unverified or forgotten): nothing of it is reported
		}
		// A MOVED_FROM not followed at once by its MOVED_TO is a move out.
		if pendingFrom != nil && !(m&unix.IN_MOVED_TO != 0 && ev.Cookie == *pendingFrom) {
			if mf, ok := w.moved[*pendingFrom]; ok {
				delete(w.moved, *pendingFrom)
				w.movedAway(mf)
			}
			pendingFrom = nil
		}
		pendingFrom = w.apply(ev.Wd, d, m, ev.Cookie, join(d.rel, name))
	}
	// A MOVED_FROM last in this read may have its MOVED_TO in the next:
	// it stays in moved until then or until the coalescing window ends
	// (flush with all when poll times out).
}

// apply records one inotify event (mask m, cookie) of the directory d (its
// watch wd) about the path p. mu is held. It answers the cookie of a
// MOVED_FROM, whose MOVED_TO may come next; else nil.
func (w *Watch) apply(wd int32, d *dir, m, cookie uint32, p string) *uint32 {
	isDir := m&unix.IN_ISDIR != 0
	switch {
	case m&unix.IN_IGNORED != 0:
		if d.rel == w.rel {
			w.append(Event{Type: RemovedRoot, Path: w.rel})
			w.ended = true
		}
		delete(w.byPath, d.rel)
		delete(w.dirs, wd)
		w.budget.give(1)
	case m&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
		if d.rel == w.rel {
			w.append(Event{Type: RemovedRoot, Path: w.rel})
			w.ended = true
		}
	case m&unix.IN_UNMOUNT != 0:
		if d.rel == w.rel {
			w.append(Event{Type: RemovedRoot, Path: w.rel})
			w.ended = true
		}
	case m&unix.IN_CREATE != 0:
		if _, dup := w.scanned[p]; dup {
			delete(w.scanned, p)
		} else {
			w.append(Event{Type: Create, Path: p, Dir: isDir})
		}
		if isDir && w.recursive {
			w.addDir(p, true)
		}
	case m&unix.IN_DELETE != 0:
		delete(w.writes, p)
		w.append(Event{Type: Remove, Path: p, Dir: isDir})
	case m&unix.IN_MODIFY != 0:
		if pw, held := w.writes[p]; held {
			pw.dirty = true
		} else {
			w.append(Event{Type: Write, Path: p})
			w.writes[p] = &pendingWrite{at: time.Now()}
		}
	case m&unix.IN_CLOSE_WRITE != 0:
		if pw, held := w.writes[p]; held && pw.dirty {
			w.append(Event{Type: Write, Path: p})
			pw.dirty = false
		}
	case m&unix.IN_ATTRIB != 0:
		w.append(Event{Type: Attrib, Path: p, Dir: isDir})
	case m&unix.IN_MOVED_FROM != 0:
		c := cookie
		w.moved[c] = movedFrom{path: p, dir: isDir, at: time.Now()}
		return &c
	case m&unix.IN_MOVED_TO != 0:
		mf, ok := w.moved[cookie]
		if ok {
			delete(w.moved, cookie)
			w.append(Event{Type: Rename, Path: p, OldPath: mf.path, Dir: isDir})
			if pw, held := w.writes[mf.path]; held {
				delete(w.writes, mf.path)
				w.writes[p] = pw
			}
			if isDir {
				w.renameTree(mf.path, p)
			}
		} else {
			if _, dup := w.scanned[p]; dup {
				delete(w.scanned, p)
			} else {
				w.append(Event{Type: Create, Path: p, Dir: isDir})
			}
			if isDir && w.recursive {
				w.addDir(p, true)
			}
		}
	}
	return nil
}
