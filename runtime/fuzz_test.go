package runtime

// Native Go fuzz targets for the runtime's request validation. In a plain
// `go test` run the seeds run as ordinary tests; to fuzz one:
//
//	go test ./runtime -run '^$' -fuzz '^FuzzNormalize$' -fuzztime 30s

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fzManager is a Manager that can validate requests; it starts nothing.
func fzManager(f *testing.F) *Manager {
	base := f.TempDir()
	os.Mkdir(filepath.Join(base, "sub"), 0o755)
	os.WriteFile(filepath.Join(base, "file"), nil, 0o644)
	return &Manager{cfg: Config{BaseDir: base, MaxTimeout: 300 * time.Second, DefaultTimeout: 60 * time.Second}.withDefaults()}
}

// FuzzNormalize fuzzes CreateRequest validation (normalize): it never
// panics, refuses only with ErrInvalid, and what it accepts is runnable and
// within the limits; normalizing twice gives the same spec and id.
func FuzzNormalize(f *testing.F) {
	m := fzManager(f)
	base := m.cfg.BaseDir
	f.Add("true", false, "", "A", "1", "", 1.5, true, false, "")
	f.Add("echo\x1fa b\x1f", false, "", "", "x", "/", -1.0, true, true, "6F9619FF-8B86-D011-B42D-00C04FC964FF")
	f.Add("", true, "echo 'unterminated", "A=B", "", "relative", 0.0, true, false, "{6f9619ff-8b86-d011-b42d-00c04fc964ff}")
	f.Add("", true, "  ", "\x00", "", base+"/file", math.Inf(1), true, false, "urn:uuid:6f9619ff-8b86-d011-b42d-00c04fc964ff")
	f.Add("a\x00b", false, "", "PATH", "\x00", base+"/sub", 1e-12, true, false, "x")
	f.Add("", false, "", "ü", "✓", base+"/sub/../sub", 5e-324, true, false, "")
	f.Add("", true, `echo "a b" c\ d`, "", "", "", 1e308, true, false, "")
	f.Add("\x1f", false, "", "", "", "", math.NaN(), true, false, "")
	f.Fuzz(func(t *testing.T, argvJoined string, useCommand bool, command, envK, envV, cwd string, timeout float64, hasTimeout, stdin bool, id string) {
		r := CreateRequest{Cwd: cwd, Stdin: stdin, CommandID: id}
		if useCommand {
			r.Command = &command
		}
		if argvJoined != "" || !useCommand {
			r.Argv = strings.Split(argvJoined, "\x1f")
			if argvJoined == "" {
				r.Argv = []string{}
			}
		}
		if envK != "" || envV != "" {
			r.Envs = map[string]string{envK: envV}
		}
		if hasTimeout {
			r.Timeout = &timeout
		}
		s, cid, err := m.normalize(r)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("normalize(%+v): %v does not wrap ErrInvalid", r, err)
			}
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if r.Argv != nil && r.Command != nil {
			t.Fatalf("argv and command both accepted: %+v", r)
		}
		if len(s.argv) == 0 || s.argv[0] == "" {
			t.Fatalf("empty argv accepted: %+v -> %q", r, s.argv)
		}
		for _, a := range s.argv {
			if strings.IndexByte(a, 0) >= 0 {
				t.Fatalf("NUL in argv accepted: %q", s.argv)
			}
		}
		for k, v := range s.envs {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
				t.Fatalf("bad env accepted: %q=%q", k, v)
			}
		}
		if !filepath.IsAbs(s.cwd) {
			t.Fatalf("relative cwd accepted: %q", s.cwd)
		}
		if fi, err := os.Stat(s.cwd); err != nil || !fi.IsDir() {
			t.Fatalf("cwd %q accepted but is not a directory", s.cwd)
		}
		if s.timeout <= 0 || s.timeout > m.cfg.MaxTimeout {
			t.Fatalf("timeout %v accepted (from %v)", s.timeout, r.Timeout)
		}
		if r.Timeout == nil && s.timeout != m.cfg.DefaultTimeout {
			t.Fatalf("no timeout gave %v; want the default %v", s.timeout, m.cfg.DefaultTimeout)
		}
		if id != "" {
			if len(cid) != 36 || cid != strings.ToLower(cid) || !strings.EqualFold(cid, id) {
				t.Fatalf("command_id %q canonicalised to %q", id, cid)
			}
			if again, err := ParseID(strings.ToUpper(id)); err != nil || again != cid {
				t.Fatalf("ParseID(upper %q) = %q, %v; want %q", id, again, err, cid)
			}
		} else if cid != "" {
			t.Fatalf("an id %q from nowhere", cid)
		}
		s2, cid2, err := m.normalize(r)
		if err != nil || !s.equal(s2) || cid2 != cid {
			t.Fatalf("normalize is not deterministic: %+v / %+v, %v", s, s2, err)
		}
		env := buildEnv([]string{"PATH=/bin", "A=old", "A=dup", "B=b"}, s.envs)
		for k, v := range s.envs {
			n := 0
			for _, kv := range env {
				if ek, ev, _ := strings.Cut(kv, "="); ek == k {
					n++
					if ev != v {
						t.Fatalf("buildEnv: %s=%q; want %q", k, ev, v)
					}
				}
			}
			if n != 1 {
				t.Fatalf("buildEnv: %s appears %d times in %q", k, n, env)
			}
		}
	})
}

// FuzzParseSignal fuzzes signal names and numbers: no panic, only
// ErrInvalid, and every accepted signal is 1..64; a named signal parses back
// from its name.
func FuzzParseSignal(f *testing.F) {
	for _, s := range []string{"SIGINT", "int", " sigterm ", "9", "0", "65", "-1", "SIG", "", "SIGRTMIN", "sig\x00int", "SIGSIGINT", "+2", "02", "९"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sig, err := ParseSignal(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseSignal(%q): %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		if sig < 1 || sig > 64 {
			t.Fatalf("ParseSignal(%q) = %d", s, sig)
		}
		if name, ok := signalNames[sig]; ok {
			if back, err := ParseSignal(name); err != nil || back != sig {
				t.Fatalf("ParseSignal(SignalName(%d)=%q) = %d, %v", sig, name, back, err)
			}
		}
		_ = syscall.Signal(sig)
	})
}

// FuzzParseID fuzzes command ids: anything but a 36-character UUID is
// ErrNotFound; an accepted id is canonical and stable.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"6f9619ff-8b86-d011-b42d-00c04fc964ff", "6F9619FF-8B86-D011-B42D-00C04FC964FF",
		"{6f9619ff-8b86-d011-b42d-00c04fc964ff}", "urn:uuid:6f9619ff-8b86-d011-b42d-00c04fc964ff", "6f9619ff8b86d011b42d00c04fc964ff",
		"", "x", "6f9619ff-8b86-d011-b42d-00c04fc964f\x00", "6f9619ff-8b86-d011-b42d-00c04fc964fg"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("ParseID(%q): %v does not wrap ErrNotFound", s, err)
			}
			return
		}
		if len(s) != 36 || len(id) != 36 || id != strings.ToLower(id) || !strings.EqualFold(id, s) {
			t.Fatalf("ParseID(%q) = %q", s, id)
		}
		if again, err := ParseID(id); err != nil || again != id {
			t.Fatalf("ParseID is not stable on %q: %q, %v", id, again, err)
		}
		if slices.Contains([]byte(id), 0) {
			t.Fatal("NUL in an id")
		}
	})
}
