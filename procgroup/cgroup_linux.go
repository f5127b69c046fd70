//go:build linux

package procgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The isolation modes of Isolation.Mode.
const (
	// ModeCgroup: the runtime built a cgroup v2 tree of its own; every command
	// runs in a child cgroup of its own, killed with cgroup.kill.
	ModeCgroup = "cgroup"
	// ModeThreads: no writable cgroup v2 tree; commands are process groups and
	// the runtime keeps OS threads made up front as its headroom.
	ModeThreads = "threads"
)

// DefaultPidsHeadroom is how many pids (tasks) CgroupOptions keeps for the
// runtime below the nearest process limit when it can set pids.max.
const DefaultPidsHeadroom = 128

// Isolation says how the runtime keeps commands from starving it of
// processes, and why. It is plain data.
type Isolation struct {
	Mode   string // ModeCgroup or ModeThreads
	Reason string // why this mode (what was found, what failed)
	// Cgroup is the directory of the runtime's tree (cgroup mode): the runtime
	// in Cgroup/daemon (when it moved itself; Cgroup/daemon-<N> after it had to
	// move into a fresh leaf), commands in Cgroup/commands/c<N>.
	Cgroup string
	// Controllers lists the controllers enabled for the commands (cgroup mode).
	Controllers []string
	// CommandsPidsMax is the pids.max set on Cgroup/commands; 0 when none was set.
	CommandsPidsMax int64
	// PidfdSignals is true when group signals go through a pidfd of the leader
	// (pidfd_send_signal with PIDFD_SIGNAL_PROCESS_GROUP, Linux 6.9+), which
	// cannot reach a process that was given a recycled pid.
	PidfdSignals bool
}

// CgroupOptions configures Reaper.UseCgroups.
type CgroupOptions struct {
	// Root is the cgroup v2 directory to build the tree in; "" means the
	// process's own cgroup on the cgroup2 mount.
	Root string
	// MoveSelf moves the whole process into Root/…/daemon, so that the
	// commands' limits and cgroup.kill never include the runtime.
	MoveSelf bool
	// PidsHeadroom is how many tasks are kept for the runtime: with a pids
	// controller, commands get pids.max = (nearest limit) - PidsHeadroom.
	// 0 means DefaultPidsHeadroom.
	PidsHeadroom int64
}

// cgroupTree is the runtime's own cgroup v2 tree. Its fields are written by
// UseCgroups before any Start sees the tree and never change afterwards, except
// lingering and doomed (guarded by mu) and the runtime's leaf (selfMu).
type cgroupTree struct {
	log      *zap.Logger
	root     string // where the tree was built
	base     string // root/sandbox-runtime-<pid>-<start time>-<rand>
	orig     string // the cgroup the process came from (moved back on Close)
	commands string // base/commands: parent of every command's cgroup

	// The runtime's leaf, when it moved itself: base/daemon, or
	// base/daemon-<N> once it had to move into a fresh one (relocate).
	selfMu   sync.Mutex             // guards daemon and leaves; held by relocate
	daemon   string                 // "" when the process did not move
	leaves   int                    // leaves made so far
	selfLine atomic.Pointer[string] // the "0::…" line /proc/self/cgroup shows in the leaf

	seq seqCounter

	// What buildCgroupTree set up, for rebuild: the controllers enabled
	// for the commands and the pids.max of commands (0: none).
	enabled []string
	pidsMax int64
	buildMu sync.Mutex // serialises rebuild

	mu        sync.Mutex
	lingering []string // command cgroups that still had members when released
	doomed    []string // released command cgroups the worker has yet to remove
	stopped   bool     // the worker is gone: release removes at once

	// pool holds fresh, never used command cgroups, each with its directory
	// open for CLONE_INTO_CGROUP, made by the worker ahead of the requests
	// (mkdir of a cgroup costs tens of µs of kernel work). A cgroup is never
	// reused: a command that ran in one leaves counters (memory.events,
	// pids.peak) a new command must not inherit.
	pool chan pooledCgroup
	wake chan struct{} // kicks the worker (capacity 1)
	quit chan struct{} // closed by remove: the worker ends
	gone chan struct{} // closed by the worker when it has ended

	// memEvents says whether command cgroups have memory.events (a memory
	// controller): 0 not known yet, 1 yes, 2 no. It is fixed once the tree
	// is built (subtree_control does not change), so the first command's
	// cgroup answers for all, and neither Start nor the reap has to try a
	// file that is not there.
	memEvents atomic.Int32
}

// seqCounter names command cgroups c1, c2, … (guarded by its own mutex).
type seqCounter struct {
	mu sync.Mutex
	n  uint64
}

func (s *seqCounter) next() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return s.n
}

// cmdCgroup is the cgroup of one command.
type cmdCgroup struct {
	dir     string
	mem     bool // it has memory.events
	removed bool // rmdir'd already (at the leader's reap); guarded by the Process's sigMu
}

// pooledCgroup is an empty command cgroup made ahead of its command, and its
// directory's open fd.
type pooledCgroup struct {
	dir string
	fd  int
}

// poolSize is how many empty command cgroups the worker keeps ready: enough
// for a burst of concurrent creates (8 clients) between two refills.
const poolSize = 8

// UseCgroups builds the runtime's cgroup v2 tree and makes every later Start
// put its command into a cgroup of its own. It must be called before the first
// Start. On failure (no cgroup2 mount, no cgroup.kill, a read-only tree) nothing
// is left behind, the Reaper stays in process-group mode, and the error says
// why; Isolation reports it either way.
//
// Controllers: pids and memory are enabled for the commands where the parent
// offers them (best effort: a parent with processes of its own refuses). With
// pids, Root/…/commands gets pids.max = min(nearest pids.max, pid_max) -
// PidsHeadroom, so a fork storm stops short of the runtime's own threads.
func (r *Reaper) UseCgroups(opts CgroupOptions) error {
	t, reason, err := buildCgroupTree(r.log, opts)
	r.forkMu.Lock()
	defer r.forkMu.Unlock()
	r.iso.PidfdSignals = pidfdGroupSignals()
	if err != nil {
		r.iso.Mode, r.iso.Reason = ModeThreads, reason
		return err
	}
	t.startWorker()
	r.cg = t
	r.iso.Mode, r.iso.Reason, r.iso.Cgroup = ModeCgroup, reason, t.base
	r.iso.Controllers = t.controllers()
	r.iso.CommandsPidsMax = readInt(filepath.Join(t.commands, "pids.max"))
	return nil
}

// Isolation reports the mode in force.
func (r *Reaper) Isolation() Isolation {
	r.forkMu.RLock()
	defer r.forkMu.RUnlock()
	iso := r.iso
	if iso.Mode == "" {
		iso.Mode, iso.Reason = ModeThreads, "cgroups not requested"
		iso.PidfdSignals = pidfdGroupSignals()
	}
	iso.Controllers = append([]string(nil), iso.Controllers...)
	return iso
}

func buildCgroupTree(log *zap.Logger, opts CgroupOptions) (*cgroupTree, string, error) {
	mount, own, err := ownCgroup2()
	if err != nil {
		return nil, "no cgroup v2 mount: " + err.Error(), err
	}
	root := opts.Root
	if root == "" {
		root = filepath.Join(mount, own)
	}
	t := &cgroupTree{
		log:      log,
		root:     root,
		base:     filepath.Join(root, fmt.Sprintf("sandbox-runtime-%d-%d-%d-%08x", os.Getpid(), startTime(os.Getpid()), pidNamespace(), rand.Uint32())),
		commands: "",
		orig:     filepath.Join(mount, own),
	}
	removeStale(root)
	if err := os.Mkdir(t.base, 0o755); err != nil {
		return nil, fmt.Sprintf("cgroup tree %s is not writable: %v", root, errnoOf(err)), err
	}
	fail := func(what string, err error) (*cgroupTree, string, error) {
		t.remove()
		return nil, fmt.Sprintf("%s: %v", what, err), err
	}
	// The root of a hierarchy has no cgroup.kill; every other cgroup has one
	// from Linux 5.14 on.
	if !fileExists(filepath.Join(t.base, "cgroup.kill")) {
		return fail("no cgroup.kill in "+t.base, errors.New("cgroup.kill needs Linux 5.14+"))
	}
	if opts.MoveSelf {
		d := filepath.Join(t.base, "daemon")
		if err := os.Mkdir(d, 0o755); err != nil {
			return fail("creating "+d, err)
		}
		t.daemon, t.leaves = d, 1
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
			return fail("moving the runtime into "+d, err)
		}
		t.noteSelf()
	}
	if err := t.makeCommands(); err != nil {
		return fail("creating "+t.commands, err)
	}
	reason := "cgroup v2 tree " + t.root + " is writable"
	if containsString(t.enabled, "pids") {
		reason += t.limitPids(mount, opts.PidsHeadroom)
	} else {
		reason += "; no pids controller here, so the runtime keeps threads made up front as its headroom"
	}
	return t, reason, nil
}

// makeCommands creates the commands' parent cgroup with the pids and
// memory controllers the root offers enabled down to it: root → base →
// commands → c<N>.
func (t *cgroupTree) makeCommands() error {
	want := []string{}
	avail := strings.Fields(readString(filepath.Join(t.root, "cgroup.controllers")))
	for _, c := range []string{"pids", "memory"} {
		for _, a := range avail {
			if a == c {
				want = append(want, c)
			}
		}
	}
	var enabled []string
	for _, c := range want {
		if enableController(t.root, c) && enableController(t.base, c) {
			enabled = append(enabled, c)
		}
	}
	t.commands = filepath.Join(t.base, "commands")
	if err := os.Mkdir(t.commands, 0o755); err != nil {
		return err
	}
	for _, c := range enabled {
		enableController(t.commands, c)
	}
	t.enabled = enabled
	return nil
}

// limitPids sets the commands' pids.max to the nearest limit above them
// (or pid_max) less headroom (<= 0: DefaultPidsHeadroom), and says so in
// the words it returns for the tree's reason ("" when no limit was set).
func (t *cgroupTree) limitPids(mount string, headroom int64) string {
	if headroom <= 0 {
		headroom = DefaultPidsHeadroom
	}
	limit := nearestPidsMax(t.root, mount)
	if pm := readInt("/proc/sys/kernel/pid_max"); pm > 0 && (limit <= 0 || pm < limit) {
		limit = pm
	}
	if limit <= 0 {
		return ""
	}
	max := max(limit-headroom, 1)
	if err := writeFile(filepath.Join(t.commands, "pids.max"), strconv.FormatInt(max, 10)); err != nil {
		t.log.Warn("cannot set pids.max for commands", zap.Error(err))
		return ""
	}
	t.pidsMax = max
	return fmt.Sprintf("; commands are limited to %d tasks, %d kept for the runtime", max, headroom)
}

// controllers lists what is enabled for the commands' cgroups.
func (t *cgroupTree) controllers() []string {
	return strings.Fields(readString(filepath.Join(t.commands, "cgroup.subtree_control")))
}

// enableController writes +c to dir/cgroup.subtree_control unless it is
// already there, and reports whether c is enabled afterwards.
func enableController(dir, c string) bool {
	if containsString(strings.Fields(readString(filepath.Join(dir, "cgroup.subtree_control"))), c) {
		return true
	}
	return writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+"+c) == nil
}

// nearestPidsMax returns the smallest finite pids.max of dir and its
// ancestors up to mount, or 0 when there is none.
func nearestPidsMax(dir, mount string) int64 {
	var best int64
	for d := dir; strings.HasPrefix(d, mount); d = filepath.Dir(d) {
		if v := readInt(filepath.Join(d, "pids.max")); v > 0 && (best == 0 || v < best) {
			best = v
		}
		if d == mount || d == "/" {
			break
		}
	}
	return best
}

// newCommand hands out the cgroup of the next command, opened for
// CLONE_INTO_CGROUP: a fresh one from the pool, or one made now when the pool
// is empty (a burst, or the worker is behind). The caller closes fd.
func (t *cgroupTree) newCommand() (*cmdCgroup, int, error) {
	var pc pooledCgroup
	select {
	case pc = <-t.pool:
		// Refill in batches: one wake-up of the worker per half pool,
		// not one per command.
		if len(t.pool) <= poolSize/2 {
			t.kick()
		}
	default:
		t.kick()
		var err error
		pc, err = t.makeCgroup()
		if os.IsNotExist(err) && t.rebuild("the command cgroups' parent was removed") == nil {
			pc, err = t.makeCgroup()
		}
		if err != nil {
			return nil, -1, err
		}
	}
	return &cmdCgroup{dir: pc.dir, mem: t.memEvents.Load() == 1}, pc.fd, nil
}

// replacePool discards every pre-made cgroup of the pool (a cgroup.kill of
// their parent, or a command that removed some, has made them unusable; which
// ones cannot be told from here) and has the worker make new ones. why is
// logged.
func (t *cgroupTree) replacePool(why string) {
	n := 0
	for {
		select {
		case pc := <-t.pool:
			unix.Close(pc.fd)
			t.release(&cmdCgroup{dir: pc.dir})
			n++
			continue
		default:
		}
		break
	}
	t.kick()
	t.log.Warn("the pre-made command cgroups were replaced", zap.String("reason", why), zap.Int("discarded", n))
}

// makeCgroup creates the next command cgroup, c<N>, and opens it. The first
// one made tells whether command cgroups have memory.events.
func (t *cgroupTree) makeCgroup() (pooledCgroup, error) {
	dir := filepath.Join(t.commands, "c"+strconv.FormatUint(t.seq.next(), 10))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return pooledCgroup{}, err
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Rmdir(dir)
		return pooledCgroup{}, os.NewSyscallError("open", err)
	}
	if t.memEvents.Load() == 0 {
		mem := int32(2)
		if fileExists(filepath.Join(dir, "memory.events")) {
			mem = 1
		}
		t.memEvents.CompareAndSwap(0, mem)
	}
	return pooledCgroup{dir: dir, fd: fd}, nil
}

// startWorker starts the goroutine that fills the pool and removes released
// cgroups, off the path of the requests. It waits on its channels only (no
// timer), so an idle runtime is not woken by it.
func (t *cgroupTree) startWorker() {
	t.pool = make(chan pooledCgroup, poolSize)
	t.wake = make(chan struct{}, 1)
	t.quit = make(chan struct{})
	t.gone = make(chan struct{})
	go t.work()
	t.kick()
}

// kick wakes the worker unless a wake-up is already pending.
func (t *cgroupTree) kick() {
	if t.wake == nil {
		return
	}
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *cgroupTree) work() {
	defer close(t.gone)
	for {
		select {
		case <-t.quit:
			return
		case <-t.wake:
		}
		t.removeDoomed()
		for len(t.pool) < cap(t.pool) {
			select {
			case <-t.quit:
				return
			default:
			}
			pc, err := t.makeCgroup()
			if err != nil {
				// Start makes its own and logs why it cannot; try again
				// at the next command.
				t.log.Debug("cannot fill the command cgroup pool", zap.Error(err))
				break
			}
			t.pool <- pc // only the worker sends, and there is room
		}
	}
}

// removeDoomed removes the released cgroups; one that still has members
// lingers until the reaper's sweep finds it empty.
func (t *cgroupTree) removeDoomed() {
	t.mu.Lock()
	doomed := t.doomed
	t.doomed = nil
	t.mu.Unlock()
	var busy []string
	for _, d := range doomed {
		if err := rmTree(d); err != nil {
			busy = append(busy, d)
		}
	}
	if len(busy) > 0 {
		t.mu.Lock()
		t.lingering = append(t.lingering, busy...)
		t.mu.Unlock()
	}
}

// stopWorker ends the worker and removes what it held: the pool's unused
// cgroups and the released ones it had not removed yet. Later releases
// remove at once.
func (t *cgroupTree) stopWorker() {
	t.mu.Lock()
	already := t.stopped
	t.stopped = true
	t.mu.Unlock()
	if already || t.quit == nil {
		return
	}
	close(t.quit)
	<-t.gone
	for {
		select {
		case pc := <-t.pool:
			unix.Close(pc.fd)
			unix.Rmdir(pc.dir)
			continue
		default:
		}
		break
	}
	t.removeDoomed()
}

// hasMemEvents reports whether command cgroups are known to have
// memory.events, so that a command's OOM kills are counted by its own cgroup.
func (t *cgroupTree) hasMemEvents() bool { return t != nil && t.memEvents.Load() == 1 }

// kill writes cgroup.kill: SIGKILL to every process of the cgroup, including
// those that left the process group (setsid).
func (c *cmdCgroup) kill() error {
	return writeFile(filepath.Join(c.dir, "cgroup.kill"), "1")
}

// populated reports whether any process is left in the cgroup.
func (c *cmdCgroup) populated() bool {
	var buf [256]byte
	b, _ := readSmall(c.dir+"/cgroup.events", buf[:])
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\n"))
		if v, ok := bytes.CutPrefix(line, []byte("populated ")); ok {
			return string(bytes.TrimSpace(v)) != "0"
		}
	}
	return false
}

// oomKills returns the oom_kill counter of the cgroup's memory.events, and
// whether the cgroup has one (a memory controller).
func (c *cmdCgroup) oomKills() (int64, bool) {
	if !c.mem {
		return 0, false
	}
	var buf [512]byte
	b, err := readSmall(c.dir+"/memory.events", buf[:])
	if err != nil {
		return 0, false
	}
	return counter(b, "oom_kill"), true
}

// readSmall reads a small kernel file into buf with plain system calls: no
// *os.File (whose finalizer and poller registration, since cgroup files are
// pollable, cost more than the read) on the path of every command. It
// returns what fits in buf.
func readSmall(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n := 0
	for n < len(buf) {
		k, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if k == 0 {
			break
		}
		n += k
	}
	return buf[:n], nil
}

// release hands the cgroup to the worker for removal (batched, off the
// path of the requests), or removes it at once when the worker is gone; one
// rmdir'd at the leader's reap already (removed) needs nothing. One that still has members is
// kept for a later try.
func (t *cgroupTree) release(c *cmdCgroup) {
	if c.removed {
		return
	}
	t.mu.Lock()
	if !t.stopped && t.quit != nil {
		// Removed in batches too: at the worker's next refill, or now when
		// half a pool is waiting (an empty cgroup costs nothing meanwhile,
		// and Close removes what is left).
		t.doomed = append(t.doomed, c.dir)
		batch := len(t.doomed) >= poolSize/2
		t.mu.Unlock()
		if batch {
			t.kick()
		}
		return
	}
	t.mu.Unlock()
	if err := rmTree(c.dir); err == nil {
		return
	}
	t.mu.Lock()
	t.lingering = append(t.lingering, c.dir)
	t.mu.Unlock()
}

// sweep removes lingering command cgroups whose last member has gone.
func (t *cgroupTree) sweep() {
	t.mu.Lock()
	defer t.mu.Unlock()
	kept := t.lingering[:0]
	for _, d := range t.lingering {
		if err := rmTree(d); err != nil {
			kept = append(kept, d)
		}
	}
	t.lingering = kept
}

// remove takes the tree down as far as it can: lingering command cgroups
// whose members are gone, the commands parent, the runtime's leaf (after
// moving the process back where it came from) and the base.
//
// When command cgroups still have members (a setsid escapee, a zombie not yet
// reaped by its new parent), the empty daemon leaf is kept: it marks the tree
// as stale for the next runtime's removeStale.
func (t *cgroupTree) remove() {
	t.stopWorker()
	t.checkSelf() // out of the commands' cgroups before their cgroup.kill
	if t.commands != "" {
		// What is left in the commands' cgroups has outlived its command
		// (a background job, a setsid escapee of a finished command):
		// the runtime that started it is ending, so it ends too.
		if err := writeFile(filepath.Join(t.commands, "cgroup.kill"), "1"); err == nil {
			waitUnpopulated(t.commands, 2*time.Second)
		}
	}
	t.sweep()
	commandsGone := true
	if t.commands != "" {
		if err := rmTree(t.commands); err != nil {
			commandsGone = false
			t.log.Warn("command cgroups still have members; left in place", zap.String("cgroup", t.commands))
		}
	}
	t.selfMu.Lock()
	daemon := t.daemon
	t.selfMu.Unlock()
	if daemon != "" {
		if err := writeFile(filepath.Join(t.orig, "cgroup.procs"), strconv.Itoa(os.Getpid())); err == nil && commandsGone {
			unix.Rmdir(daemon)
		}
	}
	unix.Rmdir(t.base)
}

// noteSelf records the line /proc/self/cgroup shows now, in the leaf, for
// checkSelf. selfMu is held (or the tree is not shared yet).
func (t *cgroupTree) noteSelf() {
	var buf [4096]byte
	if b, err := readSmall("/proc/self/cgroup", buf[:]); err == nil {
		line := unifiedLine(b)
		t.selfLine.Store(&line)
	}
}

// unifiedLine returns the "0::…" line of a /proc/<pid>/cgroup text.
func unifiedLine(b []byte) string {
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\n"))
		if bytes.HasPrefix(line, []byte("0::")) {
			return string(line)
		}
	}
	return ""
}

// checkSelf is called before every command's fork (one read of
// /proc/self/cgroup, a few µs). A command that shares the runtime's uid can
// write the cgroup.procs of its own cgroup with the runtime's pid (PID 1):
// the runtime then sits among that command's processes, under its limits,
// and in reach of its cgroup.kill (after which the kernel kills every
// child the runtime clones into another cgroup: killedAtFork). When the
// runtime is no longer in its leaf, it moves into a fresh one.
func (t *cgroupTree) checkSelf() {
	if t == nil {
		return
	}
	want := t.selfLine.Load()
	if want == nil {
		return
	}
	var buf [4096]byte
	b, err := selfCgroup.read(buf[:])
	if err != nil || unifiedLine(b) == *want {
		return
	}
	t.relocate("the runtime was moved out of its cgroup leaf (into "+strings.TrimPrefix(unifiedLine(b), "0::")+"), by a command sharing its uid", false)
}

// selfCgroup is /proc/self/cgroup opened once per process (one fd, never
// closed: the file describes the process, whatever Reaper or tree asks):
// every fork reads it (checkSelf), and a pread of an open file costs no path
// walk of /proc. The kernel regenerates the text at each read from offset 0,
// so a move of the runtime shows at the next read.
var selfCgroup selfCgroupFile

type selfCgroupFile struct {
	once sync.Once
	fd   int // -1 when it could not be opened: read opens the path each time
}

func (f *selfCgroupFile) read(buf []byte) ([]byte, error) {
	f.once.Do(func() {
		fd, err := unix.Open("/proc/self/cgroup", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			fd = -1
		}
		f.fd = fd
	})
	if f.fd < 0 {
		return readSmall("/proc/self/cgroup", buf)
	}
	n := 0
	for n < len(buf) {
		k, err := unix.Pread(f.fd, buf[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if k == 0 {
			break
		}
		n += k
	}
	return buf[:n], nil
}

// rebuild makes the tree's base and commands cgroups again where they are
// gone, with the controllers and the pids.max they had. A command sharing
// the runtime's uid can remove them once they are empty (after moving the
// runtime out of its leaf), and so can another runtime's removeStale that
// took the tree for a dead runtime's. why is logged when anything was made.
func (t *cgroupTree) rebuild(why string) error {
	t.buildMu.Lock()
	defer t.buildMu.Unlock()
	var made []string
	for _, d := range []string{t.base, t.commands} {
		if fileExists(d) {
			continue
		}
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			t.log.Error("cannot make the runtime's cgroup tree again", zap.String("reason", why), zap.String("cgroup", d), zap.Error(err))
			return err
		}
		made = append(made, d)
		if d == t.base {
			for _, c := range t.enabled {
				enableController(d, c)
			}
		}
	}
	if len(made) == 0 {
		return nil
	}
	if containsString(made, t.commands) {
		for _, c := range t.enabled {
			enableController(t.commands, c)
		}
		if t.pidsMax > 0 {
			writeFile(filepath.Join(t.commands, "pids.max"), strconv.FormatInt(t.pidsMax, 10))
		}
	}
	t.log.Warn("the runtime's cgroup tree was gone and was made again", zap.String("reason", why), zap.Strings("made", made))
	return nil
}

// relocate moves the runtime into a fresh leaf, base/daemon-<N>, and
// removes the old one if it is empty: a leaf whose cgroup.kill was written,
// or that a command moved the runtime out of, is not trusted again. Unless
// always, nothing is done when the runtime is in its leaf after all (another
// Start moved it meanwhile). The reason is logged with the move.
func (t *cgroupTree) relocate(reason string, always bool) error {
	t.selfMu.Lock()
	defer t.selfMu.Unlock()
	if t.daemon == "" {
		return errors.New("the runtime did not move into a cgroup of its own")
	}
	var buf [4096]byte
	if b, err := readSmall("/proc/self/cgroup", buf[:]); err == nil && !always {
		if want := t.selfLine.Load(); want != nil && unifiedLine(b) == *want {
			return nil // another Start moved it back meanwhile
		}
	}
	old := t.daemon
	t.leaves++
	d := filepath.Join(t.base, "daemon-"+strconv.Itoa(t.leaves))
	err := os.Mkdir(d, 0o755)
	if os.IsNotExist(err) {
		// The tree itself is gone (another runtime took it for a dead
		// one's while this runtime was out of its leaf, or a command
		// removed it): made again, not given up for process groups.
		if err = t.rebuild(reason); err == nil {
			err = os.Mkdir(d, 0o755)
		}
	}
	if err != nil {
		t.log.Error("cannot make a fresh cgroup leaf for the runtime", zap.String("reason", reason), zap.String("cgroup", d), zap.Error(err))
		return err
	}
	if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
		unix.Rmdir(d)
		t.log.Error("cannot move the runtime into a fresh cgroup leaf", zap.String("reason", reason), zap.String("cgroup", d), zap.Error(err))
		return err
	}
	t.daemon = d
	t.noteSelf()
	unix.Rmdir(old) // empty now, unless a command moved a process of its own in
	t.log.Warn("the runtime moved into a fresh cgroup leaf", zap.String("reason", reason),
		zap.String("old", old), zap.String("cgroup", d))
	return nil
}

// killedAtFork reports whether the child pid (not reaped: the caller holds
// forkMu's read lock) died by SIGKILL without having run the program. The
// kernel does this to a child cloned with CLONE_INTO_CGROUP when a
// cgroup.kill was written of the runtime's own cgroup or of the target's.
//
// No race: ForkExec returns once the child has exec'd or is past releasing
// its memory on the way out (the exec-status pipe closes on exec, or when
// the exiting child drops its files, which comes after its mm is gone). So
// a child that is not a zombie yet has an mm of its own (it exec'd) or is
// exiting; the exiting one is waited for (bounded) and judged as a zombie:
// SIGKILL, and still named as the runtime (comm) when it died. The normal
// path costs two system calls and no /proc path: a waitid (a zombie that
// did not die of SIGKILL, like a fast `echo`, is judged by it alone) and
// the mm probe (hasMM). A command that is the runtime's own binary (same
// comm) and is SIGKILLed before the check would be taken for one that never
// ran, and forked once more; nothing else can be.
func killedAtFork(pid int) bool {
	zombie, sigkilled := zombieState(pid)
	if !zombie {
		if hasMM(pid) || !waitExited(pid, exitWait) {
			return false // it exec'd (or is not ours to judge)
		}
		_, sigkilled = zombieState(pid)
	}
	if !sigkilled {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state … exit_code (the last field, in waitpid form)
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return false
	}
	comm := string(b[open+1 : end])
	fields := strings.Fields(string(b[end+1:]))
	if len(fields) < 2 || fields[0] != "Z" {
		return false
	}
	code, err := strconv.Atoi(fields[len(fields)-1])
	return err == nil && code == int(unix.SIGKILL) && comm == selfComm()
}

// exitWait bounds the wait for a child that is exiting to become a zombie
// (microseconds, unless the machine is starved).
const exitWait = 2 * time.Second

// zombieNow reports whether the child pid has exited (left for the reaper:
// WNOWAIT).
func zombieNow(pid int) bool {
	zombie, _ := zombieState(pid)
	return zombie
}

// cldKilled is si_code CLD_KILLED (linux/signal.h): the child was killed
// by a signal (x/sys/unix does not name it).
const cldKilled = 2

// zombieState is zombieNow and, for a zombie, whether SIGKILL ended it
// (si_code CLD_KILLED, si_status SIGKILL).
func zombieState(pid int) (zombie, sigkilled bool) {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if err != nil || info.Signo == 0 {
		return false, false
	}
	return true, info.Code == cldKilled && siginfoStatus(&info) == int32(unix.SIGKILL)
}

// hasMM reports whether the process has an address space. The probe is a
// 1-byte process_vm_readv of its address 0: ESRCH when it has no mm (an
// exiting process that released it), EFAULT (page 0 is never mapped) when
// it has one. Any other answer (EPERM: a non-dumpable or setuid program, or
// a seccomp filter; ENOSYS) is judged by the first field of
// /proc/<pid>/statm, 0 once the mm is gone; an unreadable file counts as
// yes (nothing to judge by).
func hasMM(pid int) bool {
	var b [1]byte
	local := []unix.Iovec{{Base: &b[0], Len: 1}}
	remote := []unix.RemoteIovec{{Base: 0, Len: 1}}
	_, err := unix.ProcessVMReadv(pid, local, remote, 0)
	switch err {
	case unix.ESRCH:
		return false
	case unix.EFAULT, nil:
		return true
	}
	return hasMMStatm(pid)
}

// hasMMStatm is hasMM by /proc/<pid>/statm.
func hasMMStatm(pid int) bool {
	var buf [128]byte
	b, err := readSmall("/proc/"+strconv.Itoa(pid)+"/statm", buf[:])
	if err != nil {
		return true
	}
	size, _, _ := bytes.Cut(b, []byte(" "))
	return string(size) != "0"
}

// waitExited waits at most d for the exiting child pid to become a zombie:
// poll on a pidfd (readable once it has exited), else waitid checks.
func waitExited(pid int, d time.Duration) bool {
	if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		deadline := time.Now().Add(d)
		for {
			n, err := unix.Poll(fds, int(time.Until(deadline)/time.Millisecond)+1)
			if n > 0 {
				return zombieNow(pid)
			}
			if err != unix.EINTR || time.Now().After(deadline) {
				return false
			}
		}
	}
	deadline := time.Now().Add(d)
	for !zombieNow(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Microsecond) // no pidfd: nothing to wait on
	}
	return true
}

var (
	selfCommOnce sync.Once
	selfCommName string
)

// selfComm is the runtime's own comm (what a child is named until it execs).
func selfComm() string {
	selfCommOnce.Do(func() { selfCommName = readString("/proc/self/comm") })
	return selfCommName
}

// removeStale removes the trees of runtimes that are gone (killed before
// they could clean up). A tree is sandbox-runtime-<pid>-<start>-<ns>-<rand>:
// <start> is the start time of process <pid> (clock ticks since boot,
// /proc/<pid>/stat) and <ns> the inode of its pid namespace. Pid and start
// time are judged only within the same pid namespace: its owner is alive
// when a process <pid> with that start time is (a PID-1 runtime's tree names
// pid 1, which is always alive: the start time tells a restarted runtime
// from the one that made the tree). A tree of another pid namespace tells
// nothing by its name here (the pid 1 there is not the pid 1 here), and is
// judged by its daemon leaves alone. Older trees are
// sandbox-runtime-<pid>-<start>-<rand> (judged by pid and start time) and
// sandbox-runtime-<pid>-<rand> (by the pid alone; by the leaves when it is 1).
//
// A tree whose owner is not alive here is stale when none of its daemon
// leaves (daemon, daemon-<N>) has a process and either it has one (its
// runtime moved in) or it is older than staleUnmovedAge (a runtime that
// did not move itself, e.g. a test). A process in another pid namespace
// shows as 0 in cgroup.procs, so a live runtime there keeps its tree while
// it is in its leaf; one that a command moved out loses it, and rebuilds it
// (cgroupTree.rebuild) at its next command. One that started under
// staleBuildAge ago may still be moving into its leaf and is left too.
// rmdir only ever removes empty cgroups, so a command cgroup that still has
// processes stays in any case.
func removeStale(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "sandbox-runtime-") {
			continue
		}
		base := filepath.Join(root, e.Name())
		if ownerAlive(e.Name()) {
			continue
		}
		leaves, occupied := daemonLeaves(base)
		if occupied {
			continue // its runtime is alive in another pid namespace
		}
		if len(leaves) == 0 {
			info, serr := os.Stat(base)
			if serr != nil || time.Since(info.ModTime()) < staleUnmovedAge {
				continue
			}
		}
		// Depth first (a command may have made cgroups of its own); a
		// cgroup that still has processes stays, and then so do the
		// daemon leaves that mark the tree as a dead runtime's.
		if err := rmTree(filepath.Join(base, "commands")); err != nil {
			continue
		}
		for _, l := range leaves {
			unix.Rmdir(l)
		}
		unix.Rmdir(base)
	}
}

// daemonLeaves lists the daemon leaves of a tree and reports whether any
// has a process (or cannot be read).
func daemonLeaves(base string) (leaves []string, occupied bool) {
	ents, err := os.ReadDir(base)
	if err != nil {
		return nil, true
	}
	for _, e := range ents {
		if !e.IsDir() || (e.Name() != "daemon" && !strings.HasPrefix(e.Name(), "daemon-")) {
			continue
		}
		l := filepath.Join(base, e.Name())
		leaves = append(leaves, l)
		procs, err := os.ReadFile(filepath.Join(l, "cgroup.procs"))
		if err != nil || len(bytes.TrimSpace(procs)) > 0 {
			occupied = true
		}
	}
	return leaves, occupied
}

// rmTree removes the cgroup dir and every cgroup below it, deepest first
// (rmdir removes only a cgroup without children and processes). Gone
// already is success; the first cgroup that cannot go is the error. It
// tries the rmdir first and reads the directory only when that fails with
// EBUSY (children, or members): a command's cgroup rarely has children.
func rmTree(dir string) error {
	err := unix.Rmdir(dir)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EBUSY {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	sub := false
	for _, e := range ents {
		if e.IsDir() {
			sub = true
			if err := rmTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if !sub {
		return unix.EBUSY // members, no children: nothing else to try
	}
	if err := unix.Rmdir(dir); err != nil && err != unix.ENOENT {
		return err
	}
	return nil
}

// removeIfEmpty removes the command cgroup when it holds nothing, and
// reports whether it has gone: EBUSY says it is populated (or has cgroups
// of its own, which rmTree takes care of later), without reading
// cgroup.events.
func (c *cmdCgroup) removeIfEmpty() bool {
	switch err := unix.Rmdir(c.dir); err {
	case nil, unix.ENOENT:
		c.removed = true
		return true
	default:
		return false
	}
}

// waitUnpopulated waits (at most d) until the cgroup dir and its subtree
// hold no process: `populated 0` in its cgroup.events.
func waitUnpopulated(dir string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil || bytes.Contains(b, []byte("populated 0")) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond) // cgroup.events has no wake-up the runtime waits on here
	}
}

// staleUnmovedAge is how old a tree without a daemon leaf must be before
// another runtime removes it (its owner may be in another pid namespace).
const staleUnmovedAge = 10 * time.Minute

// staleBuildAge: a runtime moves into its leaf within milliseconds of its
// start; a tree whose owner started less than this ago is left alone.
const staleBuildAge = 5 * time.Second

// ownerAlive reports whether the owner named by a tree
// (sandbox-runtime-<pid>-<start>-<ns>-<rand>, or the older
// sandbox-runtime-<pid>-<start>-<rand> and sandbox-runtime-<pid>-<rand>) is
// a live process of this pid namespace, or may be a runtime that started
// under staleBuildAge ago (start times count from boot in every pid
// namespace).
func ownerAlive(name string) bool {
	parts := strings.Split(strings.TrimPrefix(name, "sandbox-runtime-"), "-")
	if len(parts) < 2 {
		return false
	}
	pid, err := strconv.Atoi(parts[0])
	if err != nil || pid <= 0 {
		return false
	}
	if len(parts) == 2 {
		// The older names: pid 1 is always alive, so it tells nothing
		// (its daemon leaves still keep a live runtime's tree).
		return pid != 1 && unix.Kill(pid, 0) != unix.ESRCH
	}
	start, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return false
	}
	here := true
	if len(parts) >= 4 {
		// Another pid namespace's owner cannot be looked up here: only
		// its daemon leaves (and its age) tell.
		ns, err := strconv.ParseUint(parts[2], 10, 64)
		here = err == nil && ns == pidNamespace()
	}
	if st := startTime(pid); here && st != 0 && st == start {
		return true
	}
	now := uptimeTicks()
	return now == 0 || now < start+uint64(staleBuildAge/time.Second)*clockTicks
}

var (
	pidNSOnce sync.Once
	pidNSIno  uint64
)

// pidNamespace returns the inode of the runtime's pid namespace (the
// number in /proc/self/ns/pid, "pid:[N]"), or 0.
func pidNamespace() uint64 {
	pidNSOnce.Do(func() {
		var st unix.Stat_t
		if unix.Stat("/proc/self/ns/pid", &st) == nil {
			pidNSIno = st.Ino
		}
	})
	return pidNSIno
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's start time: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// startTime returns the start time of pid in clock ticks since boot (field
// 22 of /proc/<pid>/stat), or 0.
func startTime(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return 0
	}
	f := strings.Fields(string(b[end+1:])) // f[0] is field 3 (state)
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// uptimeTicks is the time since boot in clock ticks, or 0.
func uptimeTicks() uint64 {
	up, _, _ := strings.Cut(readString("/proc/uptime"), " ")
	f, err := strconv.ParseFloat(up, 64)
	if err != nil {
		return 0
	}
	return uint64(f * clockTicks)
}

// ownCgroup2 returns the cgroup2 mount point and the process's path in it.
func ownCgroup2() (mount, path string, err error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path = p
		}
	}
	if path == "" {
		return "", "", errors.New("no unified hierarchy in /proc/self/cgroup")
	}
	mount, root := findMount(func(fstype, opts string) bool { return fstype == "cgroup2" })
	if mount == "" {
		return "", "", errors.New("no cgroup2 file system in /proc/self/mountinfo")
	}
	return mount, relTo(path, root), nil
}

// findMount returns the mount point and root of the first mount in
// /proc/self/mountinfo that match accepts (by file system type and super
// options).
func findMount(match func(fstype, superOpts string) bool) (mount, root string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+3 > len(fields) {
			continue
		}
		if match(fields[sep+1], fields[len(fields)-1]) {
			return fields[4], fields[3]
		}
	}
	return "", ""
}

// relTo strips a bind mount's root from a cgroup path.
func relTo(path, root string) string {
	if root != "/" && strings.HasPrefix(path, root) {
		path = strings.TrimPrefix(path, root)
	}
	if path == "" {
		path = "/"
	}
	return path
}

// v1Dir returns the directory of the process's cgroup in the v1 hierarchy of
// controller, or "".
func v1Dir(controller string) string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	var path string
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && containsString(strings.Split(parts[1], ","), controller) {
			path = parts[2]
		}
	}
	if path == "" {
		return ""
	}
	mount, root := findMount(func(fstype, opts string) bool {
		return fstype == "cgroup" && containsString(strings.Split(opts, ","), controller)
	})
	if mount == "" {
		return ""
	}
	return filepath.Join(mount, relTo(path, root))
}

// oomBaseline is what a command's OOM attribution compares against: the OOM
// kill counter of the runtime's memory cgroup (or /proc/vmstat) at start.
type oomBaseline struct {
	file  string // "" when there is no counter to read
	count int64
}

var (
	oomSourceOnce sync.Once
	oomSource     string // the file with the runtime's oom_kill counter
)

// oomCounterFile finds, once, where the OOM kills that can hit the runtime's
// commands are counted: memory.events of its cgroup v2, memory.oom_control of
// its v1 memory cgroup, else the machine-wide /proc/vmstat.
func oomCounterFile() string {
	oomSourceOnce.Do(func() {
		if mount, own, err := ownCgroup2(); err == nil {
			if f := filepath.Join(mount, own, "memory.events"); fileExists(f) {
				oomSource = f
				return
			}
		}
		if d := v1Dir("memory"); d != "" {
			if f := filepath.Join(d, "memory.oom_control"); fileExists(f) {
				oomSource = f
				return
			}
		}
		if fileExists("/proc/vmstat") {
			oomSource = "/proc/vmstat"
		}
	})
	return oomSource
}

// vmstatBufs holds buffers for the OOM counter files (/proc/vmstat is ~5 KiB).
var vmstatBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

func newOOMBaseline() oomBaseline {
	f := oomCounterFile()
	if f == "" {
		return oomBaseline{}
	}
	buf := vmstatBufs.Get().(*[]byte)
	defer vmstatBufs.Put(buf)
	b, _ := readSmall(f, *buf)
	return oomBaseline{file: f, count: counter(b, "oom_kill")}
}

// rose reports whether the counter grew since the baseline was taken.
func (o oomBaseline) rose() bool {
	if o.file == "" {
		return false
	}
	buf := vmstatBufs.Get().(*[]byte)
	defer vmstatBufs.Put(buf)
	b, _ := readSmall(o.file, *buf)
	return counter(b, "oom_kill") > o.count
}

// counter returns the value of the "key N" line of a flat-keyed file.
func counter(b []byte, key string) int64 {
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\n"))
		if v, ok := bytes.CutPrefix(line, []byte(key)); ok && len(v) > 0 && v[0] == ' ' {
			n, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			return n
		}
	}
	return 0
}

// limitReport names the process limits in force, for a fork that failed with
// EAGAIN: e.g. "pids.max 400 with 400 in use (cgroup …); pid_max 400 with 398
// tasks in this pid namespace".
func (r *Reaper) limitReport(cg *cmdCgroup) string {
	var parts []string
	pids := func(dir, what string) {
		max := readString(filepath.Join(dir, "pids.max"))
		if max == "" || max == "max" {
			return
		}
		parts = append(parts, fmt.Sprintf("pids.max %s with %s in use (%s %s)", max, readString(filepath.Join(dir, "pids.current")), what, dir))
	}
	if cg != nil {
		pids(filepath.Dir(cg.dir), "cgroup of the commands")
	}
	if mount, own, err := ownCgroup2(); err == nil {
		for d := filepath.Join(mount, own); strings.HasPrefix(d, mount) && d != mount; d = filepath.Dir(d) {
			pids(d, "cgroup")
		}
	}
	if d := v1Dir("pids"); d != "" {
		pids(d, "v1 cgroup")
	}
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NPROC, &rl) == nil && rl.Cur != unix.RLIM_INFINITY && os.Geteuid() != 0 {
		parts = append(parts, fmt.Sprintf("RLIMIT_NPROC %d for uid %d", rl.Cur, os.Geteuid()))
	}
	if pm := readInt("/proc/sys/kernel/pid_max"); pm > 0 {
		parts = append(parts, fmt.Sprintf("pid_max %d with %d tasks in this pid namespace", pm, countTasks()))
	}
	if len(parts) == 0 {
		return "a process limit or memory is exhausted"
	}
	return "process limits: " + strings.Join(parts, "; ")
}

// countTasks counts the threads of every process visible in /proc.
func countTasks() int {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		if tasks, err := os.ReadDir("/proc/" + p.Name() + "/task"); err == nil {
			n += len(tasks)
		}
	}
	return n
}

func readString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// readInt reads a number file; "max", a missing file or garbage give 0.
func readInt(path string) int64 {
	n, err := strconv.ParseInt(readString(path), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// writeFile writes s to an existing (kernel) file in one write.
func writeFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// pidfdSignalProcessGroup is PIDFD_SIGNAL_PROCESS_GROUP (Linux 6.9+): the
// signal goes to the process group of the pidfd's process, found through the
// kernel's struct pid (never a number that could have been recycled).
const pidfdSignalProcessGroup = 1 << 2

var (
	pidfdProbeOnce sync.Once
	pidfdGroupOK   bool
)

// pidfdGroupSignals reports, once per process, whether pidfd_send_signal
// accepts PIDFD_SIGNAL_PROCESS_GROUP (probed with signal 0 on our own pid).
func pidfdGroupSignals() bool {
	pidfdProbeOnce.Do(func() {
		fd, err := unix.PidfdOpen(os.Getpid(), 0)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		// ESRCH: we lead no group, but the flag was understood; an old
		// kernel answers EINVAL.
		err = unix.PidfdSendSignal(fd, 0, nil, pidfdSignalProcessGroup)
		pidfdGroupOK = err == nil || err == unix.ESRCH || err == unix.EPERM
	})
	return pidfdGroupOK
}

// sendGroup sends sig to the group led by the process behind pidfd.
func sendGroup(pidfd int, sig syscall.Signal) error {
	return unix.PidfdSendSignal(pidfd, sig, nil, pidfdSignalProcessGroup)
}
