package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// Paths of the file calls are relative to the daemon's base directory
// (SANDBOX_BASE_DIR); a leading "/" is ignored, as the daemon does.

// ErrPathEscapes is returned for a path with a "." or ".." element: the
// daemon serves clean paths only, and none outside the base directory.
var ErrPathEscapes = errors.New(`sandbox paths are relative to the daemon's base directory and may not contain "." or ".." elements`)

func filePath(p string) (string, error) {
	var segs []string
	for _, s := range strings.Split(p, "/") {
		switch s {
		case "":
			continue // "a//b" is "a/b"; a leading "/" is the base dir
		case ".", "..":
			return "", fmt.Errorf("%q: %w", p, ErrPathEscapes)
		}
		segs = append(segs, url.PathEscape(s))
	}
	return "/v1/files/" + strings.Join(segs, "/"), nil
}

// ReadFile opens the file at path for reading; the caller closes it. A
// directory is ErrIsDirectory.
func (c *Client) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	fp, err := filePath(path)
	if err != nil {
		return nil, err
	}
	resp, err := c.send(ctx, request{method: "GET", path: fp, idempotent: true})
	if err != nil {
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %w", path, ErrIsDirectory)
	}
	return resp.Body, nil
}

// ListDir lists the directory at path ("" for the base dir). A file is
// an error wrapping fs.ErrInvalid.
func (c *Client) ListDir(ctx context.Context, path string) (*wire.DirListing, error) {
	fp, err := filePath(path)
	if err != nil {
		return nil, err
	}
	resp, err := c.send(ctx, request{method: "GET", path: fp, idempotent: true})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return nil, fmt.Errorf("%s is not a directory: %w", path, fs.ErrInvalid)
	}
	var l wire.DirListing
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return nil, c.describe(fmt.Errorf("reading the listing of %s: %w", path, err))
	}
	return &l, nil
}

// WriteFile writes the bytes of r to path atomically (readers see the old
// or the new content), creating parent directories. mode 0 keeps the mode
// of a file it replaces, else 0644. The body is streamed once: a failed
// upload is not retried.
func (c *Client) WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error {
	q := url.Values{}
	if mode != 0 {
		q.Set("mode", fmt.Sprintf("%04o", mode.Perm()))
	}
	fp, err := filePath(path)
	if err != nil {
		return err
	}
	req, err := c.newHTTPRequest(ctx, request{method: "PUT", path: fp, query: q})
	if err != nil {
		return err
	}
	req.Body = io.NopCloser(r)
	if sz, ok := r.(interface{ Len() int }); ok {
		req.ContentLength = int64(sz.Len())
	} else {
		req.ContentLength = -1
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.describe(err)
	}
	if resp.StatusCode/100 != 2 {
		return readError(resp)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

// Remove deletes path (a symlink itself, not its target). A non-empty
// directory needs recursive.
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	q := url.Values{}
	if recursive {
		q.Set("recursive", "true")
	}
	fp, err := filePath(path)
	if err != nil {
		return err
	}
	return c.do(ctx, request{method: http.MethodDelete, path: fp, query: q, idempotent: true}, nil)
}
