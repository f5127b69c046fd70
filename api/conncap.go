package api

import (
	"container/list"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Open connections are capped well below the fd limit, so that the daemon
// can always accept one more (the health probe). Connections that never
// send a byte were not counted anywhere: 3 × 7,000 idle connections,
// re-opened as fast as they were closed, took every fd; accept failed
// (`accept4: too many open files`, retried each second) and the health
// probe went unanswered.
//
// The cap is enforced through http.Server.ConnState (Server.ConnState):
// once more than maxConns connections are open, the ones that have waited
// longest without a request in progress (new or idle keep-alive) are
// closed, oldest first, never the one just accepted: a probe that just
// arrived is served. Only when none is left and more than hardConns are
// open are the oldest connections with a request in progress closed too.
//
// The closing is as fast as the re-opening, so that a client gets about
// maxConns / (connections accepted per second) to send its request (about
// 0.2 s with 6,000 connections re-opened at once against 4,096 fds on two
// cores): a connection whose request has arrived, or that received bytes
// in the last second, is never taken for silent (recentlyHeard).
//
// The fd budget at a limit L, less fdReserve (commands' pipes, files,
// the log): maxConns = (L−512)×3/4 and hardConns = (L−512)×13/16 sockets,
// plus (L−512)/16 bodies in flight of up to 3 more fds each (a PUT holds
// the base dir, the parent dir and its temporary file): at most L − 512 in
// all.
//
// WebSocket attachments are connections net/http no longer tracks once
// hijacked: 4,500 of them took all 4,096 fds. They stay counted here, in
// the same map, from the upgrade until the attachment ends, and are never
// closed for the cap; at most maxAttach = maxConns/2 = (L−512)×3/8 of them
// (1,344 at 4,096 fds), and never more than MaxAttachments, are open at once, so that at least half the cap is
// left to requests, health probes first. One more is refused before the
// upgrade with 503 too_busy (admitAttach).
type connLimiter struct {
	soft, hard int
	maxAttach  int
	log        *zap.Logger

	mu       sync.Mutex
	conns    map[net.Conn]*connEntry
	quiet    list.List // new and idle connections, longest waiting first
	busy     list.List // connections with a request in progress, oldest first
	attached int       // attachments admitted and not yet ended (some may not be in conns)

	shed     atomic.Int64 // connections closed for the cap
	lastWarn atomic.Int64 // unix nanoseconds of the last warning
}

type connEntry struct {
	c        net.Conn
	in       *list.List
	el       *list.Element
	attached bool // admitted as an attachment: kept counted once hijacked
	hijacked bool // net/http no longer serves it
}

func (e *connEntry) move(to *list.List) {
	if e.in != nil {
		e.in.Remove(e.el)
	}
	e.in, e.el = to, to.PushBack(e)
}

func (e *connEntry) remove() {
	if e.in != nil {
		e.in.Remove(e.el)
		e.in, e.el = nil, nil
	}
}

// maxConnsFor is the connection cap (soft) and the hard cap for an fd limit.
func maxConnsFor(fdLimit uint64) (soft, hard int) {
	avail := int64(0)
	if fdLimit > fdReserve {
		avail = int64(fdLimit - fdReserve)
	}
	soft = int(max(2*minBodies, avail*3/4))
	hard = int(max(int64(soft), avail*13/16))
	return soft, hard
}

// MaxAttachments is the most WebSocket attachments open at once whatever
// the fd limit: each holds ~40 KB (a goroutine pair, buffers, a frame in
// hand), so at nofile 1,048,576 the fd share alone, ~393k, would let them
// take ~15 GB. 4,096 of them hold ~160 MB.
const MaxAttachments = 4096

// maxAttachFor is the number of WebSocket attachments open at once for a
// connection cap: half of it, at most MaxAttachments.
func maxAttachFor(soft int) int { return min(MaxAttachments, max(minBodies, soft/2)) }

func newConnLimiter(fdLimit uint64, log *zap.Logger) *connLimiter {
	l := &connLimiter{log: log, conns: map[net.Conn]*connEntry{}}
	l.soft, l.hard = maxConnsFor(fdLimit)
	l.maxAttach = maxAttachFor(l.soft)
	return l
}

// admitAttach counts c (nil: a connection this limiter does not see) as a
// WebSocket attachment until release is called, or reports false when
// maxAttach attachments are open already. An admitted connection stays
// counted against the cap once hijacked, and is never closed for it.
func (l *connLimiter) admitAttach(c net.Conn) (release func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.attached >= l.maxAttach {
		return nil, false
	}
	l.attached++
	e := l.conns[c]
	if e != nil {
		e.attached = true
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.attached--
			switch {
			case e == nil || l.conns[c] != e:
			case e.hijacked: // the attachment is over: so is the connection
				delete(l.conns, c)
			default: // the upgrade failed: net/http serves it on
				e.attached = false
			}
		})
	}, true
}

// refuseAttach answers an attachment admitAttach refused: 503 too_busy,
// before any upgrade.
func (l *connLimiter) refuseAttach(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Connection", "close")
	writeError(w, http.StatusServiceUnavailable, "too_busy",
		fmt.Sprintf("%d WebSocket attachments are open (the limit); retry", l.maxAttach), nil)
}

// attachments is the number of attachments admitted and not yet ended.
func (l *connLimiter) attachments() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.attached
}

// ConnState is for http.Server.ConnState: it counts the open connections
// and closes the longest-waiting idle ones beyond the cap (conncap.go).
func (s *Server) ConnState(c net.Conn, st http.ConnState) {
	if st == http.StateIdle {
		// A finished NDJSON stream leaves a write deadline on its connection
		// (see streamNDJSON); the next request must not inherit it.
		c.SetWriteDeadline(time.Time{})
	}
	s.conns.connState(c, st)
}

// OpenConns is the number of connections counted against the cap.
func (s *Server) OpenConns() int {
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	return len(s.conns.conns)
}

func (l *connLimiter) connState(c net.Conn, st http.ConnState) {
	var victims []net.Conn
	l.mu.Lock()
	e := l.conns[c]
	switch st {
	case http.StateNew:
		e = &connEntry{c: c}
		l.conns[c] = e
		e.move(&l.quiet)
		victims = l.overCap(c)
	case http.StateIdle:
		if e != nil {
			e.move(&l.quiet)
		}
	case http.StateActive:
		if e != nil {
			e.move(&l.busy)
		}
	case http.StateHijacked:
		if e != nil {
			e.remove() // off the lists overCap takes from
			e.hijacked = true
			if !e.attached {
				delete(l.conns, c)
			} // an attachment stays counted until its release
		}
	case http.StateClosed:
		if e != nil {
			e.remove()
			delete(l.conns, c)
		}
	}
	l.mu.Unlock()
	for _, v := range victims {
		v.Close() // its serving goroutine ends on the read error
	}
	if n := len(victims); n > 0 {
		total := l.shed.Add(int64(n))
		now := time.Now().UnixNano()
		if last := l.lastWarn.Load(); now-last > int64(10*time.Second) && l.lastWarn.CompareAndSwap(last, now) {
			l.log.Warn("connection limit reached; closing the connections idle the longest",
				zap.Int("limit", l.soft), zap.Int64("closed_total", total))
		}
	}
}

// maxSpared bounds the connections overCap looks at and spares per call.
const maxSpared = 64

// overCap takes the connections to close once newest has been counted.
// l.mu is held.
func (l *connLimiter) overCap(newest net.Conn) (out []net.Conn) {
	spared := 0
	take := func(from *list.List, spare bool) bool {
		front := from.Front()
		if front == nil {
			return false
		}
		e := front.Value.(*connEntry)
		if e.c == newest {
			return false
		}
		if spare && spared < maxSpared && recentlyHeard(e.c, time.Second) {
			// Its request has arrived or is being read (its goroutine has
			// not got to it yet): it is about to be busy, not silent. Look
			// further; it goes behind the others.
			spared++
			e.move(&l.quiet)
			return true
		}
		e.remove()
		delete(l.conns, e.c)
		out = append(out, e.c)
		return true
	}
	for len(l.conns) > l.soft && take(&l.quiet, true) {
	}
	for len(l.conns) > l.hard && take(&l.busy, false) {
	}
	return out
}
