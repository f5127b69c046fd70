//go:build linux

package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	srclient "github.com/sandbox-runtime/sandbox-runtime/client"
	"github.com/sandbox-runtime/sandbox-runtime/internal/tokenfile"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// Exit codes of the client itself.
const (
	ExitUsage      = 2   // a usage error
	ExitFailed     = 125 // the client or the daemon failed (docker's convention)
	exitCannotRun  = 126
	exitNotFound   = 127
	defaultTermEnv = "xterm-256color"
	detachKey      = 0x1d // Ctrl-]: leave a terminal command running
	// detachDrain bounds how long Ctrl-] waits for what was read before it
	// to be sent; detachConfirm how long the daemon has to confirm that it
	// read it (its answer to the close frame).
	detachDrain   = 10 * time.Second
	detachConfirm = 5 * time.Second
)

// commands maps each subcommand to its function (a function, not a
// variable: the package holds no state).
func commands() map[string]func(*cli, []string) int {
	return map[string]func(*cli, []string) int{
		"exec":   (*cli).exec,
		"run":    (*cli).run,
		"ps":     (*cli).ps,
		"logs":   (*cli).logs,
		"attach": (*cli).attach,
		"kill":   (*cli).kill,
		"cp":     (*cli).cp,
		"code":   (*cli).code,
		"events": (*cli).events,
		"wait":   (*cli).wait,
		"watch":  (*cli).watch, // watch.go
	}
}

// Commands returns the subcommands' names, sorted.
func Commands() []string {
	return slices.Sorted(maps.Keys(commands()))
}

// IsCommand reports whether arg (the first argument) names a
// subcommand; anything else is for the daemon.
func IsCommand(arg string) bool { return commands()[arg] != nil }

// PrintHelp ends the daemon's --help with the client's subcommands.
func PrintHelp(w io.Writer) {
	fmt.Fprint(w, `
The same binary is the command-line client of a running daemon when its
first argument is a subcommand (each has --help; --url and --token-file
go after the subcommand):

  sandbox-runtime exec [-i] [-t] [-e K=V]… [-w DIR] [--timeout S] [--hold S] -- ARGV…
  sandbox-runtime run -d [-e K=V]… [-w DIR] [--timeout S] -- ARGV…
  sandbox-runtime ps [-q] [--state STATE]
  sandbox-runtime logs [-f] ID
  sandbox-runtime attach [--no-stdin] [--cursor N] [--hold S] ID
  sandbox-runtime kill [-s SIGNAL] ID
  sandbox-runtime cp SRC DST        (":path" is in the sandbox, "-" is stdin or stdout)
  sandbox-runtime code [--context ID] [--out DIR] [-f FILE | CODE]   (Python in a code context; -i: a REPL)
  sandbox-runtime events [-f] [--json] [--cursor C] [--type T,…] [--id ID]…
  sandbox-runtime wait [--any] [--timeout S] ID…
  sandbox-runtime watch [-r] PATH   (changes below PATH, relative to the base dir)
`)
}

// MisplacedFlags reports (after saying so on w) a command line that puts
// the client's own flags before its subcommand: "--url X ps".
func MisplacedFlags(args []string, w io.Writer) bool {
	clientFlag := false
	for i, a := range args {
		if a == "--" {
			return false
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "url" || name == "token-file") {
			clientFlag = true
			continue
		}
		if clientFlag && IsCommand(a) {
			fixed := append(append([]string{a}, args[:i]...), args[i+1:]...)
			fmt.Fprintf(w, "sandbox-runtime: the client's flags go after its subcommand: sandbox-runtime %s\n", strings.Join(fixed, " "))
			return true
		}
	}
	return false
}

// Env is what one run of the client is given of its process.
type Env struct {
	Getenv func(string) string // the environment (os.Getenv)
	Stdin  *os.File            // a file: terminal modes and sizes are read from it
	Stdout io.Writer
	Stderr io.Writer
}

// cli is one run of the client.
type cli struct {
	name   string // the subcommand
	getenv func(string) string
	stdin  *os.File
	stdout io.Writer
	stderr io.Writer

	url       string
	tokenFrom string // where the token came from, for messages; "" without one
	c         *srclient.Client

	wmu   sync.Mutex
	werr  error // the first error writing the command's output here
	ended bool  // Run has returned: what goroutines of the run still say goes nowhere

	clamped [2]int // the last window size clampWindow reported as too large

	// readFailed is set when reading the local stdin failed (not at its
	// end): exec then exits 125 unless the command failed.
	readFailed atomic.Bool
}

// Run runs the subcommand args[0] (IsCommand must hold) with the rest of
// args, and returns the exit code.
func Run(args []string, env Env) int {
	run := commands()[args[0]]
	if run == nil {
		fmt.Fprintf(env.Stderr, "sandbox-runtime: %q is not a subcommand (subcommands: %s)\n", args[0], strings.Join(Commands(), ", "))
		return ExitUsage
	}
	c := &cli{name: args[0], getenv: env.Getenv, stdin: env.Stdin, stdout: env.Stdout, stderr: env.Stderr}
	// A write to a closed pipe (| head) must come back as EPIPE, for the
	// client to stop its command, rather than kill the client by SIGPIPE.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
	defer func() {
		c.wmu.Lock()
		c.ended = true
		c.wmu.Unlock()
	}()
	return run(c, args[1:])
}

// emit writes output of the command to w (c.stdout or c.stderr). After the
// first failure it writes nothing more; it reports whether output still
// goes out.
func (c *cli) emit(w io.Writer, b []byte) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil || c.ended {
		return false
	}
	if _, err := w.Write(b); err != nil {
		which := "stdout"
		if w == c.stderr {
			which = "stderr"
		}
		c.werr = fmt.Errorf("writing to %s: %w", which, err)
		return false
	}
	return true
}

// emitter is c.stdout through emit.
type emitter struct{ c *cli }

func (e emitter) Write(b []byte) (int, error) {
	if !e.c.emit(e.c.stdout, b) {
		return 0, e.c.writeError()
	}
	return len(b), nil
}

// writeError returns the first output write error, or nil.
func (c *cli) writeError() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.werr
}

// writeFailed ends the client after an output write error: a closed pipe
// (the reader, e.g. head, has had enough) exits 141 quietly, as a shell
// pipeline expects of a program killed by SIGPIPE; any other error is said
// and exits 125. id, when not "", is a command this client started: it is
// killed, since nobody can see its output any more.
func (c *cli) writeFailed(id string) int {
	err := c.writeError()
	if id != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c.c.Kill(ctx, id) // best effort: it may have finished
		cancel()
	}
	if errors.Is(err, syscall.EPIPE) {
		return 128 + int(syscall.SIGPIPE)
	}
	if id != "" {
		c.errorf("%v; command %s was killed", err, id)
	} else {
		c.errorf("%v", err)
	}
	return ExitFailed
}

// flags returns a flag set with the connection flags; usage is the line
// after "usage: sandbox-runtime ".
func (c *cli) flags(usage, about string) (*flag.FlagSet, *string, *string) {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	url := fs.String("url", "", "the daemon's URL (default $SANDBOX_RUNTIME_URL, else "+srclient.DefaultURL+")")
	tokenFile := fs.String("token-file", "", "a file holding the bearer token (default: $SANDBOX_RUNTIME_TOKEN, else $SANDBOX_RUNTIME_TOKEN_FILE)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: sandbox-runtime %s\n\n%s\n\nflags:\n", usage, about)
		printFlags(fs)
	}
	return fs, url, tokenFile
}

// printFlags is flag.PrintDefaults spelled as the daemon's --help and the
// usage lines spell flags: one dash for a one-letter flag (-f), two for a
// word (--url). Either form is accepted.
func printFlags(fs *flag.FlagSet) {
	w := fs.Output()
	fs.VisitAll(func(f *flag.Flag) {
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		arg, usage := flag.UnquoteUsage(f)
		line := "  " + dash + f.Name
		if arg != "" {
			line += " " + arg
		}
		line += "\n      " + usage
		switch f.DefValue {
		case "", "false", "0", "[]":
		default:
			line += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintln(w, line)
	})
}

// parseFlags parses args: --help prints the usage to stdout (as the
// daemon's --help does) and a wrong flag is said with the subcommand's
// name, then the usage, on stderr.
func (c *cli) parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	usage := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(splitShortFlags(fs, args))
	fs.Usage = usage
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(c.stdout)
		fs.Usage()
		fs.SetOutput(c.stderr)
		return 0, false
	}
	fs.SetOutput(c.stderr)
	if err != nil {
		c.usageError(fs, flagErrorAsTyped(err.Error(), args))
		return ExitUsage, false
	}
	return 0, true
}

// flagErrorAsTyped puts back the dashes the flag package strips from an
// unknown flag ("--bogus" is reported as "-bogus"): the message names the
// flag as it was typed.
func flagErrorAsTyped(msg string, args []string) string {
	const prefix = "flag provided but not defined: -"
	name, ok := strings.CutPrefix(msg, prefix)
	if !ok {
		return msg
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if typed, _, _ := strings.Cut(a, "="); strings.TrimLeft(typed, "-") == name && strings.HasPrefix(typed, "-") {
			return "flag provided but not defined: " + typed
		}
	}
	return msg
}

// parse parses args and connects; it returns false (after saying why)
// when the command line is wrong. nargs is the number of positional
// arguments wanted (-1: at least one).
func (c *cli) parse(fs *flag.FlagSet, url, tokenFile *string, args []string, nargs int) (rest []string, code int, ok bool) {
	if code, ok := c.parseFlags(fs, args); !ok {
		return nil, code, false
	}
	rest = fs.Args()
	switch {
	case nargs == -1 && len(rest) == 0:
		c.usageError(fs, "name the command to run after the flags, e.g. -- echo hi")
		return nil, ExitUsage, false
	case nargs == -2: // any number: the subcommand checks
	case nargs >= 0 && len(rest) != nargs:
		c.usageError(fs, fmt.Sprintf("wants %d argument(s), got %d", nargs, len(rest)))
		return nil, ExitUsage, false
	}
	if err := c.connect(*url, *tokenFile); err != nil {
		c.errorf("%v", err)
		return nil, ExitFailed, false
	}
	return rest, 0, true
}

// splitShortFlags expands grouped one-letter boolean flags ("-it" into
// "-i", "-t") before the first argument that is not a flag, as people
// type them. A group with any other letter is left for flag to refuse.
func splitShortFlags(fs *flag.FlagSet, args []string) []string {
	isBool := func(name string) bool {
		f := fs.Lookup(name)
		if f == nil {
			return false
		}
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		return ok && b.IsBoolFlag()
	}
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			return append(out, args[i:]...)
		}
		name := strings.TrimLeft(a, "-")
		grouped := strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && len(name) > 1 && !strings.Contains(name, "=")
		for _, r := range name {
			grouped = grouped && isBool(string(r))
		}
		if !grouped {
			out = append(out, a)
			if f := fs.Lookup(name); f != nil && !isBool(name) && !strings.Contains(a, "=") && i+1 < len(args) {
				i++ // the flag's value, whatever it looks like
				out = append(out, args[i])
			}
			continue
		}
		for _, r := range name {
			out = append(out, "-"+string(r))
		}
	}
	return out
}

func (c *cli) usageError(fs *flag.FlagSet, msg string) {
	fmt.Fprintf(c.stderr, "sandbox-runtime %s: %s\n", c.name, msg)
	fs.Usage()
}

func (c *cli) errorf(format string, args ...any) {
	c.note(fmt.Sprintf("sandbox-runtime %s: %s\n", c.name, fmt.Sprintf(format, args...)))
}

// note writes a message of the client to stderr, one at a time (the
// command's output, the signal relay and the stdin pump say things from
// their own goroutines), and nothing once the run has ended.
func (c *cli) note(msg string) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.ended {
		io.WriteString(c.stderr, msg)
	}
}

// rawErrorf is errorf while the local terminal is raw (no \n to \r\n
// translation): the note gets a line of its own.
func (c *cli) rawErrorf(format string, args ...any) {
	c.note(fmt.Sprintf("\r\nsandbox-runtime %s: %s\r\n", c.name, fmt.Sprintf(format, args...)))
}

// clampWindow brings a window size over the daemon's terminal limit
// (1000 columns and rows, wire.MaxTerminalSize) down to it, and says so
// on stderr each time the size asked for changes (raw: the terminal is in
// raw mode). The daemon clamps too; saying it here tells the person why
// the program draws narrower than the window.
func (c *cli) clampWindow(cols, rows int, raw bool) (int, int) {
	wc, wr := min(cols, wire.MaxTerminalSize), min(rows, wire.MaxTerminalSize)
	if wc != cols || wr != rows {
		key := [2]int{cols, rows}
		if c.clamped != key {
			c.clamped = key
			note := c.errorf
			if raw {
				note = c.rawErrorf
			}
			note("this window is %dx%d; a terminal has at most %d columns and rows, so the command's is %dx%d", cols, rows, wire.MaxTerminalSize, wc, wr)
		}
	}
	return wc, wr
}

// connect makes the client from the flags and the environment.
func (c *cli) connect(url, tokenFile string) error {
	if url == "" {
		url = c.getenv("SANDBOX_RUNTIME_URL")
	}
	if url == "" {
		url = srclient.DefaultURL
	}
	var token string
	switch {
	case tokenFile != "":
		t, err := readToken(tokenFile)
		if err != nil {
			return err
		}
		token, c.tokenFrom = t, "--token-file "+tokenFile
	case c.getenv("SANDBOX_RUNTIME_TOKEN") != "":
		token, c.tokenFrom = strings.TrimSpace(c.getenv("SANDBOX_RUNTIME_TOKEN")), "SANDBOX_RUNTIME_TOKEN"
	case c.getenv("SANDBOX_RUNTIME_TOKEN_FILE") != "":
		f := c.getenv("SANDBOX_RUNTIME_TOKEN_FILE")
		t, err := readToken(f)
		if err != nil {
			return err
		}
		token, c.tokenFrom = t, "SANDBOX_RUNTIME_TOKEN_FILE="+f
	}
	if token != "" {
		// Refused at once: every request would fail, and the client
		// must not retry one that can never succeed.
		if err := wire.CheckToken(token); err != nil {
			return fmt.Errorf("the token from %s is unusable: %v", c.tokenFrom, err)
		}
	}
	cl, err := srclient.New(url, srclient.Options{Token: token})
	if err != nil {
		return fmt.Errorf("%v (set by --url or SANDBOX_RUNTIME_URL)", err)
	}
	c.url, c.c = cl.URL(), cl
	return nil
}

func readToken(file string) (string, error) {
	// The daemon's own checks: a FIFO or a device never blocks the read,
	// and a huge file is not read whole.
	b, err := tokenfile.Read(file)
	if err != nil {
		return "", fmt.Errorf("cannot read the token file %s: %v", file, err)
	}
	return string(b), nil
}

// fail reports err the way a person would explain it and returns the
// exit code that goes with it. id, when known, is the command concerned.
func (c *cli) fail(err error, id string) int {
	var te *srclient.TransportError
	var e *srclient.Error
	switch {
	case errors.Is(err, context.Canceled):
		c.errorf("stopped before the end: %v", err)
		return ExitFailed
	case errors.As(err, &te):
		var op *net.OpError
		if errors.Is(err, syscall.ECONNREFUSED) {
			c.errorf("cannot reach the sandbox runtime at %s: nothing is listening there. Is the daemon running? (--url or SANDBOX_RUNTIME_URL says where it is)", c.url)
		} else if errors.As(err, &op) && op.Op == "dial" {
			c.errorf("cannot reach the sandbox runtime at %s: %v", c.url, op.Err)
		} else {
			c.errorf("lost the connection to the sandbox runtime at %s: %s", c.url, reason(err))
		}
		return ExitFailed
	case errors.As(err, &e):
		switch e.Code {
		case wire.CodeUnauthorized:
			if c.tokenFrom == "" {
				c.errorf("the sandbox runtime at %s wants a token: pass --token-file FILE or set SANDBOX_RUNTIME_TOKEN", c.url)
			} else {
				c.errorf("the sandbox runtime at %s refused the token from %s", c.url, c.tokenFrom)
			}
		case wire.CodeNotFound:
			if id != "" {
				c.errorf("there is no command %s (sandbox-runtime ps lists them; a restarted daemon has forgotten those it ran before)", id)
			} else {
				c.errorf("%s", e.Message)
			}
		case wire.CodeGone:
			why := "its result expired"
			if e.Reason == wire.GoneEvicted {
				why = "it was evicted to make room for newer commands"
			}
			c.errorf("command %s is gone: %s", id, why)
		case wire.CodeSpawnFailed:
			c.errorf("%s", e.Message)
			if strings.Contains(e.Message, "not found") || strings.Contains(e.Message, "no such file") {
				return exitNotFound
			}
			return exitCannotRun
		case wire.CodeTooManyRunning:
			c.errorf("%s; try again when one has finished", e.Message)
		case wire.CodeShuttingDown:
			c.errorf("the sandbox runtime at %s is shutting down", c.url)
		case "":
			c.errorf("the sandbox runtime at %s answered HTTP %d: %s", c.url, e.StatusCode, e.Message)
		default:
			c.errorf("%s", e.Message)
		}
		return ExitFailed
	}
	c.errorf("%v", err)
	return ExitFailed
}

// reason describes err for a person: the cause of a transport error
// without Go's request line (Post "http://…": …).
func reason(err error) string {
	var te *srclient.TransportError
	if errors.As(err, &te) {
		err = te.Err
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "the connection was closed before the answer"
	}
	return err.Error()
}

// lost says, once the command has ended, that gap bytes of its output were
// lost, and returns the exit code: the command's own when it failed, else
// 125, so that a script never takes incomplete output for a success.
func (c *cli) lost(gap int64, code int) int {
	if gap == 0 {
		return code
	}
	c.errorf("%d bytes of the output (stdout and stderr together) were lost: the daemon keeps only the most recent output of a command, and it was not read fast enough; the command's own exit code was %d", gap, code)
	if code == 0 {
		return ExitFailed
	}
	return code
}

// finished reports how the command ended, when that needs saying, and
// returns the exit code.
func (c *cli) finished(st *wire.Status) int {
	sig := ""
	if st.Signal != nil {
		sig = " (" + *st.Signal + ")"
	}
	switch st.State {
	case wire.StateTimedOut:
		c.errorf("the command timed out after %gs and was killed%s", st.TimeoutSeconds, sig)
	case wire.StateCancelled:
		c.errorf("the command was killed by a kill request%s", sig)
	case wire.StateTerminated:
		c.errorf("the sandbox runtime shut down and ended the command%s", sig)
	}
	code := srclient.ExitCode(st)
	if code < 0 {
		return ExitFailed
	}
	return code
}
