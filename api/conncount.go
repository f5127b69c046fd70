package api

import (
	"net"
	"net/http"
	"sync"
	"syscall"
)

// CountListener wraps ln (a listener not served by net/http: sandboxd's
// gRPC) so that every connection it accepts counts against this server's
// one connection cap (conncap.go) from Accept until it is closed. Such a
// connection is never "busy" for the cap: beyond it, the ones that have
// waited longest are closed like idle HTTP keep-alives, except those heard
// from within the last second (a stream in use receives its window updates
// and messages). Without it an idle HTTP/2 flood (preface and SETTINGS,
// then nothing) took every fd of the daemon (issue 22, F2).
func (s *Server) CountListener(ln net.Listener) net.Listener {
	return &countedListener{Listener: ln, l: s.conns}
}

type countedListener struct {
	net.Listener
	l *connLimiter
}

func (cl *countedListener) Accept() (net.Conn, error) {
	c, err := cl.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &countedConn{Conn: c, l: cl.l}
	cl.l.connState(cc, http.StateNew) // may close older ones, never cc
	return cc, nil
}

// countedConn leaves the count when closed, by its server or for the cap.
type countedConn struct {
	net.Conn
	l    *connLimiter
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.connState(c, http.StateClosed) })
	return err
}

// SyscallConn lets the cap see when the connection last received bytes
// (recentlyHeard).
func (c *countedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, syscall.EINVAL
}
