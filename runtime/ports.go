package runtime

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/netports"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// Listening ports (docs/protocol.md §4 "Listening ports"): the sockets in
// LISTEN state (TCP) or bound and unconnected (UDP) held by a process of a
// command (procgroup.Process.Members: its cgroup, or its process group
// through the shared bounded process index). Linux sends no notification on
// listen(), so the Manager polls, every PortPollInterval, but only while
// someone watches (a feed subscriber or a wait_port): an idle daemon keeps
// its one wake-up per 10 s.

// PortPollInterval is how often the ports of the running commands are
// read while a wait_port waits; FeedPortPollInterval while only feed
// subscribers watch. One poll reads the namespace's socket tables (a few
// ms on a busy host: BENCHMARKS.md), so the feed alone polls less often.
const (
	PortPollInterval     = 100 * time.Millisecond
	FeedPortPollInterval = time.Second
)

// portWatch is the Manager's poller of listening ports.
type portWatch struct {
	mu       sync.Mutex
	watchers int
	waiters  int                        // of watchers, the wait_ports (they poll at PortPollInterval)
	faster   chan struct{}              // closed (and replaced) when a wait_port begins
	stop     chan struct{}              // closed to stop the poller; nil when none runs
	polled   chan struct{}              // closed (and replaced) after each poll
	known    map[string][]wire.Listener // per running command: what the last poll saw

	// What the polling costs (read by tests): polls done, and reads of a
	// namespace's socket tables (the expensive part: BENCHMARKS.md), by
	// the poller and by status reads alike.
	polls, tableReads atomic.Int64
}

// WatchPorts keeps the port poller running until the returned function is
// called (a feed subscriber, a wait_port): listening and closed events are
// logged only meanwhile.
func (m *Manager) WatchPorts() (stop func()) { return m.watchPorts(false) }

func (m *Manager) watchPorts(waiter bool) (stop func()) {
	w := &m.ports
	w.mu.Lock()
	w.watchers++
	if waiter {
		w.waiters++
		if w.faster != nil {
			close(w.faster)
			w.faster = nil
		}
	}
	if w.stop == nil {
		w.stop = make(chan struct{})
		go m.pollPorts(w.stop)
	}
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			w.watchers--
			if waiter {
				w.waiters--
			}
			if w.watchers == 0 && w.stop != nil {
				close(w.stop)
				w.stop = nil
			}
			w.mu.Unlock()
		})
	}
}

// notifyChan returns a channel closed when the next event is logged.
func (l *eventLog) notifyChan() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.notify == nil {
		l.notify = make(chan struct{})
	}
	return l.notify
}

// polledChan returns a channel closed after the poller's next poll.
func (w *portWatch) polledChan() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.polled == nil {
		w.polled = make(chan struct{})
	}
	return w.polled
}

func (m *Manager) pollPorts(stop chan struct{}) {
	w := &m.ports
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		// With no command running there is nothing to poll: sleep until
		// the feed logs an event (a command's created/started), so that
		// an open feed on an idle daemon costs no wake-up.
		wake := m.feed.notifyChan()
		if m.pollPortsOnce() == 0 {
			select {
			case <-wake:
				continue
			case <-stop:
				return
			}
		}
		w.mu.Lock()
		every := FeedPortPollInterval
		if w.waiters > 0 {
			every = PortPollInterval
		}
		if w.faster == nil {
			w.faster = make(chan struct{})
		}
		faster := w.faster
		w.mu.Unlock()
		t.Reset(every)
		select {
		case <-t.C:
		case <-faster: // a wait_port began: poll now, then every PortPollInterval
			if !t.Stop() {
				<-t.C
			}
		case <-stop:
			return
		}
	}
}

// pollPortsOnce reads the listeners of every running command, logs what
// changed since the last poll, and wakes the waiters. It returns how many
// commands run or are being started.
func (m *Manager) pollPortsOnce() int {
	m.mu.Lock()
	all := slices.Clone(m.order) // c.mu is taken without m.mu (as List does)
	m.mu.Unlock()
	cmds := make([]*Command, 0, len(all))
	starting := 0 // commands being spawned: they run in a moment, without another event
	for _, c := range all {
		switch c.currentState() {
		case StateRunning:
			cmds = append(cmds, c)
		case StateStarting:
			starting++
		}
	}
	ns := m.newNSCache()
	w := &m.ports
	w.polls.Add(1)
	w.mu.Lock()
	old := w.known
	w.mu.Unlock()
	known := make(map[string][]wire.Listener, len(cmds))
	var evs []logEvent
	now := time.Now().UnixNano()
	for _, c := range cmds {
		ls := c.listeners(ns)
		known[c.id] = ls
		prev := old[c.id]
		for i := range ls {
			if !slices.Contains(prev, ls[i]) {
				l := ls[i]
				evs = append(evs, logEvent{kind: evKindListening, id: c.id, at: now, lis: &l})
			}
		}
		for i := range prev {
			if !slices.Contains(ls, prev[i]) && c.isRunning() {
				l := prev[i]
				evs = append(evs, logEvent{kind: evKindClosed, id: c.id, at: now, lis: &l})
			}
		}
	}
	if len(evs) > 0 {
		m.feed.append(m.cfg.EventLog, evs...)
	}
	w.mu.Lock()
	w.known = known
	ch := w.polled
	w.polled = nil
	w.mu.Unlock()
	if ch != nil {
		close(ch)
	}
	return len(cmds) + starting
}

// nsCache reads each network namespace's socket tables once per poll.
type nsCache struct {
	tables map[string][]netports.Socket
	reads  *atomic.Int64 // the Manager's count of table reads (portWatch.tableReads)
}

func (m *Manager) newNSCache() nsCache {
	return nsCache{tables: map[string][]netports.Socket{}, reads: &m.ports.tableReads}
}

func (n nsCache) sockets(pid int) []netports.Socket {
	key := netports.NetNS(pid)
	if s, ok := n.tables[key]; ok {
		return s
	}
	n.reads.Add(1)
	s, _ := netports.Namespace(pid) // a process gone meanwhile: none
	n.tables[key] = s
	return s
}

func toWire(socks []netports.Socket) []wire.Listener {
	out := make([]wire.Listener, 0, len(socks))
	for _, s := range socks {
		out = append(out, wire.Listener{Address: s.Addr.String(), Port: int(s.Port), Protocol: s.Protocol, LoopbackOnly: s.LoopbackOnly()})
	}
	return out
}

// listeners reads what c's processes listen on now (nil when it is not
// running).
func (c *Command) listeners(ns nsCache) []wire.Listener {
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	if p == nil || !c.isRunning() {
		return nil
	}
	pids := p.Members()
	if len(pids) == 0 {
		return []wire.Listener{}
	}
	// The namespace of the leader, or of the first member still there.
	var socks []netports.Socket
	for _, pid := range pids {
		if socks = ns.sockets(pid); socks != nil {
			break
		}
	}
	return toWire(netports.Held(socks, pids))
}

// Listeners returns the listening sockets of c's processes now: empty when
// it holds none, nil when it is not running.
func (c *Command) Listeners() []wire.Listener { return c.listeners(c.m.newNSCache()) }

// Ports returns every listening socket of the daemon's network namespace,
// each with the running command whose processes hold it (nil: none).
func (m *Manager) Ports() ([]wire.Port, error) {
	socks, err := netports.Namespace(0)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	all := slices.Clone(m.order)
	m.mu.Unlock()
	cmds := make([]*Command, 0, len(all))
	for _, c := range all {
		if c.isRunning() {
			cmds = append(cmds, c)
		}
	}
	owner := make(map[uint64]string)
	for _, c := range cmds {
		c.mu.Lock()
		p := c.proc
		c.mu.Unlock()
		if p == nil {
			continue
		}
		set := map[uint64]bool{}
		for _, pid := range p.Members() {
			netports.SocketInodes(pid, set)
		}
		for ino := range set {
			if _, ok := owner[ino]; !ok {
				owner[ino] = c.id
			}
		}
	}
	out := make([]wire.Port, 0, len(socks))
	seen := map[string]bool{}
	for _, s := range socks {
		if seen[s.Key()] {
			continue
		}
		seen[s.Key()] = true
		p := wire.Port{Listener: toWire([]netports.Socket{s})[0]}
		if id, ok := owner[s.Inode]; ok {
			p.CommandID = &id
		}
		out = append(out, p)
	}
	return out, nil
}

// WaitPort waits until c listens on port (TCP or UDP, any address), c
// finishes, or d or ctx runs out, and returns its status with
// WaitPortResult saying which (and Listeners while it runs). The port
// poller runs meanwhile.
func (c *Command) WaitPort(ctx context.Context, port int, d time.Duration) Status {
	stop := c.m.watchPorts(true)
	defer stop()
	timer := time.NewTimer(d)
	defer timer.Stop()
	// The first look is a read of its own (a port already listening
	// answers at once); after that every waiter takes the poller's result
	// for c, so waiters together cost the one poll's reads.
	polled := c.m.ports.polledChan()
	ls := c.Listeners()
	for {
		if slices.ContainsFunc(ls, func(l wire.Listener) bool { return l.Port == port }) {
			st := c.Status()
			st.Listeners, st.WaitPortResult = ls, wire.WaitPortListening
			return st
		}
		select {
		case <-c.Done():
			st := c.Status()
			st.WaitPortResult = wire.WaitPortEnded
			return st
		case <-polled:
			polled = c.m.ports.polledChan()
			ls = c.m.ports.polledListeners(c.id)
		case <-timer.C:
			st := c.Status()
			st.Listeners, st.WaitPortResult = c.Listeners(), wire.WaitPortTimeout
			return st
		case <-ctx.Done():
			st := c.Status()
			st.WaitPortResult = wire.WaitPortTimeout
			return st
		}
	}
}

// polledListeners is what the last poll saw of command id (nil when it
// was not running then).
func (w *portWatch) polledListeners(id string) []wire.Listener {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.known[id]
}

// isRunning reports whether c's process runs (started, not finished).
func (c *Command) isRunning() bool { return c.currentState() == StateRunning }

func (c *Command) currentState() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}
