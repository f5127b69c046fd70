package api

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Path resolution shared by the legacy file routes (protocol.md §5) and
// /v1/files (§3).
//
// A request path names a place under SANDBOX_BASE_DIR. It is resolved the way
// the legacy server did, with Python's os.path.realpath (non-strict): every
// existing symlink is followed, components that do not exist are kept as they
// are, `..` removes the component resolved so far, and a symlink loop stops
// resolution. Only then is the result compared with the (resolved) base dir,
// so a link that points outside is refused even when its target does not
// exist, and `a/../b` inside the base is fine.
//
// The resolved path only decides the answer (and the 403). The operation
// itself is then done relative to the base dir opened as an os.Root
// (package fsroot), with the resolved path made relative to it: a symlink or
// directory swapped in after resolution can make an operation fail or act on
// another file inside the base dir, never on one outside it.
//
// Confinement is a property of the answer, not a sandbox: the commands the
// runtime starts run as the same user and can read and write the same files.

// errNULPath marks a path holding a NUL byte, which no file name can contain.
var errNULPath = errors.New("the path contains a NUL byte")

// resolvedBase returns the base dir with symlinks resolved, so that the
// containment check compares like with like.
func (s *Server) resolvedBase() string {
	base := filepath.Clean(s.opts.BaseDir)
	if real, err := filepath.EvalSymlinks(base); err == nil {
		return real
	}
	return pyRealpath(base)
}

// resolveUnder resolves rel (leading slashes ignored) against base like
// os.path.realpath(os.path.join(base, rel.lstrip("/"))) and reports
// errForbidden when the result is outside base, errNULPath when rel holds a
// NUL byte.
func resolveUnder(base, rel string) (string, error) {
	if strings.IndexByte(rel, 0) >= 0 {
		return "", errNULPath
	}
	full := pyRealpath(pyJoin(base, strings.TrimLeft(rel, "/")))
	if !within(base, full) {
		return "", errForbidden
	}
	return full, nil
}

// inBase is a request path resolved under the base dir.
type inBase struct {
	root *os.Root // the base dir; every operation goes through it
	base string   // the base dir, symlinks resolved
	full string   // the resolved path (for messages that name it)
	rel  string   // full relative to base, "" for the base dir itself
}

// resolveInBase resolves rel like resolveUnder and opens the base dir as an
// os.Root; the caller closes in.root. Errors: errNULPath, errForbidden, or
// the error of opening the base dir.
func (s *Server) resolveInBase(rel string) (inBase, error) {
	base := s.resolvedBase()
	full, err := resolveUnder(base, rel)
	if err != nil {
		return inBase{}, err
	}
	root, err := os.OpenRoot(base)
	if err != nil {
		return inBase{}, err
	}
	return inBase{root: root, base: base, full: full, rel: relOf(base, full)}, nil
}

// relOf is p (base or below it, both clean) relative to base: "" for base.
func relOf(base, p string) string {
	if p == base {
		return ""
	}
	if base == "/" {
		return p[1:]
	}
	return p[len(base)+1:]
}

// dotIfEmpty is name, or "." (the root itself) when name is "".
func dotIfEmpty(name string) string {
	if name == "" {
		return "."
	}
	return name
}

// within reports whether p is base or below it (both clean and absolute).
func within(base, p string) bool {
	if base == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == base || strings.HasPrefix(p, base+"/")
}

// pyRealpath is Python 3.11's os.path.realpath(p, strict=False) for an
// absolute p: symlinks are resolved component by component; a component that
// cannot be lstat'ed (missing, a regular file in the middle of the path, a
// name too long) is kept literally; on a symlink loop the rest of the path is
// appended unresolved. The result is clean (no trailing slash, no `.`).
func pyRealpath(p string) string {
	path, _ := joinRealpath("", p, map[string]realpathSeen{})
	return filepath.Clean(path)
}

// realpathSeen records a symlink met during one pyRealpath: done is false
// while its target is being resolved (meeting it again then is a loop).
type realpathSeen struct {
	path string
	done bool
}

// joinRealpath is posixpath._joinrealpath: it joins rest onto the already
// resolved path, resolving symlinks; ok is false after a loop.
func joinRealpath(path, rest string, seen map[string]realpathSeen) (string, bool) {
	if strings.HasPrefix(rest, "/") {
		rest = rest[1:]
		path = "/"
	}
	for rest != "" {
		var name string
		name, rest, _ = strings.Cut(rest, "/")
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			if path == "" {
				path = ".."
				continue
			}
			path, name = pySplit(path)
			if name == ".." {
				path = pyJoin(path, "..", "..")
			}
			continue
		}
		newpath := pyJoin(path, name)
		fi, err := os.Lstat(newpath)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			path = newpath
			continue
		}
		if s, ok := seen[newpath]; ok {
			if s.done {
				path = s.path
				continue
			}
			return pyJoin(newpath, rest), false // a loop: stop resolving
		}
		target, err := os.Readlink(newpath)
		if err != nil { // it changed under us; treat it as a plain name
			path = newpath
			continue
		}
		seen[newpath] = realpathSeen{}
		resolved, ok := joinRealpath(path, target, seen)
		if !ok {
			return pyJoin(resolved, rest), false
		}
		path = resolved
		seen[newpath] = realpathSeen{path: resolved, done: true}
	}
	return path, true
}

// pyJoin is posixpath.join.
func pyJoin(a string, more ...string) string {
	for _, b := range more {
		switch {
		case strings.HasPrefix(b, "/"):
			a = b
		case a == "" || strings.HasSuffix(a, "/"):
			a += b
		default:
			a += "/" + b
		}
	}
	return a
}

// pySplit is posixpath.split.
func pySplit(p string) (head, tail string) {
	i := strings.LastIndexByte(p, '/') + 1
	head, tail = p[:i], p[i:]
	if head != "" && strings.Trim(head, "/") != "" {
		head = strings.TrimRight(head, "/")
	}
	return head, tail
}

// pyDecodeUTF8 decodes b like Python's bytes.decode("utf-8", "replace"):
// every maximal invalid subsequence becomes one U+FFFD.
func pyDecodeUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 16)
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			sb.WriteByte(b[i])
			i++
			continue
		}
		if r, size := utf8.DecodeRune(b[i:]); r != utf8.RuneError || size > 1 {
			sb.Write(b[i : i+size])
			i += size
			continue
		}
		sb.WriteRune(utf8.RuneError)
		i += invalidUTF8Len(b[i:])
	}
	return sb.String()
}

// invalidUTF8Len is the length of the maximal subpart of an ill-formed
// sequence at the start of b (Unicode §3.9, which Python follows).
func invalidUTF8Len(b []byte) int {
	n, lo, hi := 0, byte(0x80), byte(0xBF)
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		n = 2
	case c == 0xE0:
		n, lo = 3, 0xA0
	case c == 0xED:
		n, hi = 3, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		n = 3
	case c == 0xF0:
		n, lo = 4, 0x90
	case c >= 0xF1 && c <= 0xF3:
		n = 4
	case c == 0xF4:
		n, hi = 4, 0x8F
	default:
		return 1
	}
	i := 1
	for ; i < n && i < len(b); i++ {
		if b[i] < lo || b[i] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return i
}
