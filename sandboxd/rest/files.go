package rest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/fsroot"
	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	sysErrno "github.com/sandbox-runtime/sandbox-runtime/internal/errno"
)

func zapPath(rel string) zap.Field { return zap.String("path", rel) }
func zapErr(err error) zap.Field   { return zap.Error(err) }

// resolve maps the decoded path of a request (the part after /v1/files/)
// to a name relative to the base dir, "" for the base dir itself. As
// upstream's pathutil.SanitizePath: the path is cleaned lexically; an
// absolute path equal to or under the base dir (as configured, or with its
// symlinks resolved) is made relative to it, and any other absolute path
// is re-rooted below it ("/etc/passwd" is <base>/etc/passwd); a relative
// path whose `..` climbs above the base dir is 403. What the name leads
// to is then resolved by os.Root (a symlink out of the base dir is 403).
func (s *Server) resolve(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", invalid("the path contains a NUL byte")
	}
	if strings.HasPrefix(p, "/") {
		c := path.Clean(p)
		for _, base := range s.bases {
			if c == base {
				return "", nil
			}
			if rest, ok := strings.CutPrefix(c, base+"/"); ok {
				return rest, nil
			}
		}
		return strings.TrimPrefix(c, "/"), nil
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", errEscape
	}
	if c == "." {
		return "", nil
	}
	return c, nil
}

// baseNames are the absolute spellings of the base dir an absolute path
// may start with: as configured (made absolute) and with its symlinks
// resolved.
func baseNames(dir string) []string {
	var out []string
	if abs, err := filepath.Abs(dir); err == nil {
		out = append(out, filepath.ToSlash(abs))
		if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
			out = append(out, filepath.ToSlash(real))
		}
	}
	return out
}

func dot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// getFile is GET and HEAD /v1/files/{path}: a regular file's bytes
// (http.ServeContent: Range, conditional requests, HEAD), or a directory's
// listing.
func (s *Server) getFile(w http.ResponseWriter, r *http.Request, p string) {
	rel, err := s.resolve(p)
	if err != nil {
		fail(w, err)
		return
	}
	root, err := s.openRoot()
	if err != nil {
		fail(w, s.classify(err, rel))
		return
	}
	defer root.Close()
	// One open through the root, refusing what is not a regular file or a
	// directory before it is opened (fsroot.OpenReadable); everything after
	// is answered from that descriptor.
	f, fi, err := fsroot.OpenReadable(root, rel, true)
	if errors.Is(err, fsroot.ErrNotFileOrDir) {
		fail(w, invalid("%q is not a regular file or a directory", p))
		return
	}
	if err != nil {
		fail(w, s.classify(err, rel))
		return
	}
	defer f.Close()
	if fi.IsDir() {
		s.listDir(w, r, root, rel, p, f, fi)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	// Each 256 KiB within 10 s (httpx.ProgressWriter): a client that never
	// reads does not hold the file and the socket.
	http.ServeContent(httpx.NewProgressWriter(w), r, "", fi.ModTime(), f)
}

type fileEntry struct {
	Name       string `json:"name"`
	Size       int64  `json:"size"`
	Type       string `json:"type"`
	ModifiedAt string `json:"modified_at"`
	Mode       string `json:"mode"`
}

// listWait is how long a listing waits for its share of the listings'
// names budget before it is refused with 503.
const listWait = httpx.WriteWait + 5*time.Second

// listDir answers the listing of the directory f, opened at rel.
// As upstream: the entries come sorted by name; an entry that is a symlink
// is described by its target, and left out when the target is missing or
// outside the base dir; "type" is "directory" for a directory and "file"
// for anything else (the spec's enum has no other value); "mode" is the 9
// permission bits in octal; "path" is the requested path with a leading
// "/". Unlike upstream: the listing streams (memory does not grow with the
// directory; all listings together hold at most fsroot.ListBudgetBytes of
// names), every write has a deadline, and the daemon's own temporary names
// (a write in progress) are never listed.
func (s *Server) listDir(w http.ResponseWriter, r *http.Request, root *os.Root, rel, p string, f *os.File, fi fs.FileInfo) {
	dir, closeDir, err := fsroot.Sub(root, rel)
	if err != nil {
		fail(w, s.classify(err, rel))
		return
	}
	defer closeDir()
	if dfi, err := dir.Stat("."); err != nil || !os.SameFile(fi, dfi) {
		fail(w, &fileErr{http.StatusConflict, CodeConflict, fmt.Sprintf("%q changed while it was being listed", p)})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), listWait)
	lease, err := s.listings.Acquire(ctx)
	cancel()
	if err != nil {
		if r.Context().Err() != nil {
			return // the client is gone
		}
		w.Header().Set("Retry-After", "1")
		WriteError(w, http.StatusServiceUnavailable, CodeResourceExhausted,
			fmt.Sprintf("too many directory listings are in progress (together they hold at most %d MiB of names); retry", fsroot.ListBudgetBytes>>20))
		return
	}
	defer lease.Release()
	shown := p
	if !strings.HasPrefix(shown, "/") {
		shown = "/" + shown
	}
	bound := &httpx.WriteBound{RC: http.NewResponseController(w), Wait: httpx.WriteWait}
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(httpx.BoundedWriter{W: w, B: bound}, 32<<10)
	bw.WriteString(`{"path":`)
	bw.Write(httpx.Marshal(shown))
	bw.WriteString(`,"entries":[`)
	n := 0
	err = fsroot.SortedEach(f, lease, func(name string) error {
		efi, err := dir.Lstat(name)
		if err != nil {
			return nil // removed meanwhile
		}
		if efi.Mode()&fs.ModeSymlink != 0 {
			// Through the base dir's root: a link to a sibling directory
			// is inside; one leading out, or nowhere, is left out.
			if efi, err = root.Stat(path.Join(dot(rel), name)); err != nil {
				return nil
			}
		}
		typ := "file"
		if efi.IsDir() {
			typ = "directory"
		}
		if n > 0 {
			bw.WriteByte(',')
		}
		n++
		_, err = bw.Write(httpx.Marshal(fileEntry{
			Name: name, Size: efi.Size(), Type: typ,
			ModifiedAt: efi.ModTime().UTC().Format(time.RFC3339),
			Mode:       fmt.Sprintf("%04o", efi.Mode().Perm()),
		}))
		return err
	})
	if err != nil {
		// The status is sent: only a cut connection tells the client that
		// the listing is not whole.
		s.log.Debug("listing cut short", zapPath(rel), zapErr(err))
		panic(http.ErrAbortHandler)
	}
	bw.WriteString("]}\n")
	bw.Flush()
}

var modePattern = regexp.MustCompile(`^0[0-7]{3}$`)

// putFile is PUT /v1/files/{path}: the raw body, or the "file" part of a
// multipart/form-data body, replaces the file atomically (temporary file,
// fsync, rename, fsync of the directory), with mode ?mode= (default 0644,
// also for a file replaced: upstream's rule). Missing parents are created
// (staged under a hidden name and renamed into place with the file: a PUT
// that fails, or is killed, leaves no parent and no temporary file).
func (s *Server) putFile(w http.ResponseWriter, r *http.Request, p string) {
	mode := fs.FileMode(0o644)
	if v := r.URL.Query().Get("mode"); v != "" {
		if !modePattern.MatchString(v) {
			fail(w, invalid("mode %q must match ^0[0-7]{3}$", v))
			return
		}
		m, _ := strconv.ParseUint(v, 8, 32)
		mode = fs.FileMode(m)
	}
	rel, err := s.resolve(p)
	if err != nil {
		fail(w, err)
		return
	}
	if rel == "" || strings.HasSuffix(p, "/") {
		fail(w, invalid("target path is a directory: a PUT names a file, without a trailing /"))
		return
	}
	if c := fsroot.Reserved(rel); c != "" {
		fail(w, invalid("%q is a reserved name (the daemon's temporary files: %s<16 hex>.tmp, %s<uuid>.tmp)", c, fsroot.TempPrefix, fsroot.UploadTempPrefix))
		return
	}
	body, err := fileBody(r)
	if err != nil {
		fail(w, err)
		return
	}
	root, err := s.openRoot()
	if err != nil {
		fail(w, s.classify(err, rel))
		return
	}
	defer root.Close()
	parent, name := path.Split(rel)
	staged, err := fsroot.Stage(root, parent, 0o755)
	if err != nil {
		if e := sysErrno.Of(err); e == syscall.ENOTDIR || e == syscall.EEXIST {
			fail(w, invalid("a parent of %q is not a directory", p))
			return
		}
		fail(w, s.classify(err, rel))
		return
	}
	defer staged.Close()
	if fi, err := staged.Dir.Lstat(name); err == nil && fi.IsDir() {
		fail(w, invalid("target path is a directory"))
		return
	}
	var readErr error
	err = fsroot.WriteAtomic(staged.Dir, name, mode, func(tmp io.Writer) error {
		var writeErr error
		readErr, writeErr = fsroot.Copy(tmp, body)
		if readErr != nil {
			return readErr
		}
		return writeErr
	})
	if err == nil {
		err = staged.Commit(name, 0o755)
	}
	switch e := sysErrno.Of(err); {
	case readErr != nil:
		fail(w, invalid("reading the body: %v", readErr))
	case e == syscall.EISDIR || e == syscall.EEXIST || e == syscall.ENOTEMPTY:
		fail(w, invalid("target path is a directory"))
	case e == syscall.ENOTDIR:
		fail(w, invalid("a parent of %q is not a directory", p))
	case err != nil:
		fail(w, s.classify(err, rel))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// MaxMultipartPreamble bounds the bytes of a multipart PUT before the
// "file" part's content starts: the preamble, every part skipped and the
// part headers. mime/multipart reads a part's header up to 10 MiB into
// memory and skips any number of parts: 60 PUTs with three parts of 9 MiB
// headers held 2.25 GB (issue 22, F3). Beyond it the PUT is 400.
const MaxMultipartPreamble = 64 << 10

// errPreamble is the budget's end under the multipart reader.
var errPreamble = errors.New("preamble too long")

// budgetReader fails with errPreamble once more than left bytes were read
// through it, until left is set to -1 (no bound: the content has begun).
type budgetReader struct {
	r    io.Reader
	left int64
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.left < 0 {
		return b.r.Read(p)
	}
	if b.left == 0 {
		return 0, errPreamble
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// fileBody is the content of a PUT: the "file" part of a
// multipart/form-data body (the other parts are skipped; what comes before
// the file part's content is bounded by MaxMultipartPreamble), or the raw
// body for any other (or no) Content-Type.
func fileBody(r *http.Request) (io.Reader, error) {
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || mt != "multipart/form-data" {
		return r.Body, nil
	}
	boundary := params["boundary"]
	if boundary == "" {
		return nil, invalid("invalid multipart body: no boundary in the Content-Type")
	}
	br := &budgetReader{r: r.Body, left: MaxMultipartPreamble}
	mr := multipart.NewReader(br, boundary)
	for {
		part, err := mr.NextPart()
		if errors.Is(err, errPreamble) {
			return nil, invalid("multipart body: more than %d KiB before the content of the %q part (preamble, other parts, part headers)", MaxMultipartPreamble>>10, "file")
		}
		if err == io.EOF {
			return nil, invalid("multipart body is missing the required %q part", "file")
		}
		if err != nil {
			return nil, invalid("invalid multipart body: %v", err)
		}
		if part.FormName() == "file" {
			br.left = -1
			return part, nil
		}
		if _, err := io.Copy(io.Discard, part); errors.Is(err, errPreamble) {
			return nil, invalid("multipart body: more than %d KiB before the content of the %q part (preamble, other parts, part headers)", MaxMultipartPreamble>>10, "file")
		}
		part.Close()
	}
}

// deleteFile is DELETE /v1/files/{path}[?recursive=true]: the name itself
// is removed (a symlink, not its target); a directory only when empty, or
// with recursive=true with everything below it, never below another mount
// (409). The base dir itself is never removed: with recursive=true its
// content is (upstream's rule), without it the answer is 409.
func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request, p string) {
	recursive := false
	if v := r.URL.Query().Get("recursive"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			fail(w, invalid("recursive %q must be a boolean", v))
			return
		}
		recursive = b
	}
	rel, err := s.resolve(p)
	if err != nil {
		fail(w, err)
		return
	}
	root, err := s.openRoot()
	if err != nil {
		fail(w, s.classify(err, rel))
		return
	}
	defer root.Close()
	if rel == "" {
		if !recursive {
			fail(w, &fileErr{http.StatusConflict, CodeConflict, "cannot delete the sandbox root; pass recursive=true to clear its contents"})
			return
		}
		s.clearRoot(w, root)
		return
	}
	parent, name := path.Split(rel)
	// The parent is opened once and the name removed relative to it; a
	// recursive removal walks descriptors without following symlinks.
	dir, closeDir, err := fsroot.Sub(root, parent)
	if err != nil {
		fail(w, s.classify(err, rel))
		return
	}
	defer closeDir()
	fi, err := dir.Lstat(name)
	if err != nil {
		fail(w, s.classify(err, rel))
		return
	}
	if fi.IsDir() && recursive {
		err = removeTree(dir, name)
	} else {
		err = dir.Remove(name)
		if e := sysErrno.Of(err); fi.IsDir() && (e == syscall.ENOTEMPTY || e == syscall.EEXIST) {
			fail(w, &fileErr{http.StatusConflict, CodeConflict, "directory is not empty; pass recursive=true to remove it"})
			return
		}
	}
	if err != nil {
		fail(w, s.removeError(err, p))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// removeTree removes name and everything below it, trying again a few
// times when something is created below it meanwhile.
func removeTree(dir *os.Root, name string) (err error) {
	for range 3 {
		if err = fsroot.RemoveAllSameMount(dir, name); sysErrno.Of(err) != syscall.ENOTEMPTY {
			return err
		}
	}
	return err
}

// removeError maps a failed removal of p.
func (s *Server) removeError(err error, p string) error {
	var pe *fs.PathError
	if errors.Is(err, fsroot.ErrMountBelow) && errors.As(err, &pe) {
		return &fileErr{http.StatusConflict, CodeConflict, fmt.Sprintf("%q has a file system mounted at %s; nothing below the mount was removed", p, pe.Path)}
	}
	if sysErrno.Of(err) == syscall.EBUSY {
		return &fileErr{http.StatusConflict, CodeConflict, fmt.Sprintf("%q is busy (a mount point?)", p)}
	}
	return s.classify(err, p)
}

// clearRoot removes everything in the base dir, keeping the directory
// itself (a volume's mount point).
func (s *Server) clearRoot(w http.ResponseWriter, root *os.Root) {
	// Names are collected a batch at a time and removed; a directory read
	// while it changes may miss names, so passes repeat until one finds
	// nothing (bounded: what is created as fast as it is removed stays).
	for range 5 {
		d, err := root.Open(".")
		if err != nil {
			fail(w, s.classify(err, ""))
			return
		}
		removed := 0
		err = fsroot.EachName(d, func(name string) error {
			removed++
			return removeTree(root, name)
		})
		d.Close()
		if err != nil {
			fail(w, s.removeError(err, "/"))
			return
		}
		if removed == 0 {
			break
		}
	}
	w.WriteHeader(http.StatusNoContent)
}
