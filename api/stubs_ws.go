package api

// Temporary stubs, replaced by attach.go.

import (
	"net"
	"net/http"
	"sync"
)

func (s *Server) attach(w http.ResponseWriter, r *http.Request) { s.notFound(w, r) }

// connSet tracks hijacked connections so that shutdown can close them.
type connSet struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
}

func newConnSet() *connSet { return &connSet{m: map[net.Conn]struct{}{}} }
func (c *connSet) closeAll() {}
