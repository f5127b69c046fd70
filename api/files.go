package api

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Files v1 (protocol.md §3): /v1/files/{path...} reads, lists, writes and
// deletes under SANDBOX_BASE_DIR. The path is decoded by the usual URL rules
// and resolved like the legacy paths (paths.go); a result outside the base
// dir is 403 forbidden.
//
// Decisions where the contract is silent:
//   - GET of a file answers application/octet-stream through
//     http.ServeContent (Range, If-Modified-Since, HEAD); anything but a
//     regular file or a directory is 400.
//   - A listing's "path" is the requested path ("" for the base dir); an
//     entry describes the name itself, not a symlink's target (type "file",
//     "directory", "symlink" or "other"); "modified_at" is RFC 3339 UTC;
//     "mode" is the permission bits in octal ("0644").
//   - PUT has no size limit but the disk; the body is streamed to a
//     temporary file in the target's directory and renamed over the target,
//     so readers see the old or the new content, never a mix. There is no
//     fsync: atomic, not durable across a crash. Without ?mode= a new file
//     gets 0644 and a replaced one keeps its mode. A trailing slash, the base
//     dir or an existing directory is 400; a parent that is not a directory
//     is 409 conflict.
//   - DELETE removes the name itself (a symlink, not its target). The base
//     dir cannot be deleted (400).

// defaultFileMode is the mode of a file created by PUT without ?mode=.
const defaultFileMode = 0o644

// fileEntry is one element of a directory listing.
type fileEntry struct {
	Name       string    `json:"name"`
	Size       int64     `json:"size"`
	Type       string    `json:"type"`
	ModifiedAt time.Time `json:"modified_at"`
	Mode       string    `json:"mode"`
}

type dirListing struct {
	Path    string      `json:"path"`
	Entries []fileEntry `json:"entries"`
}

// resolveFile resolves a /v1/files path.
func (s *Server) resolveFile(rel string) (string, error) {
	full, err := resolveUnder(s.resolvedBase(), rel)
	switch {
	case errors.Is(err, errNULPath):
		return "", badRequest("the path contains a NUL byte")
	case errors.Is(err, errForbidden):
		return "", &httpError{kind: errForbidden, msg: fmt.Sprintf("%q is outside the base directory", rel)}
	}
	return full, err
}

// fileError classifies an os error about rel.
func (s *Server) fileError(err error, rel string) error {
	switch errno := errnoOf(err); {
	case errors.Is(err, fs.ErrNotExist), errno == syscall.ENOTDIR, errno == syscall.ELOOP:
		return &httpError{kind: errNoFile, msg: fmt.Sprintf("no such file or directory: %q", rel)}
	case errors.Is(err, fs.ErrPermission):
		return &httpError{kind: errForbidden, msg: fmt.Sprintf("permission denied: %q", rel)}
	case errno == syscall.ENAMETOOLONG, errno == syscall.EINVAL:
		return badRequest(fmt.Sprintf("invalid path %q: %v", rel, errno))
	case errno == syscall.ENOTEMPTY, errno == syscall.EEXIST:
		return &httpError{kind: errFileConflict, msg: fmt.Sprintf("%q changed while it was being removed: %v", rel, errno)}
	}
	s.log.Warn("file operation failed", zap.String("path", rel), zap.Error(err))
	return err
}

// getFile is GET and HEAD /v1/files/{path...}.
func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	if q := parseQuery(r); q.err != nil {
		fail(w, q.err)
		return
	}
	rel := r.PathValue("path")
	full, err := s.resolveFile(rel)
	if err != nil {
		fail(w, err)
		return
	}
	fi, err := os.Stat(full)
	if err != nil {
		fail(w, s.fileError(err, rel))
		return
	}
	if fi.IsDir() {
		s.listDir(w, full, rel)
		return
	}
	if !fi.Mode().IsRegular() {
		fail(w, badRequest(fmt.Sprintf("%q is not a regular file or a directory", rel)))
		return
	}
	f, err := os.Open(full)
	if err != nil {
		fail(w, s.fileError(err, rel))
		return
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil || !fi.Mode().IsRegular() {
		fail(w, badRequest(fmt.Sprintf("%q is not a regular file", rel)))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	// ServeContent copies with a small buffer: nothing is held in memory.
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

func (s *Server) listDir(w http.ResponseWriter, full, rel string) {
	names, err := readDirNames(full)
	if err != nil {
		fail(w, s.fileError(err, rel))
		return
	}
	out := dirListing{Path: rel, Entries: []fileEntry{}}
	for _, name := range names {
		fi, err := os.Lstat(filepath.Join(full, name))
		if err != nil {
			continue // removed meanwhile
		}
		typ := "other"
		switch m := fi.Mode(); {
		case m.IsRegular():
			typ = "file"
		case m.IsDir():
			typ = "directory"
		case m&fs.ModeSymlink != 0:
			typ = "symlink"
		}
		out.Entries = append(out.Entries, fileEntry{
			Name: name, Size: fi.Size(), Type: typ,
			ModifiedAt: fi.ModTime().UTC(),
			Mode:       fmt.Sprintf("%04o", unixPerm(fi.Mode())),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// unixPerm is the 12 permission bits of m as chmod numbers them.
func unixPerm(m fs.FileMode) uint32 {
	p := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		p |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		p |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		p |= 0o1000
	}
	return p
}

// fileModeOf is the inverse of unixPerm.
func fileModeOf(p uint32) fs.FileMode {
	m := fs.FileMode(p & 0o777)
	if p&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if p&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if p&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// putFile is PUT /v1/files/{path...}: the raw body replaces the file
// atomically (temporary file + rename), parents are created.
func (s *Server) putFile(w http.ResponseWriter, r *http.Request) {
	q := parseQuery(r, "mode")
	if q.err != nil {
		fail(w, q.err)
		return
	}
	var mode fs.FileMode
	hasMode := q.has("mode")
	if hasMode {
		v := q.v.Get("mode")
		p, err := strconv.ParseUint(strings.TrimPrefix(v, "0o"), 8, 32)
		if err != nil || p > 0o7777 || v == "" {
			fail(w, badRequest(fmt.Sprintf("query parameter \"mode\" must be octal permission bits such as 0644, not %q", v)))
			return
		}
		mode = fileModeOf(uint32(p))
	}
	rel := r.PathValue("path")
	if rel == "" || strings.HasSuffix(rel, "/") {
		fail(w, badRequest(fmt.Sprintf("%q names a directory; PUT needs a file path", rel)))
		return
	}
	full, err := s.resolveFile(rel)
	if err != nil {
		fail(w, err)
		return
	}
	if full == s.resolvedBase() {
		fail(w, badRequest("the base directory cannot be written as a file"))
		return
	}
	fi, err := os.Stat(full)
	switch {
	case err == nil && fi.IsDir():
		fail(w, badRequest(fmt.Sprintf("%q is a directory", rel)))
		return
	case err == nil && !hasMode:
		mode = fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	case !hasMode:
		mode = defaultFileMode
	}
	dir := filepath.Dir(full)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		if e := errnoOf(err); e == syscall.ENOTDIR || e == syscall.EEXIST {
			fail(w, &httpError{kind: errFileConflict, msg: fmt.Sprintf("a parent of %q is not a directory", rel)})
			return
		}
		fail(w, s.fileError(err, rel))
		return
	}
	tmp, err := os.CreateTemp(dir, ".sandbox-put-*.tmp")
	if err != nil {
		fail(w, s.fileError(err, rel))
		return
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	readErr, writeErr := copyCounting(tmp, r.Body)
	if readErr != nil {
		fail(w, badRequest("reading the body: "+readErr.Error()))
		return
	}
	if writeErr == nil {
		writeErr = tmp.Chmod(mode)
	}
	if cerr := tmp.Close(); writeErr == nil {
		writeErr = cerr
	}
	if writeErr != nil {
		fail(w, s.fileError(writeErr, rel))
		return
	}
	if err := os.Rename(tmp.Name(), full); err != nil {
		if e := errnoOf(err); e == syscall.EISDIR || e == syscall.EEXIST || e == syscall.ENOTEMPTY {
			fail(w, badRequest(fmt.Sprintf("%q is a directory", rel)))
			return
		}
		fail(w, s.fileError(err, rel))
		return
	}
	committed = true
	w.WriteHeader(http.StatusNoContent)
}

// deleteFile is DELETE /v1/files/{path...}.
func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) {
	q := parseQuery(r, "recursive")
	recursive := q.boolean("recursive", false)
	if q.err != nil {
		fail(w, q.err)
		return
	}
	rel := r.PathValue("path")
	if strings.IndexByte(rel, 0) >= 0 {
		fail(w, badRequest("the path contains a NUL byte"))
		return
	}
	parentRel, name := pySplit(strings.TrimRight(rel, "/"))
	if name == "" || name == "." || name == ".." {
		fail(w, badRequest("the base directory cannot be deleted"))
		return
	}
	// Resolve the parent only: the name itself is removed, not what a
	// symlink there points to.
	parent, err := s.resolveFile(parentRel)
	if err != nil {
		fail(w, err)
		return
	}
	target := filepath.Join(parent, name)
	fi, err := os.Lstat(target)
	if err != nil {
		fail(w, s.fileError(err, rel))
		return
	}
	switch {
	case fi.IsDir() && recursive:
		// Something may be creating files below it meanwhile: try again a
		// few times, then report the conflict (fileError: ENOTEMPTY → 409).
		for range 3 {
			if err = os.RemoveAll(target); errnoOf(err) != syscall.ENOTEMPTY {
				break
			}
		}
	default:
		err = os.Remove(target)
		if e := errnoOf(err); fi.IsDir() && (e == syscall.ENOTEMPTY || e == syscall.EEXIST) {
			fail(w, &httpError{kind: errFileConflict, msg: fmt.Sprintf("directory %q is not empty; use ?recursive=true", rel)})
			return
		}
	}
	if err != nil {
		fail(w, s.fileError(err, rel))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
