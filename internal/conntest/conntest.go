// Package conntest records what a server writes to its connections, for
// tests that assert on the writes themselves: how many, what each held,
// and the write deadline each was made under.
package conntest

import (
	"bytes"
	"net"
	"sync"
	"time"
)

// Write is one Write of a recorded connection.
type Write struct {
	Data     []byte
	At       time.Time // when the Write began
	Deadline time.Time // the connection's write deadline then (zero: none)
}

// Log records the writes of every connection a Listener accepted.
type Log struct {
	mu     sync.Mutex
	writes []Write
	conns  int
}

// Writes returns the writes so far, in order.
func (l *Log) Writes() []Write {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Write(nil), l.writes...)
}

// Conns returns how many connections were accepted.
func (l *Log) Conns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conns
}

// Listener wraps a TCP listener so that its connections record into Log.
type Listener struct {
	net.Listener
	Log *Log
}

// Accept accepts a connection of the wrapped listener (a *net.TCPConn).
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.Log.mu.Lock()
	l.Log.conns++
	l.Log.mu.Unlock()
	return &Conn{TCPConn: c.(*net.TCPConn), log: l.Log}, nil
}

// Conn keeps *net.TCPConn's methods (SyscallConn: socket options still
// apply) and records each Write with the write deadline it was made under.
type Conn struct {
	*net.TCPConn
	log      *Log
	mu       sync.Mutex
	deadline time.Time
}

// SetWriteDeadline sets and remembers the write deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.TCPConn.SetWriteDeadline(t)
}

// SetDeadline sets both deadlines and remembers the write deadline.
func (c *Conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.TCPConn.SetDeadline(t)
}

// Write records p, then writes it.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	d := c.deadline
	c.mu.Unlock()
	c.log.mu.Lock()
	c.log.writes = append(c.log.writes, Write{Data: bytes.Clone(p), At: time.Now(), Deadline: d})
	c.log.mu.Unlock()
	return c.TCPConn.Write(p)
}
