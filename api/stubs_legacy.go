package api

// Temporary stubs, replaced by legacy.go and files.go.

import "net/http"

func (s *Server) legacyRoot(w http.ResponseWriter, r *http.Request) {
	writeLegacyJSON(w, http.StatusOK, map[string]string{"status": "ok", "message": "Sandbox Runtime is active."})
}
func (s *Server) legacyExecute(w http.ResponseWriter, r *http.Request)  { s.notFound(w, r) }
func (s *Server) legacyUpload(w http.ResponseWriter, r *http.Request)   { s.notFound(w, r) }
func (s *Server) legacyDownload(w http.ResponseWriter, r *http.Request) { s.notFound(w, r) }
func (s *Server) legacyList(w http.ResponseWriter, r *http.Request)     { s.notFound(w, r) }
func (s *Server) legacyExists(w http.ResponseWriter, r *http.Request)   { s.notFound(w, r) }
func (s *Server) serveLegacyPath(w http.ResponseWriter, r *http.Request, prefix string) {
	s.notFound(w, r)
}
func (s *Server) getFile(w http.ResponseWriter, r *http.Request)    { s.notFound(w, r) }
func (s *Server) putFile(w http.ResponseWriter, r *http.Request)    { s.notFound(w, r) }
func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) { s.notFound(w, r) }
