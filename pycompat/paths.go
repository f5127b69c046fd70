package pycompat

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Path resolution shared by the legacy file routes (protocol.md §5) and
// /v1/files (§3), Python's os.path functions beneath it.
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

// ErrNULPath marks a path holding a NUL byte, which no file name can contain
// (Python's realpath refuses it with ValueError).
var ErrNULPath = errors.New("the path contains a NUL byte")

// ErrOutside marks a path that resolves outside the base directory.
var ErrOutside = errors.New("the path resolves outside the base directory")

// RealBase returns the base dir with symlinks resolved, so that the
// containment check compares like with like.
func RealBase(dir string) string {
	base := filepath.Clean(dir)
	if real, err := filepath.EvalSymlinks(base); err == nil {
		return real
	}
	return Realpath(base)
}

// ResolveUnder resolves rel (leading slashes ignored) against base like
// os.path.realpath(os.path.join(base, rel.lstrip("/"))) and reports
// ErrOutside when the result is outside base, ErrNULPath when rel holds a
// NUL byte.
func ResolveUnder(base, rel string) (string, error) {
	if strings.IndexByte(rel, 0) >= 0 {
		return "", ErrNULPath
	}
	full := Realpath(Join(base, strings.TrimLeft(rel, "/")))
	if !Within(base, full) {
		return "", ErrOutside
	}
	return full, nil
}

// InBase is a request path resolved under the base dir.
type InBase struct {
	Root *os.Root // the base dir; every operation goes through it
	Base string   // the base dir, symlinks resolved
	Full string   // the resolved path (for messages that name it)
	Rel  string   // Full relative to Base, "" for the base dir itself
}

// ResolveInBase resolves rel under baseDir (RealBase) like ResolveUnder and
// opens the base dir as an os.Root; the caller closes in.Root. Errors:
// ErrNULPath, ErrOutside, or the error of opening the base dir.
func ResolveInBase(baseDir, rel string) (InBase, error) {
	base := RealBase(baseDir)
	full, err := ResolveUnder(base, rel)
	if err != nil {
		return InBase{}, err
	}
	root, err := os.OpenRoot(base)
	if err != nil {
		return InBase{}, err
	}
	return InBase{Root: root, Base: base, Full: full, Rel: RelOf(base, full)}, nil
}

// RelOf is p (base or below it, both clean) relative to base: "" for base.
func RelOf(base, p string) string {
	if p == base {
		return ""
	}
	if base == "/" {
		return p[1:]
	}
	return p[len(base)+1:]
}

// DotIfEmpty is name, or "." (the root itself) when name is "".
func DotIfEmpty(name string) string {
	if name == "" {
		return "."
	}
	return name
}

// Within reports whether p is base or below it (both clean and absolute).
func Within(base, p string) bool {
	if base == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == base || strings.HasPrefix(p, base+"/")
}

// Realpath is Python 3.11's os.path.realpath(p, strict=False) for an
// absolute p: symlinks are resolved component by component; a component that
// cannot be lstat'ed (missing, a regular file in the middle of the path, a
// name too long) is kept literally; on a symlink loop the rest of the path is
// appended unresolved. The result is clean (no trailing slash, no `.`).
func Realpath(p string) string {
	path, _ := joinRealpath("", p, map[string]realpathSeen{})
	return filepath.Clean(path)
}

// realpathSeen records a symlink met during one Realpath: done is false
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
			path, name = Split(path)
			if name == ".." {
				path = Join(path, "..", "..")
			}
			continue
		}
		newpath := Join(path, name)
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
			return Join(newpath, rest), false // a loop: stop resolving
		}
		target, err := os.Readlink(newpath)
		if err != nil { // it changed under us; treat it as a plain name
			path = newpath
			continue
		}
		seen[newpath] = realpathSeen{}
		resolved, ok := joinRealpath(path, target, seen)
		if !ok {
			return Join(resolved, rest), false
		}
		path = resolved
		seen[newpath] = realpathSeen{path: resolved, done: true}
	}
	return path, true
}

// Join is posixpath.join.
func Join(a string, more ...string) string {
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

// Split is posixpath.split.
func Split(p string) (head, tail string) {
	i := strings.LastIndexByte(p, '/') + 1
	head, tail = p[:i], p[i:]
	if head != "" && strings.Trim(head, "/") != "" {
		head = strings.TrimRight(head, "/")
	}
	return head, tail
}
