package httpx

import (
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// BoundWrites wraps the listener of an HTTP server so that no write on its
// connections is ever without a deadline: a write made while the server has
// set none (net/http sets none unless Server.WriteTimeout is set, which
// would also cut the long answers) gets WriteWait for each ProgressChunk it
// moves. That covers what no handler sees: the JSON answers net/http
// flushes after the handler, a 100 Continue written inside a body read, and
// net/http's own refusals of a request it cannot parse (400, 417, 431,
// 501), pipelined behind another request or not. A client that sends
// request after request and never reads their answers is cut once the
// socket buffers are full and a write has waited WriteWait, instead of
// holding its connection, the serving goroutine and a body-gate slot for
// as long as it likes. The deadlines a server sets (the streams',
// /execute's, the file bodies') are its own: while one is set, writes pass
// through untouched.
func BoundWrites(ln net.Listener) net.Listener { return boundedListener{ln} }

type boundedListener struct{ net.Listener }

func (l boundedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	LimitUnsent(c, DefaultUnsent)
	return &boundedConn{Conn: c}, nil
}

// DefaultUnsent is the unsent limit (LimitUnsent) of every connection
// BoundWrites accepts; a stream lowers it for its duration and puts it
// back. Without it a write blocked on a full send buffer, which loopback
// autotuning grows to 4 MiB, was woken only once about a third of it had
// drained: a body read at a steady 28-120 KB/s was cut at 10 s, its 256 KiB
// chunk never "moved", although the client kept reading.
const DefaultUnsent = 64 << 10

// boundedConn is a connection whose writes get the default deadline while
// its server has set none.
type boundedConn struct {
	net.Conn
	mu  sync.Mutex // orders set against the deadline armDefault sets
	set time.Time  // the write deadline the server set; zero: none
}

func (c *boundedConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set = t
	return c.Conn.SetWriteDeadline(t)
}

func (c *boundedConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set = t
	return c.Conn.SetDeadline(t)
}

// armDefault gives the next write WriteWait when the server has set no
// deadline, and reports whether it did. Under mu: a deadline the server
// sets meanwhile (a stream's, lowered at shutdown) is never overwritten by
// the default.
func (c *boundedConn) armDefault() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set.IsZero() {
		return false
	}
	c.Conn.SetWriteDeadline(time.Now().Add(WriteWait))
	return true
}

func (c *boundedConn) Write(p []byte) (int, error) {
	n := 0
	for {
		chunk := p
		if c.armDefault() {
			chunk = p[:min(len(p), ProgressChunk)]
		}
		m, err := c.Conn.Write(chunk)
		n += m
		if err != nil || m == len(p) {
			return n, err
		}
		p = p[m:]
	}
}

// ReadFrom keeps the connection's sendfile and splice (net/http hands it
// a file body), in chunks of ProgressChunk while the default applies.
func (c *boundedConn) ReadFrom(src io.Reader) (int64, error) {
	rf, ok := c.Conn.(io.ReaderFrom)
	if !ok {
		return io.Copy(struct{ io.Writer }{c}, src)
	}
	return readFromInChunks(rf, src, c.armDefault)
}

// The socket's own methods, for what asks the connection for them: the
// unsent limit and the cap's last-heard check (SyscallConn), net/http's
// half-close (CloseWrite), the WebSocket buffers (Set…Buffer).

func (c *boundedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, syscall.EINVAL
}

func (c *boundedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return syscall.EINVAL
}

func (c *boundedConn) SetWriteBuffer(n int) error {
	if b, ok := c.Conn.(interface{ SetWriteBuffer(int) error }); ok {
		return b.SetWriteBuffer(n)
	}
	return syscall.EINVAL
}

func (c *boundedConn) SetReadBuffer(n int) error {
	if b, ok := c.Conn.(interface{ SetReadBuffer(int) error }); ok {
		return b.SetReadBuffer(n)
	}
	return syscall.EINVAL
}
