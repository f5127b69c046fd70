package api

import (
	"net/http"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// ptyBody is the "pty" member of POST /v1/commands.
type ptyBody struct {
	Cols int    `json:"cols"`
	Rows int    `json:"rows"`
	Term string `json:"term"`
}

func (b *ptyBody) request() *runtime.PTYRequest {
	if b == nil {
		return nil
	}
	return &runtime.PTYRequest{Cols: b.Cols, Rows: b.Rows, Term: b.Term}
}

// resizeBody is the body of POST /v1/commands/{id}/resize and of a WebSocket
// resize frame (without "type"). Both fields are required.
type resizeBody struct {
	Cols *int `json:"cols"`
	Rows *int `json:"rows"`
}

func (b resizeBody) size() (cols, rows int, err error) {
	if b.Cols == nil || b.Rows == nil {
		return 0, 0, badRequest(`fields "cols" and "rows" are required`)
	}
	return *b.Cols, *b.Rows, nil
}

func (s *Server) resizeCommand(w http.ResponseWriter, r *http.Request) {
	var b resizeBody
	if err := decodeJSON(r, &b, false); err != nil {
		fail(w, err)
		return
	}
	cols, rows, err := b.size()
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

// resizeFrame is {"type":"resize","cols":…,"rows":…}.
type resizeFrame struct {
	Type string `json:"type"`
	resizeBody
}

// applyResize carries out a WebSocket resize frame.
func (a *attachment) applyResize(data []byte) error {
	var f resizeFrame
	if err := decodeFrame(data, &f); err != nil {
		return err
	}
	cols, rows, err := f.size()
	if err != nil {
		return err
	}
	_, err = a.c.Resize(cols, rows)
	return err
}
