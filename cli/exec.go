//go:build linux

package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"golang.org/x/term"

	srclient "github.com/sandbox-runtime/sandbox-runtime/client"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// createFlags are the flags of exec and run.
type createFlags struct {
	interactive, tty, detach bool
	envs                     envFlag
	dir                      string
	timeout                  float64
	hold                     float64
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
	holdFlag(fs, &f.hold)
	return fs, f, url, tok
}

// holdFlag defines --hold (exec, run, attach).
func holdFlag(fs *flag.FlagSet, hold *float64) {
	fs.Float64Var(hold, "hold", 0, "seconds (at most "+strconv.Itoa(wire.MaxHoldSeconds)+") the daemon may wait for this client, with nothing shown, rather than drop output the client has not shown yet: the command runs at the pace of this terminal or pipe, and nothing is lost while the client keeps reading")
}

// checkHold refuses, as a usage error, a --hold that is not a number of
// seconds from 0 to wire.MaxHoldSeconds.
func (c *cli) checkHold(fs *flag.FlagSet, hold float64) bool {
	if hold >= 0 && hold <= wire.MaxHoldSeconds { // NaN fails both
		return true
	}
	c.usageError(fs, fmt.Sprintf("--hold %v: give a number of seconds from 0 to %d", hold, wire.MaxHoldSeconds))
	return false
}

// holdDuration is a checked --hold as a duration (0: no hold).
func holdDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

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
	if !c.checkHold(fs, f.hold) {
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

const execUsage = "exec [-i] [-t] [-e K=V]… [-w DIR] [--timeout S] [--hold S] -- ARGV…"

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
	fs, f, url, tok := c.createFlagSet("run [-d] [-i] [-t] [-e K=V]… [-w DIR] [--timeout S] [--hold S] -- ARGV…",
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
		Hold:         holdDuration(f.hold),
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
				go c.execStdin(ctx, st.CommandID, &stdinFailed)
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

// execStdin forwards the local stdin to command id (exec -i) until its
// end or ctx's. A send that fails kills the command and sets failed: a
// stdin write has no offset, so one that broke off may or may not have
// been queued and cannot be sent again exactly once, and waiting would
// hang the command to its timeout.
func (c *cli) execStdin(ctx context.Context, id string, failed *atomic.Bool) {
	c.pumpStdin(func(b []byte, eof bool) error {
		_, err := c.c.Stdin(ctx, id, b, eof)
		return err
	}, pumpOptions{failed: func(err error) {
		if ctx.Err() != nil {
			return // the run is over (the command ended, or the client stops): nothing to kill
		}
		failed.Store(true)
		c.errorf("sending stdin to command %s failed (%s); a stdin write that broke off cannot be repeated safely, so the command is killed", id, reason(err))
		kctx, kcancel := context.WithTimeout(context.Background(), 10*time.Second)
		c.c.Kill(kctx, id)
		kcancel()
	}})
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
	return c.attachTo(parent, st, 0, true, true, holdDuration(f.hold))
}
