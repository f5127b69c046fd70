package runtime

import (
	"crypto/sha256"
	"encoding/binary"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sandbox-runtime/sandbox-runtime/shlex"
)

// CreateRequest is a request to start a managed command (protocol.md §3
// POST /v1/commands). Exactly one of Argv and Command must be set.
type CreateRequest struct {
	Argv      []string          // the argv, used as is
	Command   *string           // split like Python's shlex.split; no shell
	Envs      map[string]string // added to the runtime's environment; the request wins
	Cwd       string            // absolute existing directory; "" means the base dir
	Timeout   *float64          // seconds, > 0; nil means the default; clamped to the cap
	Stdin     bool              // give the command a stdin pipe
	CommandID string            // optional client-chosen UUID for idempotent creation
	PTY       *PTYRequest       // run on a pseudo-terminal of this size; implies stdin
	RequestID string            // the creating request's id, carried by the command's log lines; not part of its identity
	// Hold, when positive, is the output hold of the stream that follows
	// the create (Command.Hold, at cursor 0, made before the process
	// starts; TakeCreateHold). Not part of the command's identity.
	Hold time.Duration
}

// spec is a CreateRequest after defaults, splitting and clamping: two requests
// are "the same" (protocol.md §2 Identity) when their specs are equal.
//
// A retained handle keeps its spec for idempotent re-posts, but not the
// environment overrides (up to a whole request body of them, and never shown
// in a status): only their digest (retained drops the map once the process
// is started). The argv is kept, since every status reports it.
type spec struct {
	argv    []string
	envs    map[string]string // nil in a retained spec
	envsSum [sha256.Size]byte // envsDigest(envs), what equal compares
	cwd     string
	timeout time.Duration
	stdin   bool
	pty     *ptySpec // nil: pipes
}

func (s spec) equal(o spec) bool {
	return slices.Equal(s.argv, o.argv) && s.envsSum == o.envsSum &&
		s.cwd == o.cwd && s.timeout == o.timeout && s.stdin == o.stdin &&
		s.pty.equal(o.pty)
}

// retained is s without what a retained handle does not need.
func (s spec) retained() spec {
	s.envs = nil
	return s
}

// envsDigest is a SHA-256 over the overrides in name order, each name and
// value prefixed with its length, so that no two different maps collide by
// construction (only by breaking SHA-256).
func envsDigest(envs map[string]string) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	put := func(s string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		io.WriteString(h, s)
	}
	for _, k := range slices.Sorted(maps.Keys(envs)) {
		put(k)
		put(envs[k])
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// normalize validates r and returns its spec and canonical id ("" when the
// client gave none).
func (m *Manager) normalize(r CreateRequest) (spec, string, error) {
	var s spec
	id := ""
	if r.CommandID != "" {
		u, err := uuid.Parse(r.CommandID)
		if err != nil || len(r.CommandID) != 36 {
			return s, "", invalidf("command_id must be a UUID (got %q)", r.CommandID)
		}
		id = u.String()
	}
	argv, err := normalizeArgv(r)
	if err != nil {
		return s, "", err
	}
	s.argv = argv
	for k, v := range r.Envs {
		if err := checkEnvName(k); err != nil {
			return s, "", err
		}
		if strings.IndexByte(v, 0) >= 0 {
			return s, "", invalidf("an envs value contains a NUL byte (env names and values are never echoed)")
		}
	}
	s.envs = maps.Clone(r.Envs)
	if s.envs == nil {
		s.envs = map[string]string{}
	}
	s.envsSum = envsDigest(s.envs)
	s.cwd = r.Cwd
	if s.cwd == "" {
		s.cwd = m.cfg.BaseDir
	}
	if !filepath.IsAbs(s.cwd) {
		return s, "", invalidf("cwd must be an absolute path (got %q)", s.cwd)
	}
	if fi, err := os.Stat(s.cwd); err != nil || !fi.IsDir() {
		return s, "", invalidf("cwd %q is not an existing directory", s.cwd)
	}
	if s.timeout, err = m.normalizeTimeout(r.Timeout); err != nil {
		return s, "", err
	}
	s.stdin = r.Stdin
	pty, err := normalizePTY(r.PTY)
	if err != nil {
		return s, "", err
	}
	if pty != nil {
		s.pty, s.stdin = pty, true // a terminal always takes input
	}
	return s, id, nil
}

// normalizeArgv is r's argv, or its command split as a shell would:
// non-empty, argv[0] non-empty, no NUL byte.
func normalizeArgv(r CreateRequest) ([]string, error) {
	var argv []string
	switch {
	case r.Argv != nil && r.Command != nil:
		return nil, invalidf("give either argv or command, not both")
	case r.Command != nil:
		a, err := shlex.Split(*r.Command)
		if err != nil {
			return nil, invalidf("command: %v", err)
		}
		argv = a
	default:
		argv = slices.Clone(r.Argv)
	}
	if len(argv) == 0 {
		return nil, invalidf("argv must not be empty")
	}
	if argv[0] == "" {
		return nil, invalidf("argv[0] must not be empty")
	}
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, invalidf("argv[%d] contains a NUL byte", i)
		}
	}
	return argv, nil
}

// normalizeTimeout is the timeout of seconds: DefaultTimeout when nil,
// MaxTimeout at most; not a number or <= 0 is invalid.
func (m *Manager) normalizeTimeout(seconds *float64) (time.Duration, error) {
	if seconds == nil {
		return m.cfg.DefaultTimeout, nil
	}
	t := *seconds
	if math.IsNaN(t) || t <= 0 {
		return 0, invalidf("timeout must be > 0 seconds")
	}
	if t >= m.cfg.MaxTimeout.Seconds() {
		return m.cfg.MaxTimeout, nil
	}
	d := time.Duration(t * float64(time.Second))
	if d <= 0 {
		return 0, invalidf("timeout must be > 0 seconds")
	}
	return d, nil
}

func checkEnvName(k string) error {
	if k == "" {
		return invalidf("env names must not be empty")
	}
	if strings.ContainsAny(k, "=\x00") {
		// Never echoed (nor logged with the answer): a name with '=' is
		// often a whole NAME=secret put where the name goes.
		return invalidf("an envs name must not contain '=' or NUL (a NAME=value given as the name?); env names and values are never echoed")
	}
	return nil
}

// buildEnv merges base and overrides; overrides win. The order is base order
// with overridden entries replaced, then new names sorted, so it is stable.
func buildEnv(base []string, overrides map[string]string) []string {
	env := make([]string, 0, len(base)+len(overrides))
	seen := make(map[string]bool, len(overrides))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if v, ok := overrides[k]; ok {
			if !seen[k] {
				env = append(env, k+"="+v)
				seen[k] = true
			}
			continue
		}
		env = append(env, kv)
	}
	for _, k := range slices.Sorted(maps.Keys(overrides)) {
		if !seen[k] {
			env = append(env, k+"="+overrides[k])
		}
	}
	return env
}

// ParseID canonicalises a command id; anything that is not a UUID is ErrNotFound
// (protocol.md §2: an id that is not a UUID answers 404).
func ParseID(id string) (string, error) {
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 {
		return "", errorf(ErrNotFound, "no command %q", id)
	}
	return u.String(), nil
}
