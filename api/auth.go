package api

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// tokenRecheck is how often the token file is looked at again; protocol.md §6
// wants a changed file to take effect within 5 s.
const tokenRecheck = 2 * time.Second

// tokenAuth checks bearer tokens against a file that may change while the
// runtime runs. With no file configured every request is allowed. A re-read
// that fails (the file is gone, unreadable or blank) refuses every protected
// request until a re-read succeeds, and is logged at error level each time
// (at most once per tokenRecheck).
type tokenAuth struct {
	path string
	log  *zap.Logger

	mu        sync.Mutex // guards the fields below
	token     []byte     // the file's contents without surrounding whitespace
	checkedAt time.Time
	loadErr   bool // the file could not be read: refuse everything
}

func newTokenAuth(path string, log *zap.Logger) *tokenAuth {
	return &tokenAuth{path: path, log: log}
}

// current returns the token, re-reading the file when it changed.
func (a *tokenAuth) current() ([]byte, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if !a.checkedAt.IsZero() && now.Sub(a.checkedAt) < tokenRecheck {
		return a.token, !a.loadErr
	}
	a.checkedAt = now
	// Re-read on every check: a rewrite with a token of the same size
	// within one mtime tick must not go unnoticed, and the file is tiny.
	data, err := os.ReadFile(a.path)
	tok := []byte(strings.TrimSpace(string(data)))
	if err != nil || len(tok) == 0 {
		if err == nil {
			err = errors.New("the file is empty")
		}
		a.log.Error("token file unusable: every protected request is refused until it is fixed",
			zap.String("token_file", a.path), zap.Error(err))
		a.loadErr = true // an empty or unreadable token file locks everything
		return nil, false
	}
	if a.loadErr {
		a.log.Info("token file readable again", zap.String("token_file", a.path))
	}
	a.token, a.loadErr = tok, false
	return a.token, true
}

// allowed reports whether r carries the configured token.
func (a *tokenAuth) allowed(r *http.Request) bool {
	if a.path == "" {
		return true
	}
	want, ok := a.current()
	if !ok {
		return false
	}
	scheme, got, found := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), want) == 1
}
