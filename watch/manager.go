package watch

import (
	"errors"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Manager bounds. Documented in docs/watch.md.
const (
	DefaultMaxWatches  = 64              // watches open at once
	DefaultMaxDirTotal = 16384           // directories all watches watch together
	DefaultIdleTimeout = 5 * time.Minute // a watch nobody reads for this long is closed
)

// ManagerOptions configures a Manager; zero fields take the defaults.
type ManagerOptions struct {
	MaxWatches  int
	MaxDirTotal int
	IdleTimeout time.Duration
	Limits      Limits
}

// Errors of Manager.Create and Get.
var (
	ErrTooMany  = errors.New("watch: too many watches")
	ErrNotFound = errors.New("watch: no such watch")
	ErrClosed   = errors.New("watch: the manager is closed")
)

// Manager holds the watches of a server by id.
type Manager struct {
	root   *os.Root
	base   string
	opts   ManagerOptions
	budget *Budget

	mu      sync.Mutex
	closed  bool
	watches map[string]*Handle
	stop    chan struct{}
	stopped chan struct{}
}

// Handle is a watch known by id.
type Handle struct {
	*Watch
	ID      string
	Created time.Time

	m        *Manager
	readers  int       // open streams (under m.mu)
	lastRead time.Time // when the last stream ended (under m.mu)
}

// NewManager returns a manager of watches below base. The base dir is
// opened as an os.Root for the manager's lifetime.
func NewManager(base string, opts ManagerOptions) (*Manager, error) {
	if opts.MaxWatches <= 0 {
		opts.MaxWatches = DefaultMaxWatches
	}
	if opts.MaxDirTotal <= 0 {
		opts.MaxDirTotal = DefaultMaxDirTotal
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	root, err := os.OpenRoot(base)
	if err != nil {
		return nil, err
	}
	m := &Manager{root: root, base: base, opts: opts, budget: NewBudget(opts.MaxDirTotal),
		watches: map[string]*Handle{}, stop: make(chan struct{}), stopped: make(chan struct{})}
	go m.expire()
	return m, nil
}

// Options reports the manager's bounds (defaults filled in).
func (m *Manager) Options() ManagerOptions { return m.opts }

// Create starts a watch of rel (relative to the base).
func (m *Manager) Create(rel string, recursive bool) (*Handle, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	if len(m.watches) >= m.opts.MaxWatches {
		m.mu.Unlock()
		return nil, ErrTooMany
	}
	// Reserve the slot while the watch is opened outside the lock.
	id := uuid.NewString()
	m.watches[id] = nil
	m.mu.Unlock()
	w, err := Open(m.root, m.base, rel, recursive, m.opts.Limits, m.budget)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		delete(m.watches, id)
		return nil, err
	}
	h := &Handle{Watch: w, ID: id, Created: time.Now().UTC(), m: m, lastRead: time.Now()}
	m.watches[id] = h
	// A watch that ends by itself (its directory is gone) is forgotten
	// once no stream reads it (then, or when its last stream leaves).
	go func() {
		<-w.Done()
		m.mu.Lock()
		if m.watches[id] == h && h.readers == 0 {
			delete(m.watches, id)
		}
		m.mu.Unlock()
	}()
	if m.closed {
		delete(m.watches, id)
		go w.Close()
		return nil, ErrClosed
	}
	return h, nil
}

// Get returns the watch of id.
func (m *Manager) Get(id string) (*Handle, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.watches[id]
	if h == nil {
		return nil, ErrNotFound
	}
	return h, nil
}

// List returns the watches, oldest first.
func (m *Manager) List() []*Handle {
	m.mu.Lock()
	out := make([]*Handle, 0, len(m.watches))
	for _, h := range m.watches {
		if h != nil {
			out = append(out, h)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b *Handle) int { return a.Created.Compare(b.Created) })
	return out
}

// Delete closes and forgets the watch of id.
func (m *Manager) Delete(id string) error {
	m.mu.Lock()
	h := m.watches[id]
	if h == nil {
		m.mu.Unlock()
		return ErrNotFound
	}
	delete(m.watches, id)
	m.mu.Unlock()
	h.Close()
	return nil
}

// Reading marks a stream of h open; the returned func marks it closed.
// A watch with an open stream never expires.
func (h *Handle) Reading() func() {
	h.m.mu.Lock()
	h.readers++
	h.m.mu.Unlock()
	return func() {
		h.m.mu.Lock()
		h.readers--
		h.lastRead = time.Now()
		if h.readers == 0 && h.ended() && h.m.watches[h.ID] == h {
			delete(h.m.watches, h.ID)
		}
		h.m.mu.Unlock()
	}
}

// Readers reports the open streams of h.
func (h *Handle) Readers() int {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	return h.readers
}

// ended reports whether h's watch has ended by itself (removed_root).
func (h *Handle) ended() bool {
	select {
	case <-h.Done():
		return true
	default:
		return false
	}
}

// expire closes watches nobody read for IdleTimeout.
func (m *Manager) expire() {
	defer close(m.stopped)
	t := time.NewTicker(min(m.opts.IdleTimeout/4, 15*time.Second))
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case now := <-t.C:
			var idle []*Handle
			m.mu.Lock()
			for id, h := range m.watches {
				if h != nil && h.readers == 0 && now.Sub(h.lastRead) >= m.opts.IdleTimeout {
					delete(m.watches, id)
					idle = append(idle, h)
				}
			}
			m.mu.Unlock()
			for _, h := range idle {
				h.Close()
			}
		}
	}
}

// Close closes every watch and the base dir.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	all := m.watches
	m.watches = map[string]*Handle{}
	m.mu.Unlock()
	close(m.stop)
	<-m.stopped
	for _, h := range all {
		if h != nil {
			h.Close()
		}
	}
	m.root.Close()
}

// DirsUsed reports the directories watched by all watches.
func (m *Manager) DirsUsed() int { return m.budget.Used() }
