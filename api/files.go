package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/fsroot"
	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	sysErrno "github.com/sandbox-runtime/sandbox-runtime/internal/errno"
	"github.com/sandbox-runtime/sandbox-runtime/pycompat"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// Files v1 (protocol.md §3): /v1/files/{path...} reads, lists, writes and
// deletes under SANDBOX_BASE_DIR. The path is decoded by the usual URL rules
// and resolved like the legacy paths (pycompat.ResolveInBase); a result outside the base
// dir is 403 forbidden.
//
// Decisions where the contract is silent:
//   - GET of a file answers application/octet-stream through
//     http.ServeContent (Range, If-Modified-Since, HEAD); anything but a
//     regular file or a directory is 400.
//   - A listing's "path" is the requested path ("" for the base dir); an
//     entry describes the name itself, not a symlink's target (type "file",
//     "directory", "symlink" or "other"); "modified_at" is RFC 3339 UTC;
//     "mode" is the permission bits in octal ("0644"); "escaped_name", only
//     for a name that is not UTF-8, is its bytes percent-encoded. Listings
//     stream (fsroot.SortedEach) and never show the daemon's temporary
//     names (fsroot.Hidden).
//   - PUT has no size limit but the disk; the body is streamed to a
//     temporary file in the target's directory and renamed over the target,
//     so readers see the old or the new content, never a mix. The file is
//     fsynced before the rename and the directory after it: a 204 survives
//     a crash. Without ?mode= a new file gets 0644 and a replaced one keeps
//     its mode. A trailing slash, the base dir or an existing directory is
//     400; a parent that is not a directory is 409 conflict. Missing
//     parents are staged under a hidden name and renamed into place with
//     the file (fsroot.Stage): a failed or killed PUT leaves no parent.
//   - DELETE removes the name itself (a symlink, not its target). The base
//     dir cannot be deleted (400); neither can a mount point, nor
//     recursively a directory with a mount below it (409 busy).
//   - Every operation goes through the base dir opened as an os.Root
//     (pycompat.ResolveInBase), PUT and DELETE through the opened parent, so no swap of
//     a component takes it outside. Filesystem errnos map to statuses in
//     fileError, never 500 for ENOSPC, EROFS, EBUSY, EMFILE and kin.

// filesHandler is the /v1/files route's handler (methods, token), for the
// middleware to call with paths ServeMux would not take.
func (s *Server) filesHandler() http.Handler {
	for _, r := range s.routes {
		if r.Pattern == "/v1/files/{path...}" {
			return s.methodHandler(r)
		}
	}
	panic("no /v1/files route")
}

// listWait is how long a listing waits for its share of the listings'
// budget (fsroot.Budget) before it is refused with 503 too_busy: longer
// than httpx.WriteWait, so that listings whose clients stopped reading are
// cut and give their share back before a waiting one is refused.
const listWait = httpx.WriteWait + 5*time.Second

// defaultFileMode is the mode of a file created by PUT without ?mode=.
const defaultFileMode = 0o644

// A directory listing of /v1/files is wire.DirListing.
type (
	fileEntry  = wire.FileEntry
	dirListing = wire.DirListing
)

// resolveFile resolves a /v1/files path and opens the base dir; the caller
// closes in.Root.
func (s *Server) resolveFile(rel string) (pycompat.InBase, error) {
	in, err := pycompat.ResolveInBase(s.opts.BaseDir, rel)
	switch {
	case errors.Is(err, pycompat.ErrNULPath):
		return in, badRequest("the path contains a NUL byte")
	case errors.Is(err, pycompat.ErrOutside):
		return in, &httpError{kind: errForbidden, msg: fmt.Sprintf("%q is outside the base directory", rel)}
	case err != nil:
		return in, s.fileError(err, rel)
	}
	return in, nil
}

// fileError classifies an os error about rel.
func (s *Server) fileError(err error, rel string) error {
	switch errno := sysErrno.Of(err); {
	case fsroot.IsEscape(err):
		// A symlink swapped in after resolution points outside.
		return &httpError{kind: errForbidden, msg: fmt.Sprintf("%q is outside the base directory", rel)}
	case errors.Is(err, fs.ErrNotExist), errno == syscall.ENOTDIR, errno == syscall.ELOOP:
		return &httpError{kind: errNoFile, msg: fmt.Sprintf("no such file or directory: %q", rel)}
	case errors.Is(err, fs.ErrPermission):
		return &httpError{kind: errForbidden, msg: fmt.Sprintf("permission denied: %q", rel)}
	case errno == syscall.ENAMETOOLONG, errno == syscall.EINVAL:
		return badRequest(fmt.Sprintf("invalid path %q: %v", rel, errno))
	case errno == syscall.ENOTEMPTY, errno == syscall.EEXIST:
		return &httpError{kind: errFileConflict, msg: fmt.Sprintf("%q changed while it was being removed: %v", rel, errno)}
	case errno == syscall.ENOSPC, errno == syscall.EDQUOT:
		return &httpError{kind: errNoSpace, msg: fmt.Sprintf("no space left for %q: %v", rel, errno)}
	case errno == syscall.EROFS:
		return &httpError{kind: errReadOnly, msg: fmt.Sprintf("%q is on a read-only file system", rel)}
	case errno == syscall.EBUSY, errno == syscall.ETXTBSY:
		return &httpError{kind: errBusy, msg: fmt.Sprintf("%q is busy: %v", rel, errno)}
	case errno == syscall.EMFILE, errno == syscall.ENFILE:
		return &httpError{kind: errNoDescriptors, msg: fmt.Sprintf("cannot open %q now: %v", rel, errno)}
	}
	s.log.Warn("file operation failed", zap.String("path", rel), zap.Error(err))
	return err
}

// getFile is GET and HEAD /v1/files/{path...}.
func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("watch") { // a one-shot watch stream (watch.go)
		s.watchFile(w, r)
		return
	}
	if q := parseQuery(r); q.err != nil {
		fail(w, q.err)
		return
	}
	rel := r.PathValue("path")
	in, err := s.resolveFile(rel)
	if err != nil {
		fail(w, err)
		return
	}
	defer in.Root.Close()
	// One open through the root, refusing what is not a regular file or a
	// directory before it is opened (fsroot.OpenReadable); everything after
	// is answered from that descriptor.
	f, fi, err := fsroot.OpenReadable(in.Root, in.Rel, true)
	if errors.Is(err, fsroot.ErrNotFileOrDir) {
		fail(w, badRequest(fmt.Sprintf("%q is not a regular file or a directory", rel)))
		return
	}
	if err != nil {
		fail(w, s.fileError(err, rel))
		return
	}
	defer f.Close()
	if fi.IsDir() {
		s.listDir(w, r, in, f, fi, rel)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	// ServeContent copies with a small buffer: nothing is held in memory.
	// Each 256 KiB must reach the client within 10 s (httpx.ProgressWriter):
	// a client that never reads does not hold the file and the socket.
	http.ServeContent(&contentErrorWriter{ResponseWriter: httpx.NewProgressWriter(w)}, r, "", fi.ModTime(), f)
}

// contentErrorWriter turns the plain-text error answers of
// http.ServeContent (416 for an unsatisfiable Range, 412 for a failed
// precondition) into the v1 JSON error shape; every other answer passes
// through untouched (ReadFrom keeps sendfile).
type contentErrorWriter struct {
	http.ResponseWriter
	swallow bool // an error body was written; drop ServeContent's text
}

func (c *contentErrorWriter) WriteHeader(code int) {
	var kind error
	switch code {
	case http.StatusRequestedRangeNotSatisfiable:
		kind = errRangeNotSatisfiable
	case http.StatusPreconditionFailed:
		kind = errPreconditionFailed
	}
	if kind == nil || c.swallow {
		c.ResponseWriter.WriteHeader(code)
		return
	}
	c.swallow = true
	h := c.Header()
	h.Del("X-Content-Type-Options")
	msg := "the precondition of the request is not met"
	if code == http.StatusRequestedRangeNotSatisfiable {
		msg = "the requested range is not satisfiable; the size is in Content-Range"
	}
	fail(c.ResponseWriter, &httpError{kind: kind, msg: msg})
}

func (c *contentErrorWriter) Write(p []byte) (int, error) {
	if c.swallow {
		return len(p), nil
	}
	return c.ResponseWriter.Write(p)
}

func (c *contentErrorWriter) ReadFrom(src io.Reader) (int64, error) {
	if c.swallow {
		return io.Copy(io.Discard, src)
	}
	if rf, ok := c.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(struct{ io.Writer }{c.ResponseWriter}, src)
}

func (c *contentErrorWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// listDir answers the listing of the directory f (opened as fi at
// in.Rel). Names and each entry's lstat come from that very directory,
// opened as a root of its own; if a swap replaced the name between the two
// opens, the listing is refused (409) rather than mixed.
//
// The listing streams: names come sorted from fsroot.SortedEach (which
// holds at most fsroot.ListPassBytes of them), each entry is lstat'ed and
// encoded as it is written, so memory does not grow with the directory.
// HEAD answers the headers without reading the directory.
func (s *Server) listDir(w http.ResponseWriter, r *http.Request, in pycompat.InBase, f *os.File, fi fs.FileInfo, rel string) {
	dir, closeDir, err := fsroot.Sub(in.Root, in.Rel)
	if err != nil {
		fail(w, s.fileError(err, rel))
		return
	}
	defer closeDir()
	if dfi, err := dir.Stat("."); err != nil || !os.SameFile(fi, dfi) {
		fail(w, &httpError{kind: errFileConflict, msg: fmt.Sprintf("%q changed while it was being listed", rel)})
		return
	}
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		return
	}
	// All listings together hold at most fsroot.ListBudgetBytes of names:
	// one that cannot get its first share within s.listWait is refused,
	// before anything is sent.
	ctx, cancel := context.WithTimeout(r.Context(), s.listWait)
	lease, err := s.listings.Acquire(ctx)
	cancel()
	if err != nil {
		if r.Context().Err() != nil {
			return // the client is gone
		}
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusServiceUnavailable, "too_busy",
			fmt.Sprintf("too many directory listings are in progress (together they hold at most %d MiB of names); retry", fsroot.ListBudgetBytes>>20), nil)
		return
	}
	defer lease.Release()
	// Every write has a deadline (httpx.WriteBound, as the event streams'),
	// and the kernel holds little unsent: a client that stops reading is
	// cut within httpx.WriteWait and gives its share of the budget back.
	if conn := requestConn(r.Context()); conn != nil {
		httpx.LimitUnsent(conn, streamUnsentLimit)
		defer httpx.LimitUnsent(conn, httpx.DefaultUnsent)
	}
	bound := &httpx.WriteBound{RC: http.NewResponseController(w), Wait: httpx.WriteWait}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(httpx.BoundedWriter{W: w, B: bound}, 32<<10)
	bw.WriteString(`{"path":`)
	bw.Write(marshal(rel))
	bw.WriteString(`,"entries":[`)
	n := 0
	err = fsroot.SortedEach(f, lease, func(name string) error {
		fi, err := dir.Lstat(name)
		if err != nil {
			return nil // removed meanwhile
		}
		if n > 0 {
			bw.WriteByte(',')
		}
		n++
		_, err = bw.Write(marshal(entryOf(name, fi)))
		return err
	})
	if err != nil {
		// The status is sent: only a cut connection tells the client that
		// the listing is not whole (never a valid but partial array).
		s.log.Debug("listing cut short", zap.String("path", rel), zap.Error(err))
		panic(http.ErrAbortHandler)
	}
	bw.WriteString("]}")
	bw.Flush()
}

// entryOf is the listing entry of name, lstat'ed as fi.
func entryOf(name string, fi fs.FileInfo) fileEntry {
	typ := "other"
	switch m := fi.Mode(); {
	case m.IsRegular():
		typ = "file"
	case m.IsDir():
		typ = "directory"
	case m&fs.ModeSymlink != 0:
		typ = "symlink"
	}
	e := fileEntry{
		Name: name, Size: fi.Size(), Type: typ,
		ModifiedAt: fi.ModTime().UTC(),
		Mode:       fmt.Sprintf("%04o", unixPerm(fi.Mode())),
	}
	if !utf8.ValidString(name) {
		e.EscapedName = pycompat.Quote(name)
	}
	return e
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

// Limits of a path PUT may create, checked before anything is created.
const (
	nameMax = 255  // bytes per component (NAME_MAX)
	pathMax = 4095 // bytes of the absolute path (PATH_MAX less its NUL)
)

// putFile is PUT /v1/files/{path...}: the raw body replaces the file
// atomically (temporary file + fsync + rename), parents are created. A PUT
// that fails leaves nothing behind: no temporary file, no parent it created.
func (s *Server) putFile(w http.ResponseWriter, r *http.Request) {
	mode, hasMode, err := putMode(r)
	if err != nil {
		fail(w, err)
		return
	}
	rel := r.PathValue("path")
	in, err := s.resolvePut(rel)
	if err != nil {
		fail(w, err)
		return
	}
	defer in.Root.Close()
	parentRel, name := pycompat.Split(in.Rel)
	// From here on everything happens in the parent directory opened once:
	// the temporary file, its rename and its removal on failure cannot be
	// redirected by a rename of any component above it. Missing parents
	// are made under a hidden temporary name and put in place with the
	// file (fsroot.Stage): a PUT cut short, even by SIGKILL, leaves no
	// parent behind at its real name.
	staged, err := fsroot.Stage(in.Root, parentRel, 0o755)
	if err != nil {
		if e := sysErrno.Of(err); e == syscall.ENOTDIR || e == syscall.EEXIST {
			fail(w, &httpError{kind: errFileConflict, msg: fmt.Sprintf("a parent of %q is not a directory", rel)})
			return
		}
		fail(w, s.fileError(err, rel))
		return
	}
	defer staged.Close()
	mode, err = putTargetMode(staged.Dir, name, rel, mode, hasMode)
	if err != nil {
		fail(w, err)
		return
	}
	if err := s.writePut(staged.Dir, name, rel, mode, r.Body); err != nil {
		fail(w, err)
		return
	}
	if err := s.commitPut(staged, name, rel); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// putMode reads a PUT's ?mode= (octal permission bits); given is false
// without one.
func putMode(r *http.Request) (mode fs.FileMode, given bool, err error) {
	q := parseQuery(r, "mode")
	if q.err != nil || !q.has("mode") {
		return 0, false, q.err
	}
	v := q.v.Get("mode")
	p, err := strconv.ParseUint(strings.TrimPrefix(v, "0o"), 8, 32)
	if err != nil || p > 0o7777 || v == "" {
		return 0, true, badRequest(fmt.Sprintf("query parameter \"mode\" must be octal permission bits such as 0644, not %q", v))
	}
	return fileModeOf(uint32(p)), true, nil
}

// resolvePut resolves the path of a PUT and checks that it names a file
// that may be created; the caller closes in.Root.
func (s *Server) resolvePut(rel string) (pycompat.InBase, error) {
	if rel == "" || strings.HasSuffix(rel, "/") {
		return pycompat.InBase{}, badRequest(fmt.Sprintf("%q names a directory; PUT needs a file path", rel))
	}
	in, err := s.resolveFile(rel)
	if err != nil {
		return in, err
	}
	if err := checkPutPath(in, rel); err != nil {
		in.Root.Close()
		return pycompat.InBase{}, err
	}
	return in, nil
}

// checkPutPath refuses, before anything is created, a PUT of the base
// directory, a path over PATH_MAX or with a component over NAME_MAX, and
// one with a component of the daemon's temporary names (fsroot.Reserved).
func checkPutPath(in pycompat.InBase, rel string) error {
	if in.Rel == "" {
		return badRequest("the base directory cannot be written as a file")
	}
	if len(in.Full) > pathMax {
		return badRequest(fmt.Sprintf("the path %q is too long: %d bytes, at most %d", rel, len(in.Full), pathMax))
	}
	if c := fsroot.Reserved(in.Rel); c != "" {
		return badRequest(fmt.Sprintf("%q is a reserved name (the daemon's temporary files: %s<16 hex>.tmp, %s<uuid>.tmp)", c, fsroot.TempPrefix, fsroot.UploadTempPrefix))
	}
	for _, c := range fsroot.Components(in.Rel) {
		if len(c) > nameMax {
			return badRequest(fmt.Sprintf("the path %q has a component of %d bytes, at most %d", rel, len(c), nameMax))
		}
	}
	return nil
}

// putTargetMode is the mode of the file a PUT writes as name in dir: the
// one asked for, else that of the regular file it replaces, else
// defaultFileMode. A directory there is refused.
func putTargetMode(dir *os.Root, name, rel string, mode fs.FileMode, hasMode bool) (fs.FileMode, error) {
	fi, err := dir.Lstat(name)
	switch {
	case err == nil && fi.IsDir():
		return 0, badRequest(fmt.Sprintf("%q is a directory", rel))
	case err == nil && !hasMode && fi.Mode().IsRegular():
		return fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky), nil
	case !hasMode:
		return defaultFileMode, nil
	}
	return mode, nil
}

// writePut writes body as name in dir atomically (fsroot.WriteAtomic).
func (s *Server) writePut(dir *os.Root, name, rel string, mode fs.FileMode, body io.Reader) error {
	var readErr error
	err := fsroot.WriteAtomic(dir, name, mode, func(tmp io.Writer) error {
		var writeErr error
		readErr, writeErr = fsroot.Copy(tmp, body)
		if readErr != nil {
			return readErr
		}
		return writeErr
	})
	switch e := sysErrno.Of(err); {
	case readErr != nil:
		return badRequest("reading the body: " + readErr.Error())
	case e == syscall.EISDIR || e == syscall.EEXIST || e == syscall.ENOTEMPTY:
		return badRequest(fmt.Sprintf("%q is a directory", rel))
	case err != nil:
		return s.fileError(err, rel)
	}
	return nil
}

// commitPut puts the parents a PUT staged in place with the file in them.
func (s *Server) commitPut(staged *fsroot.Staged, name, rel string) error {
	err := staged.Commit(name, 0o755)
	switch e := sysErrno.Of(err); {
	case e == syscall.EISDIR || e == syscall.EEXIST || e == syscall.ENOTEMPTY:
		return badRequest(fmt.Sprintf("%q is a directory", rel))
	case e == syscall.ENOTDIR:
		return &httpError{kind: errFileConflict, msg: fmt.Sprintf("a parent of %q is not a directory", rel)}
	case err != nil:
		return s.fileError(err, rel)
	}
	return nil
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
	parentRel, name := pycompat.Split(strings.TrimRight(rel, "/"))
	if name == "" || name == "." || name == ".." {
		fail(w, badRequest("the base directory cannot be deleted"))
		return
	}
	// Resolve the parent only: the name itself is removed, not what a
	// symlink there points to.
	in, err := s.resolveFile(parentRel)
	if err != nil {
		fail(w, err)
		return
	}
	defer in.Root.Close()
	// The parent is opened once and the name removed relative to it; a
	// recursive removal walks descriptors without following symlinks.
	dir, closeDir, err := fsroot.Sub(in.Root, in.Rel)
	if err != nil {
		fail(w, s.fileError(err, rel))
		return
	}
	defer closeDir()
	fi, err := dir.Lstat(name)
	if err != nil {
		fail(w, s.fileError(err, rel))
		return
	}
	if fi.IsDir() {
		if m := mountBelow(dir, fi, pycompat.Join(in.Full, name), recursive); m != "" {
			fail(w, &httpError{kind: errBusy, msg: fmt.Sprintf("%q %s; nothing was removed", rel, m)})
			return
		}
	}
	switch {
	case fi.IsDir() && recursive:
		// Something may be creating files below it meanwhile: try again a
		// few times, then report the conflict (fileError: ENOTEMPTY → 409).
		// The removal never goes below another mount, whatever the mount
		// table said (fsroot.RemoveAllSameMount).
		for range 3 {
			if err = fsroot.RemoveAllSameMount(dir, name); sysErrno.Of(err) != syscall.ENOTEMPTY {
				break
			}
		}
		var pe *fs.PathError
		if errors.Is(err, fsroot.ErrMountBelow) && errors.As(err, &pe) {
			fail(w, &httpError{kind: errBusy, msg: fmt.Sprintf("%q has a file system mounted below it (%s); nothing below the mount was removed", rel, pe.Path)})
			return
		}
	default:
		err = dir.Remove(name)
		if e := sysErrno.Of(err); fi.IsDir() && (e == syscall.ENOTEMPTY || e == syscall.EEXIST) {
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

// mountBelow says why the directory fi (the entry at absolute path full of
// the open directory dir) must not be removed: it is a mount point (another
// device than dir, or listed in /proc/self/mountinfo, which also finds bind
// mounts of the same file system), or, when recursive, a file system is
// mounted somewhere below it, whose content a recursive removal would
// delete. "" means neither. The mount table is read by its fixed path; it
// only refuses, it never chooses what is removed.
func mountBelow(dir *os.Root, fi fs.FileInfo, full string, recursive bool) string {
	if pfi, err := dir.Stat("."); err == nil {
		a, ok1 := fi.Sys().(*syscall.Stat_t)
		b, ok2 := pfi.Sys().(*syscall.Stat_t)
		if ok1 && ok2 && a.Dev != b.Dev {
			return "is a mount point"
		}
	}
	for _, m := range mountPoints() {
		switch {
		case m == full:
			return "is a mount point"
		case recursive && strings.HasPrefix(m, full+"/"):
			return fmt.Sprintf("has a file system mounted below it (%s)", m[len(full)+1:])
		}
	}
	return ""
}

// mountPoints lists the mount points of /proc/self/mountinfo (field 5,
// octal escapes undone); nil when it cannot be read.
func mountPoints() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		out = append(out, unescapeMountinfo(f[4]))
	}
	return out
}

// unescapeMountinfo undoes the kernel's \ooo escapes (space, tab, newline,
// backslash) of a mountinfo path.
func unescapeMountinfo(p string) string {
	if !strings.Contains(p, "\\") {
		return p
	}
	var sb strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+4 <= len(p) {
			if v, err := strconv.ParseUint(p[i+1:i+4], 8, 8); err == nil {
				sb.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		sb.WriteByte(p[i])
	}
	return sb.String()
}
