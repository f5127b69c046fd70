//go:build linux

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/google/uuid"

	srclient "github.com/sandbox-runtime/sandbox-runtime/client"
)

func (c *cli) cp(args []string) int {
	fs, url, tok := c.flags("cp SRC DST", "Copies one file between here and the sandbox. A path starting with ':' is in the sandbox, relative to the daemon's base dir; '-' is stdin or stdout. A destination that is a directory gets the source's name.")
	rest, code, ok := c.parse(fs, url, tok, args, 2)
	if !ok {
		return code
	}
	src, dst := rest[0], rest[1]
	srcRemote, dstRemote := strings.HasPrefix(src, ":"), strings.HasPrefix(dst, ":")
	if srcRemote == dstRemote {
		c.usageError(fs, "exactly one of SRC and DST must be in the sandbox (start it with ':'), e.g. cp notes.txt :notes.txt")
		return ExitUsage
	}
	remote := src[1:]
	if dstRemote {
		remote = dst[1:]
	}
	if strings.HasPrefix(remote, "/") {
		// An absolute sandbox path: the files API takes paths relative to
		// the daemon's base dir, which /v1/info names. Inside it, strip it;
		// outside, refuse rather than write elsewhere.
		info, err := c.c.Info(context.Background())
		if err != nil {
			return c.fail(err, "")
		}
		base := strings.TrimRight(info.BaseDir, "/")
		clean := path.Clean(remote)
		rel, inside := strings.CutPrefix(clean, base+"/")
		if clean == base && base != "" {
			rel, inside = "", true // the base dir itself: the source's name in it
		} else if inside && strings.HasSuffix(remote, "/") {
			rel += "/" // a directory, as written
		}
		if info.BaseDir == "" || !inside {
			c.usageError(fs, fmt.Sprintf("sandbox paths are relative to the daemon's base dir %s: :%s is outside it. Give a path inside it, e.g. :%s", info.BaseDir, remote, strings.TrimLeft(remote, "/")))
			return ExitUsage
		}
		remote = rel
	}
	if srcRemote && remote == "" {
		c.usageError(fs, "name the sandbox file to copy after the ':', e.g. cp :notes.txt .")
		return ExitUsage
	}
	ctx := context.Background()
	if dstRemote {
		return c.upload(ctx, src, remote)
	}
	return c.download(ctx, remote, dst)
}

func (c *cli) upload(ctx context.Context, src, dst string) int {
	var r io.Reader = c.stdin
	var mode fs.FileMode
	name := "stdin"
	if src != "-" {
		f, err := os.Open(src)
		if err != nil {
			c.errorf("%v", err)
			return ExitFailed
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			c.errorf("%v", err)
			return ExitFailed
		}
		if fi.IsDir() {
			c.errorf("%s is a directory; cp copies single files", src)
			return ExitFailed
		}
		r, mode, name = f, fi.Mode().Perm(), filepath.Base(src)
	}
	if dst == "" || strings.HasSuffix(dst, "/") {
		if src == "-" {
			c.errorf("name the file to write in the sandbox: from stdin there is no name to give it")
			return ExitUsage
		}
		dst += name
	} else if _, err := c.c.ListDir(ctx, dst); err == nil && src != "-" {
		dst = path.Join(dst, name) // an existing directory
	}
	if err := c.c.WriteFile(ctx, dst, r, mode); err != nil {
		return c.fail(err, "")
	}
	return 0
}

func (c *cli) download(ctx context.Context, src, dst string) int {
	rc, err := c.c.ReadFile(ctx, src)
	if errors.Is(err, srclient.ErrIsDirectory) {
		c.errorf(":%s is a directory in the sandbox; cp copies single files", src)
		return ExitFailed
	}
	if err != nil {
		return c.fail(err, "")
	}
	defer rc.Close()
	if dst == "-" {
		if _, err := io.Copy(emitter{c}, rc); err != nil {
			if c.writeError() != nil {
				return c.writeFailed("")
			}
			c.errorf("copying :%s: %v", src, err)
			return ExitFailed
		}
		return 0
	}
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() || strings.HasSuffix(dst, "/") {
		dst = filepath.Join(dst, path.Base(src))
	}
	// The sandbox file's mode, under the local umask (as cp does): a
	// private key stays private, a script executable. 0666 when unknown.
	mode := fs.FileMode(0o666)
	dir := path.Dir(src)
	if dir == "." {
		dir = "" // the base dir
	}
	if l, err := c.c.ListDir(ctx, dir); err == nil {
		for _, e := range l.Entries {
			if e.Name == path.Base(src) {
				if m, err := strconv.ParseUint(e.Mode, 8, 32); err == nil {
					mode = fs.FileMode(m).Perm()
				}
			}
		}
	}
	// Write beside the target and rename: no half-written file is left
	// when the transfer breaks. Errors name dst, never the temp file.
	tmp, err := createBeside(dst, mode)
	if err != nil {
		c.errorf("cannot write %s: %v", dst, pathErr(err))
		return ExitFailed
	}
	_, err = io.Copy(tmp, rc)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		os.Remove(tmp.Name())
		c.errorf("copying :%s to %s: %v", src, dst, pathErr(err))
		return ExitFailed
	}
	return 0
}

// createBeside creates a new hidden file in dst's directory with mode
// (less the umask, applied by the kernel).
func createBeside(dst string, mode fs.FileMode) (*os.File, error) {
	for {
		name := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".part-"+uuid.NewString()[:8])
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
}

// pathErr drops the path of an *fs.PathError or *os.LinkError (the
// caller names the file a person knows).
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}
