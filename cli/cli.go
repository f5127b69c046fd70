//go:build linux

package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

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

  sandbox-runtime exec [-i] [-t] [-e K=V]… [-w DIR] [--timeout S] -- ARGV…
  sandbox-runtime run -d [-e K=V]… [-w DIR] [--timeout S] -- ARGV…
  sandbox-runtime ps [-q] [--state STATE]
  sandbox-runtime logs [-f] ID
  sandbox-runtime attach [--no-stdin] [--cursor N] ID
  sandbox-runtime kill [-s SIGNAL] ID
  sandbox-runtime cp SRC DST        (":path" is in the sandbox, "-" is stdin or stdout)
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

// createFlags are the flags of exec and run.
type createFlags struct {
	interactive, tty, detach bool
	envs                     envFlag
	dir                      string
	timeout                  float64
}

type envFlag map[string]string

func (e envFlag) String() string { return "" }
func (e envFlag) Set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not K=V", kv)
	}
	e[k] = v
	return nil
}

func (c *cli) createFlagSet(usage, about string, detach bool) (*flag.FlagSet, *createFlags, *string, *string) {
	fs, url, tok := c.flags(usage, about)
	f := &createFlags{envs: envFlag{}}
	if detach {
		fs.BoolVar(&f.detach, "d", false, "start it in the background and print its id")
	}
	fs.BoolVar(&f.interactive, "i", false, "forward this terminal's stdin to the command")
	fs.BoolVar(&f.tty, "t", false, "run it on a terminal (when the daemon has them): raw local terminal, window size forwarded; implies -i")
	fs.Var(f.envs, "e", "set an environment variable K=V (repeatable)")
	fs.StringVar(&f.dir, "w", "", "the working directory (absolute; default the daemon's base dir)")
	fs.Float64Var(&f.timeout, "timeout", 0, "seconds before the command is killed (default the daemon's, 60 s)")
	return fs, f, url, tok
}

func (f *createFlags) request(argv []string) wire.CreateRequest {
	r := wire.CreateRequest{Argv: argv, Cwd: f.dir, Timeout: f.timeout, Stdin: f.interactive && !f.tty}
	if len(f.envs) > 0 {
		r.Envs = f.envs
	}
	return r
}

// maxTimeout bounds --timeout: a year (the daemon caps it much lower).
const maxTimeout = 365 * 24 * 3600

// checkCreate refuses, as usage errors, what the create could not carry
// as typed: a --timeout that is not a positive, finite number of seconds,
// and argv, -e or -w text that is not UTF-8 (JSON carries only text: it
// would arrive with U+FFFD in place of the bytes).
func (c *cli) checkCreate(fs *flag.FlagSet, f *createFlags, argv []string) bool {
	timeoutSet := false
	fs.Visit(func(fl *flag.Flag) { timeoutSet = timeoutSet || fl.Name == "timeout" })
	if timeoutSet && !(f.timeout > 0 && f.timeout <= maxTimeout) { // NaN fails both
		c.usageError(fs, fmt.Sprintf("--timeout %v: give a number of seconds above 0 and at most %d (a year)", f.timeout, maxTimeout))
		return false
	}
	notText := func(what, s string) bool {
		if utf8.ValidString(s) {
			return false
		}
		c.usageError(fs, fmt.Sprintf("%s %s is not valid UTF-8 text; the API carries text only, so it cannot be passed as it is (for a file name, let a remote shell find it, e.g. -- sh -c 'cat caf*.txt')", what, strconv.QuoteToASCII(s)))
		return true
	}
	for i, a := range argv {
		if notText(fmt.Sprintf("argument %d,", i+1), a) {
			return false
		}
	}
	for k, v := range f.envs {
		if notText("the -e name", k) || notText("the -e value of "+strconv.QuoteToASCII(k)+",", v) {
			return false
		}
	}
	return !notText("the -w directory", f.dir)
}

const execUsage = "exec [-i] [-t] [-e K=V]… [-w DIR] [--timeout S] -- ARGV…"

func (c *cli) exec(args []string) int {
	fs, f, url, tok := c.createFlagSet(execUsage, "Runs ARGV in the sandbox, streams its output here and exits with its exit code (128+N for signal N).\n\nExit status: the command's; 125 when the client or the daemon failed, and when output was lost\n(the daemon keeps only the most recent output, 1 MiB by default, and the client read too slowly)\nwhile the command itself exited 0; 126 cannot run, 127 not found, 2 usage error.\nWhen stdout is a pipe whose reader has gone (| head), the command is killed and the exit is 141\n(as SIGPIPE in a pipeline); another write error kills it too and exits 125.", false)
	argv, code, ok := c.parse(fs, url, tok, args, -1)
	if !ok {
		return code
	}
	if !c.checkCreate(fs, f, argv) {
		return ExitUsage
	}
	return c.execute(f, argv)
}

func (c *cli) run(args []string) int {
	fs, f, url, tok := c.createFlagSet("run [-d] [-i] [-t] [-e K=V]… [-w DIR] [--timeout S] -- ARGV…",
		"Like exec; with -d it starts ARGV in the background and prints its command id.", true)
	argv, code, ok := c.parse(fs, url, tok, args, -1)
	if !ok {
		return code
	}
	if !c.checkCreate(fs, f, argv) {
		return ExitUsage
	}
	if !f.detach {
		return c.execute(f, argv)
	}
	if f.tty || f.interactive {
		c.usageError(fs, "-d runs in the background: it cannot be combined with -i or -t (use attach later)")
		return ExitUsage
	}
	req := f.request(argv)
	req.CommandID = uuid.NewString()
	ctx, stop := interruptible(context.Background())
	st, err := c.c.Start(ctx, req)
	if sig := stop(); sig != nil && err != nil {
		return c.interrupted(req.CommandID, sig)
	}
	if err != nil {
		return c.fail(err, "")
	}
	fmt.Fprintln(c.stdout, st.CommandID)
	return 0
}

// execute runs a command in the foreground.
func (c *cli) execute(f *createFlags, argv []string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if f.tty {
		return c.executeTTY(ctx, f, argv)
	}
	req := f.request(argv)
	req.CommandID = uuid.NewString() // known before the create, for messages
	var stdinFailed atomic.Bool
	var early atomic.Value // the signal that ended the create
	started := make(chan string, 1)
	var lostSignal atomic.Value // a signal that could not reach the daemon
	go c.forwardSignals(ctx, started, func(sig os.Signal) { early.Store(sig); cancel() }, func(id string, sig os.Signal) {
		_, err := c.c.Signal(ctx, id, signalName(sig)) // a finished command needs no signal: an answer is moot
		var te *srclient.TransportError
		if errors.As(err, &te) {
			// Nobody to forward it to (the daemon is unreachable): the
			// person wants out, so stop rather than re-dial for 30 s.
			lostSignal.Store(sig)
			cancel()
		}
	})
	res, err := c.c.Run(ctx, req, srclient.RunOptions{
		CollectLimit: -1,
		Stdout: func(b []byte) {
			if !c.emit(c.stdout, b) {
				cancel()
			}
		},
		Stderr: func(b []byte) {
			if !c.emit(c.stderr, b) {
				cancel()
			}
		},
		OnStart: func(st *wire.Status) {
			started <- st.CommandID
			if f.interactive {
				go c.pumpStdin(func(b []byte, eof bool) error {
					_, err := c.c.Stdin(ctx, st.CommandID, b, eof)
					return err
				}, pumpOptions{failed: func(err error) {
					if ctx.Err() != nil {
						return // the run is over (the command ended, or the client stops): nothing to kill
					}
					// A stdin write has no offset: one that broke off may
					// or may not have been queued, so it cannot be sent
					// again exactly once. Waiting would hang the command
					// to its timeout: end it now.
					stdinFailed.Store(true)
					c.errorf("sending stdin to command %s failed (%s); a stdin write that broke off cannot be repeated safely, so the command is killed", st.CommandID, reason(err))
					kctx, kcancel := context.WithTimeout(context.Background(), 10*time.Second)
					c.c.Kill(kctx, st.CommandID)
					kcancel()
				}})
			}
		},
	})
	if c.writeError() != nil {
		return c.writeFailed(req.CommandID)
	}
	if sig, ok := early.Load().(os.Signal); ok && err != nil {
		return c.interrupted(req.CommandID, sig)
	}
	if sig, ok := lostSignal.Load().(os.Signal); ok && err != nil {
		c.errorf("%s could not be forwarded to command %s: the sandbox runtime at %s cannot be reached; the command may still be running", signalName(sig), req.CommandID, c.url)
		return 128 + int(sig.(syscall.Signal))
	}
	if stdinFailed.Load() {
		return ExitFailed // said, and killed, by the pump
	}
	if err != nil {
		return c.fail(err, req.CommandID)
	}
	code := c.lost(res.GapBytes, c.finished(res.Status))
	if c.readFailed.Load() && code == 0 {
		return ExitFailed // said by the pump
	}
	return code
}

// forwardSignals relays SIGINT, SIGTERM, SIGHUP and SIGQUIT to the command
// once its id arrives on started, until ctx is done. One that comes before
// (the create is still being sent or retried) goes to earlyFn instead, when
// it is set, and ends the relaying: the client stops rather than keep a
// person waiting.
func (c *cli) forwardSignals(ctx context.Context, started <-chan string, earlyFn func(os.Signal), send func(id string, sig os.Signal)) {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(ch)
	var id string
	for id == "" {
		var early chan os.Signal // nil without early: signals wait in ch meanwhile
		if earlyFn != nil {
			early = ch
		}
		select {
		case id = <-started:
		case sig := <-early:
			earlyFn(sig)
			return
		case <-ctx.Done():
			return
		}
	}
	for {
		select {
		case sig := <-ch:
			send(id, sig)
		case <-ctx.Done():
			return
		}
	}
}

// interruptible returns a context that SIGINT, SIGTERM, SIGHUP or SIGQUIT
// cancels, for the requests that create a command; stop ends the watch and
// returns the signal that came, or nil.
func interruptible(parent context.Context) (ctx context.Context, stop func() os.Signal) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	var got atomic.Value
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			got.Store(sig)
			cancel()
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() os.Signal {
		once.Do(func() { signal.Stop(ch); close(done) })
		sig, _ := got.Load().(os.Signal)
		return sig
	}
}

// interrupted ends the client after sig came while command id was being
// created: the create may have reached the daemon, so id is killed, best
// effort and briefly; the exit is 128+N, as for a shell's child.
func (c *cli) interrupted(id string, sig os.Signal) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	c.c.Kill(ctx, id)
	cancel()
	c.errorf("interrupted (%s) before the command started; command %s was killed if it had been created", signalName(sig), id)
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return ExitFailed
}

// signalName names one of the forwarded signals for the daemon.
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	if s, ok := sig.(syscall.Signal); ok {
		return strconv.Itoa(int(s))
	}
	return sig.String()
}

// pumpOptions shape pumpStdin.
type pumpOptions struct {
	// detach, when set, is called once the detach key is read (a raw
	// terminal): reading stops, what was read before the key is sent first
	// (for up to detachDrain, saying so), and detach gets how many of those
	// bytes could not be sent (0: all were).
	detach func(unsent int64)
	// noEOF: the local EOF stops forwarding without telling the command.
	noEOF bool
	// failed, when set, is called once when a send fails for a reason
	// other than the command being done with its input.
	failed func(error)
}

// pumpStdin copies this process's stdin to send until EOF, which it sends
// too (unless o.noEOF). Reading and sending are apart: a send that waits
// (for a reconnect, or a full stdin queue) neither loses nor reorders what
// is typed meanwhile, and the detach key still works while it waits. It
// stops quietly when the command no longer takes input.
func (c *cli) pumpStdin(send func(b []byte, eof bool) error, o pumpOptions) {
	type chunk struct {
		b   []byte
		eof bool
	}
	q := make(chan chunk, 256)
	var unsent atomic.Int64 // bytes read and not yet sent
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		failed := false
		for ch := range q {
			if failed {
				continue // keep draining: the reader must never block on a dead sender
			}
			err := send(ch.b, ch.eof)
			if err == nil {
				unsent.Add(-int64(len(ch.b)))
			}
			if err != nil {
				failed = true
				if errors.Is(err, net.ErrClosed) || isInputDone(err) {
					continue // the command, or this side, is done with input
				}
				if o.failed != nil {
					o.failed(err)
				} else {
					c.stdinError(err)
				}
			}
		}
	}()
	closed := false
	defer func() {
		if !closed {
			close(q)
		}
	}()
	for {
		buf := make([]byte, 64<<10)
		n, err := c.stdin.Read(buf)
		if n > 0 {
			b := buf[:n]
			if o.detach != nil {
				if i := bytes.IndexByte(b, detachKey); i >= 0 {
					if i > 0 {
						unsent.Add(int64(i))
						q <- chunk{b: b[:i]}
					}
					close(q)
					closed = true
					if n := unsent.Load(); n > 0 {
						c.rawErrorf("detaching: sending the %d bytes read before Ctrl-] first (up to %v)", n, detachDrain)
					}
					t := time.NewTimer(detachDrain)
					select {
					case <-drained:
					case <-t.C:
					}
					t.Stop()
					o.detach(unsent.Load())
					return
				}
			}
			unsent.Add(int64(n))
			q <- chunk{b: b}
		}
		if err != nil {
			if err != io.EOF {
				// The command must not take a cut input for a whole one
				// in silence; its stdin is closed all the same, as after
				// an end, so that it does not wait for ever.
				c.errorf("reading the local stdin failed, so the command's stdin was closed early: %v", pathErr(err))
				c.readFailed.Store(true)
			}
			if !o.noEOF {
				q <- chunk{eof: true}
			}
			return
		}
	}
}

// cbreak turns off canonical input and echo on terminal fd (keys arrive
// one by one, unseen); signals and output processing stay. It returns the
// function that restores the terminal.
func cbreak(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	t := *old
	t.Lflag &^= unix.ICANON | unix.ECHO
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }) }, nil
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

// isInputDone reports an error that says the command takes no more input.
func isInputDone(err error) bool {
	switch srclient.ErrorCode(err) {
	case wire.CodeFinished, wire.CodeStdinClosed:
		return true
	}
	return false
}

func (c *cli) stdinError(err error) {
	c.errorf("forwarding stdin: %v", err)
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

// executeTTY runs a command on a terminal, attached over WebSocket.
func (c *cli) executeTTY(parent context.Context, f *createFlags, argv []string) int {
	ctx, stop := interruptible(parent)
	info, err := c.c.Info(ctx)
	if err != nil {
		if sig := stop(); sig != nil {
			return 128 + int(sig.(syscall.Signal))
		}
		return c.fail(err, "")
	}
	if !info.HasFeature(wire.FeaturePTY) {
		c.errorf("the sandbox runtime at %s (version %s) has no terminals: its /v1/info does not list the %q feature. Run without -t (add -i to forward stdin)", c.url, info.Version, wire.FeaturePTY)
		return ExitFailed
	}
	in := int(c.stdin.Fd())
	if !term.IsTerminal(in) {
		c.errorf("-t needs a terminal, and stdin is not one. Run without -t (add -i to forward stdin)")
		return ExitFailed
	}
	out := in
	if o, ok := c.stdout.(*os.File); ok && term.IsTerminal(int(o.Fd())) {
		out = int(o.Fd())
	}
	cols, rows, err := term.GetSize(out)
	if err != nil || cols <= 0 || rows <= 0 {
		cols, rows = 80, 24
	}
	req := f.request(argv)
	termName := c.getenv("TERM")
	if termName == "" {
		termName = defaultTermEnv
	}
	cols, rows = c.clampWindow(cols, rows, false)
	req.PTY = &wire.PTYRequest{Cols: cols, Rows: rows, Term: termName}
	req.CommandID = uuid.NewString()
	st, err := c.c.Start(ctx, req)
	if sig := stop(); sig != nil && err != nil {
		return c.interrupted(req.CommandID, sig)
	}
	if err != nil {
		return c.fail(err, "")
	}
	return c.attachTo(parent, st, 0, true, true)
}

// attachTo follows command st over WebSocket from cursor until it exits,
// forwarding stdin (raw, when it is a terminal and the command has one),
// window sizes and signals. It returns the exit code; the detach key
// (Ctrl-], on a terminal) returns 0 and leaves the command running.
//
// owned: this client started the command (exec -t), so it kills it when
// its output can no longer be written here.
func (c *cli) attachTo(ctx context.Context, st *wire.Status, cursor int64, withStdin, owned bool) int {
	a, err := c.c.Attach(ctx, st.CommandID, cursor)
	if err != nil {
		return c.fail(err, st.CommandID)
	}
	defer a.Close()
	in := int(c.stdin.Fd())
	pty := st.PTY != nil
	restore := func() {}
	if pty && term.IsTerminal(in) {
		old, err := term.MakeRaw(in)
		if err == nil {
			var once sync.Once
			restore = func() { once.Do(func() { term.Restore(in, old) }) }
			defer restore()
		}
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		resize := func() {
			if cols, rows, err := term.GetSize(in); err == nil && cols > 0 && rows > 0 {
				cols, rows = c.clampWindow(cols, rows, true)
				if _, err := c.c.Resize(ctx, st.CommandID, cols, rows); err != nil && !isInputDone(err) && ctx.Err() == nil {
					c.rawErrorf("the window size %dx%d did not reach the command: %v", cols, rows, reason(err))
				}
			}
		}
		if st.PTY.Cols != 0 {
			// This terminal's size, not the one the command had: attach
			// may come from another window than the one that started it.
			if cols, rows, err := term.GetSize(in); err == nil && (cols != st.PTY.Cols || rows != st.PTY.Rows) {
				resize()
			}
		}
		go func() {
			for range winch {
				resize()
			}
		}()
	}
	detached := make(chan struct{})   // closed when the detach key is read
	detachDone := make(chan struct{}) // closed once detachLost is set
	var detachLost string             // why input read before the key may not have arrived
	// inputLost: a frame was refused or a send failed, so the command may
	// not have seen everything that was typed or piped: never exit 0.
	var inputLost atomic.Bool
	if withStdin && (pty || (st.Stdin && !st.StdinClosed)) {
		// A local EOF on a pipe or /dev/null (attach ID </dev/null) says
		// that there is nothing to type, not that a person pressed
		// Ctrl-D: a terminal command is left alone.
		o := pumpOptions{noEOF: pty && !term.IsTerminal(in), failed: func(err error) {
			c.stdinError(err)
			inputLost.Store(true)
		}}
		if term.IsTerminal(in) {
			// Raw: Ctrl-] at once; a pipe command on a cooked terminal:
			// Ctrl-] then Enter (the line is the terminal's until then).
			o.detach = func(unsent int64) {
				close(detached)
				switch {
				case unsent > 0:
					detachLost = fmt.Sprintf("%d bytes read before Ctrl-] were not sent: the command did not read them within %v", unsent, detachDrain)
					a.Close()
				case !a.Detach(detachConfirm): // ends the Next below
					detachLost = fmt.Sprintf("the daemon did not confirm within %v that it read everything sent before Ctrl-]", detachConfirm)
				}
				close(detachDone)
			}
		}
		go c.pumpStdin(a.Stdin, o)
	} else if term.IsTerminal(in) {
		// No input to forward (--no-stdin, or a command without stdin),
		// but a person at a terminal who wants to stop watching without
		// Ctrl-C (forwarded: it would end the command; in raw mode it is
		// only a key): read keys one by one for Ctrl-]. A pipe command's
		// terminal goes to cbreak: echo off, signals and output as they
		// were.
		ok := pty // already raw
		if !pty {
			if undo, err := cbreak(in); err == nil {
				restore, ok = undo, true
				defer restore()
			}
		}
		if ok {
			go func() {
				buf := make([]byte, 256)
				for {
					n, err := c.stdin.Read(buf)
					if bytes.IndexByte(buf[:n], detachKey) >= 0 {
						close(detached)
						close(detachDone)
						a.Close()
						return
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}
	started := make(chan string, 1)
	started <- st.CommandID
	// Signals go over HTTP, not as frames: a frame would wait behind the
	// stdin frames in front of it, which wait for the command to read.
	go c.forwardSignals(ctx, started, nil, func(id string, sig os.Signal) {
		if _, err := c.c.Signal(ctx, id, signalName(sig)); err != nil && !isInputDone(err) && ctx.Err() == nil {
			c.rawErrorf("%s did not reach the command: %v", signalName(sig), reason(err))
		}
	})
	var gap int64 // output bytes lost
	for {
		ev, err := a.Next(ctx)
		if err != nil {
			restore()
			select {
			case <-detached:
				if f, ok := c.stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
					// The cursor is wherever the command left it (after
					// its prompt): start the note on a line of its own.
					fmt.Fprintln(c.stderr)
				}
				<-detachDone
				c.errorf("detached from %s, which goes on running; sandbox-runtime attach %s comes back to it", st.CommandID, st.CommandID)
				if detachLost != "" {
					c.errorf("%s; exiting %d", detachLost, ExitFailed)
					return ExitFailed
				}
				return 0
			default:
			}
			return c.fail(err, st.CommandID)
		}
		switch ev.Type {
		case wire.EventOutput:
			b, _ := ev.Bytes()
			w := c.stdout
			if ev.Stream == wire.StreamStderr {
				w = c.stderr
			}
			if !c.emit(w, b) {
				restore()
				if owned {
					return c.writeFailed(st.CommandID)
				}
				return c.writeFailed("")
			}
		case wire.EventGap:
			gap += *ev.DroppedBytes
		case wire.EventError:
			if ev.Error.Code != wire.CodeFinished && ev.Error.Code != wire.CodeStdinClosed {
				c.errorf("the daemon refused a frame: %s", ev.Error.Message)
				inputLost.Store(true)
			}
		case wire.EventExit:
			restore() // before the note, which wants a cooked terminal
			code := c.lost(gap, c.finished(ev.Status))
			if inputLost.Load() && code == 0 {
				c.errorf("the command exited 0, but not all of the input or frames sent to it arrived (see above); exiting %d", ExitFailed)
				return ExitFailed
			}
			return code
		}
	}
}

func (c *cli) attach(args []string) int {
	fs, url, tok := c.flags("attach [--no-stdin] [--cursor N] ID", "Attaches to a running command: shows its retained output (on a terminal, the screen) and what follows, forwards stdin (when the command has it; its end closes a pipe command's stdin, and on a terminal command only stops the forwarding), signals and, on a terminal, every key and the window size; Ctrl-] detaches and leaves it running. Exits with the command's exit code.")
	noStdin := fs.Bool("no-stdin", false, "do not forward stdin (the command's stays open)")
	cursor := fs.Int64("cursor", -1, "show the output from this cursor on (default: the oldest byte still retained)")
	rest, code, ok := c.parse(fs, url, tok, args, 1)
	if !ok {
		return code
	}
	ctx := context.Background()
	st, err := c.c.Get(ctx, rest[0])
	if err != nil {
		return c.fail(err, rest[0])
	}
	from := st.RetainedFrom
	if *cursor >= 0 {
		from = *cursor
	}
	return c.attachTo(ctx, st, from, !*noStdin, false)
}

func (c *cli) ps(args []string) int {
	fs, url, tok := c.flags("ps [-q] [--state STATE]", "Lists the commands the daemon holds, oldest first.")
	quiet := fs.Bool("q", false, "print only the command ids")
	state := fs.String("state", "", "only commands in this state: running, exited, cancelled, timed_out, terminated")
	if _, code, ok := c.parse(fs, url, tok, args, 0); !ok {
		return code
	}
	switch wire.State(*state) {
	case "", wire.StateRunning, wire.StateExited, wire.StateCancelled, wire.StateTimedOut, wire.StateTerminated:
	default:
		c.usageError(fs, fmt.Sprintf("--state %q is not a state: running, exited, cancelled, timed_out or terminated", *state))
		return ExitUsage
	}
	list, err := c.c.List(context.Background(), wire.State(*state))
	if err != nil {
		return c.fail(err, "")
	}
	if *quiet {
		for _, st := range list {
			fmt.Fprintln(c.stdout, st.CommandID)
		}
		return 0
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "COMMAND ID\tSTATE\tEXIT\tCREATED\tCOMMAND")
	now := time.Now()
	for _, st := range list {
		exit := ""
		if st.ExitCode != nil {
			exit = strconv.Itoa(srclient.ExitCode(&st))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%s\n", st.CommandID, st.State, exit, ago(now.Sub(st.CreatedAt)), shortArgv(st.Argv))
	}
	tw.Flush()
	return 0
}

func ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	}
	return fmt.Sprintf("%dh", int(d.Hours()))
}

// shortArgv quotes argv for a person, cut to 60 characters.
func shortArgv(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		// Quoted (control bytes escaped) when a shell would need it, or
		// when it holds what a terminal would act on (escape sequences).
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`") || strings.IndexFunc(a, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			b.WriteString(strconv.Quote(a))
		} else {
			b.WriteString(a)
		}
	}
	s := []rune(b.String())
	if len(s) > 60 {
		return string(s[:59]) + "…"
	}
	return string(s)
}

func (c *cli) logs(args []string) int {
	fs, url, tok := c.flags("logs [-f] ID", "Prints the output the daemon holds of a command (stdout here, stderr to stderr); with -f, follows it until the command ends, resuming after disconnects, says how it ended when a timeout, a kill or the daemon's shutdown ended it, and exits with its exit code as attach does.")
	follow := fs.Bool("f", false, "follow the output until the command ends")
	rest, code, ok := c.parse(fs, url, tok, args, 1)
	if !ok {
		return code
	}
	id := rest[0]
	var gap int64
	fn := func(ev *wire.Event) error {
		if ev.Type == wire.EventGap {
			gap += *ev.DroppedBytes
			return nil
		}
		b, _ := ev.Bytes()
		w := c.stdout
		if ev.Stream == wire.StreamStderr {
			w = c.stderr
		}
		if !c.emit(w, b) {
			return c.writeError()
		}
		return nil
	}
	var err error
	var final *wire.Status
	if *follow {
		final, err = c.c.Follow(context.Background(), id, 0, fn)
	} else {
		_, _, err = c.c.Output(context.Background(), id, 0, fn)
	}
	if c.writeError() != nil {
		return c.writeFailed("") // the command is not this client's to kill
	}
	if err != nil {
		return c.fail(err, id)
	}
	if final != nil {
		// -f followed it to its end: say how it ended, as exec and attach do.
		return c.lost(gap, c.finished(final))
	}
	if gap > 0 {
		c.errorf("%d bytes of the output (stdout and stderr together) are missing: the daemon keeps only the most recent output of a command", gap)
		return ExitFailed
	}
	return 0
}

func (c *cli) kill(args []string) int {
	fs, url, tok := c.flags("kill [-s SIGNAL] ID", "Ends a command and its process group (SIGTERM, SIGKILL after the grace) and prints how it ended; with -s, sends that signal instead (SIGINT, INT or 2).")
	sig := fs.String("s", "", "send this signal instead of killing")
	rest, code, ok := c.parse(fs, url, tok, args, 1)
	if !ok {
		return code
	}
	id := rest[0]
	ctx := context.Background()
	if *sig != "" {
		if _, err := c.c.Signal(ctx, id, *sig); err != nil {
			if srclient.ErrorCode(err) == wire.CodeFinished {
				c.errorf("command %s has already finished", id)
				return ExitFailed
			}
			return c.fail(err, id)
		}
		return 0
	}
	st, err := c.c.Kill(ctx, id)
	if err != nil {
		return c.fail(err, id)
	}
	how := string(st.State)
	if st.Signal != nil {
		how += " by " + *st.Signal
	}
	if st.ExitCode != nil {
		how += fmt.Sprintf(", exit code %d", srclient.ExitCode(st))
	}
	fmt.Fprintf(c.stdout, "%s %s\n", st.CommandID, how)
	return 0
}

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
