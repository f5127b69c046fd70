package api

import (
	"net/http"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

func (s *Server) resizeCommand(w http.ResponseWriter, r *http.Request) {
	var b wire.ResizeRequest
	m, err := decodeJSON(r, &b, false)
	if err != nil {
		fail(w, err)
		return
	}
	cols, rows, err := resizeOf(b, m)
	if err != nil {
		fail(w, err)
		return
	}
	c, err := s.m.Get(r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	st, err := c.Resize(cols, rows)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// applyResize carries out a WebSocket resize frame.
func (a *attachment) applyResize(data []byte) error {
	var f resizeFrame
	m, err := decodeFrame(data, &f)
	if err != nil {
		return err
	}
	cols, rows, err := resizeOf(f.ResizeRequest, m)
	if err != nil {
		return err
	}
	_, err = a.c.Resize(cols, rows)
	return err
}
