package runtime

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/procgroup"
	"github.com/sandbox-runtime/sandbox-runtime/ringbuf"
)

// sweepInterval is how often the janitor drops expired handles; lookups also
// sweep, so expiry is exact for clients whatever the interval. The janitor
// only frees memory sooner; 10 s keeps it from waking an idle daemon more than
// once per 10 s (issue 16).
const sweepInterval = 10 * time.Second

// Manager is the table of managed commands. It is safe for concurrent use.
type Manager struct {
	cfg    Config
	log    *zap.Logger
	obs    Observer
	reaper *procgroup.Reaper

	shutdownCh  chan struct{} // closed when Shutdown begins
	killNow     chan struct{} // closed when Shutdown's kill deadline passes (see Shutdown)
	killOnce    sync.Once
	pipeFloor   time.Duration // minPipeDrain; a test lengthens it (supervise.go rule 4)
	stopJanitor chan struct{}
	janitorDone chan struct{}
	wg          sync.WaitGroup // owner goroutines and legacy runs
	adm         *admission     // the places of every class of work (admission.go)
	ctxOnce     sync.Once      // makes ctxs (contexts.go)
	ctxs        *Contexts

	mu        sync.Mutex // guards the fields below
	cmds      map[string]*Command
	order     []*Command // retained commands (starting ones included), oldest first
	tombs     map[string]GoneReason
	tombOrder []string // tombstone ids, oldest first (bounded by cfg.Tombstones)
	closing   bool
	closeOnce sync.Once

	feed  eventLog  // the lifecycle event feed (events.go); its own lock
	ports portWatch // the listening-port poller (ports.go); its own lock
}

// New returns a Manager that starts processes with reaper. The caller owns
// the reaper and must keep it open until Shutdown has returned. Close stops the
// janitor.
func New(cfg Config, reaper *procgroup.Reaper) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m := &Manager{
		cfg:         cfg,
		log:         cfg.Logger.Named("runtime"),
		obs:         cfg.Observer,
		reaper:      reaper,
		shutdownCh:  make(chan struct{}),
		killNow:     make(chan struct{}),
		pipeFloor:   minPipeDrain,
		stopJanitor: make(chan struct{}),
		janitorDone: make(chan struct{}),
		cmds:        map[string]*Command{},
		tombs:       map[string]GoneReason{},
	}
	m.adm = newAdmission(cfg, m.shutdownCh)
	go m.janitor()
	return m, nil
}

// killGrace is the SIGTERM→SIGKILL grace in force (NoKillGrace is 0).
func (m *Manager) killGrace() time.Duration { return max(m.cfg.KillGrace, 0) }

// Config returns the effective configuration (defaults applied; NoKillGrace
// reads as a KillGrace of 0).
func (m *Manager) Config() Config {
	c := m.cfg
	c.KillGrace = m.killGrace()
	return c
}

func (m *Manager) janitor() {
	defer close(m.janitorDone)
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	m.feed.mu.Lock()
	m.feed.tick0 = time.Now()
	m.feed.mu.Unlock()
	for {
		select {
		case <-t.C:
			m.mu.Lock()
			m.sweepLocked()
			m.mu.Unlock()
			m.feed.tick()
		case <-m.stopJanitor:
			return
		}
	}
}

// Close stops the janitor. It does not end commands; use Shutdown for that.
func (m *Manager) Close() {
	m.closeOnce.Do(func() {
		close(m.stopJanitor)
		<-m.janitorDone
	})
}

// Create validates r and starts the command. It answers the status and
// whether a new command was created (false: an idempotent re-post). Its
// steps: normalize, register (or find the command_id's earlier command),
// spawn, evict what is now beyond MaxRetained.
func (m *Manager) Create(r CreateRequest) (Status, bool, error) {
	s, id, err := m.normalize(r)
	if err != nil {
		return Status{}, false, err
	}
	c, fresh, err := m.register(s, id, r.RequestID)
	if err != nil {
		return Status{}, false, err
	}
	if !fresh {
		return c.rePosted(s)
	}
	if r.Hold > 0 {
		if h, err := c.Hold(0, r.Hold); err == nil { // a fresh command's first: never refused
			c.createHold.Store(h)
		}
	}
	if err := m.spawn(c, s); err != nil {
		return Status{}, false, err
	}
	m.mu.Lock()
	m.evictLocked()
	m.mu.Unlock()
	return c.status(false), true, nil // just started: it has read nothing yet
}

// register admits a new command for s under m.mu and enters it in the
// table, state starting (fresh), or returns the command an earlier request
// with the same command_id created (not fresh). A command_id whose command
// was evicted is a GoneError.
func (m *Manager) register(s spec, id, requestID string) (c *Command, fresh bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweepLocked()
	if m.closing {
		return nil, false, errorf(ErrShuttingDown, "the runtime is shutting down")
	}
	if id != "" {
		if c, ok := m.cmds[id]; ok {
			return c, false, nil
		}
		if reason, ok := m.tombs[id]; ok {
			return nil, false, &GoneError{ID: id, Reason: reason}
		}
	} else {
		id = uuid.NewString()
	}
	// Under m.mu: ClassCommand refuses at once when full, never waits.
	running, err := m.adm.admit(context.Background(), ClassCommand, 0)
	if err != nil {
		return nil, false, err
	}
	c = &Command{
		id:        id,
		spec:      s.retained(), // the envs map is for the start only
		m:         m,
		log:       m.log.With(zap.String("command_id", id), zap.String("request_id", requestID)),
		ring:      ringbuf.New(m.cfg.OutputLimit, m.cfg.OutputRecords),
		startedCh: make(chan struct{}),
		endCh:     make(chan struct{}),
		done:      make(chan struct{}),
		state:     StateStarting,
		createdAt: m.cfg.Clock.Now(),
		stdin:     stdinQueue{enabled: s.stdin, closed: !s.stdin, wake: make(chan struct{}, 1), room: make(chan struct{})},
		term:      newTerminal(s),
		running:   running,
	}
	m.cmds[id] = c
	m.order = append(m.order, c)
	m.wg.Add(1)
	return c, true, nil
}

// rePosted answers a re-post of c's command_id with spec s: c's status once
// it has started, or its start error; a different request is a conflict.
func (c *Command) rePosted(s spec) (Status, bool, error) {
	if !c.spec.equal(s) {
		return Status{}, false, errorf(ErrConflict, "command_id %s is in use by a different request", c.id)
	}
	<-c.startedCh
	if c.startErr != nil {
		return Status{}, false, c.startErr
	}
	return c.Status(), false, nil
}

// spawn starts the registered command c's process and its owner goroutine
// (run). When the start fails it undoes register and returns the error.
func (m *Manager) spawn(c *Command, s spec) error {
	t0 := time.Now()
	p, err := m.reaper.Start(procgroup.Spec{
		Argv:  s.argv,
		Env:   s.environ(m.cfg.Env),
		Dir:   s.cwd,
		Stdin: s.stdin,
		PTY:   s.pty.winsize(),
	})
	took := time.Since(t0)
	if err != nil {
		c.startErr = spawnError(err)
		m.mu.Lock()
		m.removeLocked(c)
		m.mu.Unlock()
		c.running()
		m.wg.Done()
		close(c.startedCh)
		m.obs.SpawnFailed(SpawnClassOf(err)) // a 503 resource_exhausted too: class resources
		c.log.Info("command spawn failed", zap.String("argv0", s.argv[0]), zap.Error(err))
		return c.startErr
	}
	c.mu.Lock()
	c.proc = p
	c.state = transition(c.state, evStarted, causeNone)
	c.startedAt = m.cfg.Clock.Now()
	c.mu.Unlock()
	close(c.startedCh)
	m.obs.CommandStarted(took)
	m.feed.commandStarted(c)
	// Debug only: at info a command has one line, at its end, which
	// carries these fields too (finish).
	if ce := c.log.Check(zap.DebugLevel, "command started"); ce != nil {
		ce.Write(zap.String("argv0", s.argv[0]), zap.Int("pid", p.Pid),
			zap.Float64("timeout_seconds", s.timeout.Seconds()), zap.Bool("stdin", s.stdin), zap.Bool("pty", s.pty != nil))
	}
	go c.run(p)
	return nil
}

// evictLocked drops the oldest finished handles while more than MaxRetained
// are held. Running commands are never evicted.
func (m *Manager) evictLocked() {
	for len(m.cmds) > m.cfg.MaxRetained {
		var oldest *Command
		var oldestAt time.Time
		for _, c := range m.order {
			c.mu.Lock()
			fin, at := c.state.Finished(), c.finishedAt
			c.mu.Unlock()
			if fin && (oldest == nil || at.Before(oldestAt)) {
				oldest, oldestAt = c, at
			}
		}
		if oldest == nil {
			return // only possible while spawns are in flight; the next insert retries
		}
		m.dropLocked(oldest, GoneEvicted)
		m.obs.HandleEvicted()
		m.feed.handleDropped(oldest, GoneEvicted, m.cfg.Clock.Now())
	}
}

// sweepLocked drops finished handles whose TTL has passed.
func (m *Manager) sweepLocked() {
	now := m.cfg.Clock.Now()
	for _, c := range slices.Clone(m.order) {
		c.mu.Lock()
		expired := c.state.Finished() && !now.Before(c.finishedAt.Add(m.cfg.ResultTTL))
		c.mu.Unlock()
		if expired {
			m.dropLocked(c, GoneExpired)
			m.obs.HandleExpired()
			m.feed.handleDropped(c, GoneExpired, now)
		}
	}
}

func (m *Manager) dropLocked(c *Command, why GoneReason) {
	m.removeLocked(c)
	m.tombs[c.id] = why
	m.tombOrder = append(m.tombOrder, c.id)
	for len(m.tombOrder) > m.cfg.Tombstones {
		delete(m.tombs, m.tombOrder[0])
		m.tombOrder = m.tombOrder[1:]
	}
	c.log.Debug("handle dropped", zap.String("reason", string(why)))
}

func (m *Manager) removeLocked(c *Command) {
	delete(m.cmds, c.id)
	if i := slices.Index(m.order, c); i >= 0 {
		m.order = slices.Delete(m.order, i, i+1)
	}
}

// finished is called by a command's owner once it is final.
func (m *Manager) finished(c *Command, s State, truncated bool) {
	c.running() // its ClassCommand place
	m.obs.CommandFinished(s, truncated)
	m.feed.commandExited(c)
}

// Get returns the command with id. Errors: ErrNotFound (never seen, or not a
// UUID), *GoneError (evicted or expired).
func (m *Manager) Get(id string) (*Command, error) {
	cid, err := ParseID(id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.sweepLocked()
	c, ok := m.cmds[cid]
	reason, gone := m.tombs[cid]
	m.mu.Unlock()
	switch {
	case ok:
		<-c.startedCh // a starting command is visible only once started
		if c.startErr != nil {
			return nil, errorf(ErrNotFound, "no command %s", cid)
		}
		return c, nil
	case gone:
		return nil, &GoneError{ID: cid, Reason: reason}
	default:
		return nil, errorf(ErrNotFound, "no command %s", cid)
	}
}

// List returns the status of every retained command, oldest first. A
// non-nil filter keeps only commands in that state.
func (m *Manager) List(filter *State) []Status {
	m.mu.Lock()
	m.sweepLocked()
	cmds := slices.Clone(m.order)
	m.mu.Unlock()
	out := make([]Status, 0, len(cmds))
	for _, c := range cmds {
		select {
		case <-c.startedCh:
		default:
			continue // still starting
		}
		if c.startErr != nil {
			continue
		}
		s := c.Status()
		if filter == nil || s.State == filter.Wire() {
			out = append(out, s)
		}
	}
	return out
}

// OrphansReaped is how many children the reaper reaped that no Manager
// started (orphaned grandchildren), for the metrics.
func (m *Manager) OrphansReaped() uint64 { return m.reaper.OrphansReaped() }

// Counts returns the number of running (including starting) and retained handles.
func (m *Manager) Counts() (running, retained int) {
	running = m.adm.held(ClassCommand)
	m.mu.Lock()
	defer m.mu.Unlock()
	return running, len(m.cmds)
}

// ShuttingDown is closed when Shutdown begins; streams use it to end early.
func (m *Manager) ShuttingDown() <-chan struct{} { return m.shutdownCh }

// shutdownKillReserve is how much of Shutdown's budget is kept after the
// SIGKILL escalation for the processes to die, be reaped and their pipes to
// be drained (at most a fifth of the budget).
const shutdownKillReserve = time.Second

// Shutdown stops admitting commands, ends every running command (and legacy
// execution) with state terminated, and waits until all have finished or ctx
// is done.
//
// The kill escalation runs inside ctx: SIGTERM at once, SIGKILL after the
// kill grace or, when ctx has a deadline, shutdownKillReserve (at most a fifth
// of what is left) before it, whichever comes first; the pipe grace is cut to
// its 100 ms minimum then. So a kill grace longer than the budget does not
// stretch the shutdown past it. When ctx ends, whatever is left is SIGKILLed.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	if !m.closing {
		m.closing = true
		close(m.shutdownCh)
	}
	m.mu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		t := time.AfterFunc(left-min(shutdownKillReserve, left/5), m.killAll)
		defer t.Stop()
	}
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
		m.Close()
		return nil
	case <-ctx.Done():
		m.killAll()
		return errors.Join(errors.New("shutdown: commands still running"), ctx.Err())
	}
}

// killAll makes every command's kill escalation send SIGKILL now.
func (m *Manager) killAll() { m.killOnce.Do(func() { close(m.killNow) }) }

// killContext returns a context that is cancelled when Shutdown's kill
// deadline passes, for procgroup.Process.Terminate; stop releases it.
func (m *Manager) killContext() (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		select {
		case <-m.killNow:
			cancel()
		case <-done:
		}
	}()
	return ctx, func() { close(done); cancel() }
}

// spawnError classifies a failed start by its spawn class (start.go, the
// one errno table): a start the sandbox ran out of processes, memory or
// descriptors for is ErrResourceExhausted (naming the limits), anything else
// ErrSpawnFailed.
func spawnError(err error) error {
	if SpawnClassOf(err) == SpawnResources {
		return errorf(ErrResourceExhausted, "cannot start a process: %v", err).(*classified).wrap(err)
	}
	return errorf(ErrSpawnFailed, "%v", err).(*classified).wrap(err)
}
