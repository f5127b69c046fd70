package api

import (
	"context"
	"crypto/subtle"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/internal/tokenfile"
	"go.uber.org/zap"
)

// tokenRecheck is how often the token file is looked at again; protocol.md §6
// wants a changed file to take effect within 5 s.
const tokenRecheck = 2 * time.Second

// MaxTokenFileBytes bounds a token file (protocol.md §6); the rule is
// internal/tokenfile's, which the command-line client shares.
const MaxTokenFileBytes = tokenfile.MaxBytes

// ReadTokenFile reads the token of a token file, refusing what
// tokenfile.Read refuses (its doc says what), with an error that never
// contains the token.
func ReadTokenFile(path string) ([]byte, error) { return tokenfile.Read(path) }

// tokenAuth checks bearer tokens against a file that may change while the
// runtime runs. With no file configured every request is allowed.
//
// The file is read by one goroutine (run), every tokenRecheck; requests
// only load the token it last read, so no request ever waits on file I/O.
// A re-read that fails (the file is gone, unreadable, not a regular file,
// too large, blank, or a token no request can send) keeps the last good token and is logged at error
// level with the cause each time (at most once per tokenRecheck); the
// recovery is logged once. Before any good read every protected request is
// refused.
type tokenAuth struct {
	path string
	log  *zap.Logger

	read   func(string) ([]byte, error) // ReadTokenFile; a test's stand-in
	token  atomic.Pointer[[]byte]       // the last good token; nil: none yet
	failed bool                         // the last re-read failed; owned by run
	done   chan struct{}                // closed when run has returned
}

// newTokenAuth reads the file once and, with a file configured, re-reads
// it every tokenRecheck until ctx is done (stop waits for that).
func newTokenAuth(ctx context.Context, path string, log *zap.Logger) *tokenAuth {
	return newTokenAuthReading(ctx, path, log, ReadTokenFile)
}

// newTokenAuthReading is newTokenAuth reading the file with read.
func newTokenAuthReading(ctx context.Context, path string, log *zap.Logger, read func(string) ([]byte, error)) *tokenAuth {
	a := &tokenAuth{path: path, log: log, read: read, done: make(chan struct{})}
	if path == "" {
		close(a.done)
		return a
	}
	a.reload()
	go a.run(ctx)
	return a
}

func (a *tokenAuth) run(ctx context.Context) {
	defer close(a.done)
	t := time.NewTicker(tokenRecheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.reload()
		}
	}
}

// tokenStopWait bounds how long stop waits for the re-reading goroutine: a
// read that never returns (a hung network file system, a FUSE file whose
// server stopped) must not hold shutdown past its budget.
const tokenStopWait = time.Second

// stop waits (at most tokenStopWait) for the re-reading goroutine to end;
// its context must be done. A goroutine stuck in a read is left behind,
// logged: the process is about to exit.
func (a *tokenAuth) stop() {
	t := time.NewTimer(tokenStopWait)
	defer t.Stop()
	select {
	case <-a.done:
	case <-t.C:
		a.log.Warn("the token file's re-read is stuck in a read that does not return; shutting down without waiting for it",
			zap.String("token_file", a.path), zap.Duration("waited", tokenStopWait))
	}
}

// reload reads the file once. Only newTokenAuth and run call it, one at a
// time. Re-read on every tick: a rewrite with a token of the same size
// within one mtime tick must not go unnoticed, and the file is small.
func (a *tokenAuth) reload() {
	tok, err := a.read(a.path)
	if err != nil {
		kept := a.token.Load() != nil
		msg := "token file unusable: every protected request is refused until it is fixed"
		if kept {
			msg = "token file unusable: the last good token stays in force until it is fixed"
		}
		a.log.Error(msg, zap.String("token_file", a.path), zap.Error(err), zap.Bool("kept_last_token", kept))
		a.failed = true
		return
	}
	if a.failed {
		a.log.Info("token file readable again", zap.String("token_file", a.path))
		a.failed = false
	}
	a.token.Store(&tok)
}

// allowed reports whether r carries the configured token.
func (a *tokenAuth) allowed(r *http.Request) bool {
	if a.path == "" {
		return true
	}
	want := a.token.Load()
	if want == nil {
		return false
	}
	scheme, got, found := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), *want) == 1
}
