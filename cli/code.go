//go:build linux

package cli

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// Exit codes of `code` by the execution's end status.
var codeExit = map[string]int{
	wire.ExecOK:          0,
	wire.ExecError:       1,
	wire.ExecTimedOut:    124, // timeout(1)'s
	wire.ExecInterrupted: 130,
	wire.ExecStateLost:   137,
}

// codeRun is one `code` run: its context and where images go.
type codeRun struct {
	c       *cli
	ctx     string // the context id
	out     string // the directory of saved images
	images  int    // images saved so far (their names count up)
	timeout float64
}

// mimeExt names the file of an image by its MIME type.
var mimeExt = map[string]string{"image/png": ".png", "image/jpeg": ".jpg", "image/svg+xml": ".svg"}

func (c *cli) code(args []string) int {
	fs, url, tok := c.flags("code [--context ID] [--keep] [--out DIR] [--timeout S] [-f FILE | CODE] | code -i [--context ID]",
		"Runs Python code in a code context (docs/contexts.md): prints its text outputs, saves its images\n"+
			"into --out (named out-N.png, …, said on stderr) and exits 0 (ok), 1 (error), 124 (timed_out),\n"+
			"130 (interrupted) or 137 (state_lost). Without --context a fresh context is made for the run and\n"+
			"deleted after it (kept with --keep: its id is said on stderr). -i is a REPL over the context;\n"+
			"Ctrl-C interrupts the running code there.")
	ctxID := fs.String("context", "", "the `id` of the context to run in (it keeps its state between runs)")
	file := fs.String("f", "", "read the code from `file` (- for stdin)")
	keep := fs.Bool("keep", false, "keep the context made for this run")
	out := fs.String("out", ".", "the `directory` images are saved into")
	timeout := fs.Float64("timeout", 0, "`seconds` each execution may run (default: the daemon's, 60)")
	repl := fs.Bool("i", false, "a REPL: read code from stdin, one statement (or indented block ending with an empty line) at a time")
	rest, code, ok := c.parse(fs, url, tok, args, -2)
	if !ok {
		return code
	}
	var src string
	switch {
	case *repl && (*file != "" || len(rest) > 0):
		c.usageError(fs, "-i reads the code from stdin: give no CODE and no -f")
		return ExitUsage
	case *repl:
	case *file != "" && len(rest) > 0, *file == "" && len(rest) != 1:
		c.usageError(fs, "give the code as one argument, or -f FILE")
		return ExitUsage
	case *file == "-":
		b, err := io.ReadAll(c.stdin)
		if err != nil {
			c.errorf("reading stdin: %v", err)
			return ExitFailed
		}
		src = string(b)
	case *file != "":
		b, err := os.ReadFile(*file)
		if err != nil {
			c.errorf("%v", err)
			return ExitFailed
		}
		src = string(b)
	default:
		src = rest[0]
	}
	if fi, err := os.Stat(*out); err != nil || !fi.IsDir() {
		c.errorf("--out %q is not a directory", *out)
		return ExitUsage
	}
	ctx := context.Background()
	r := &codeRun{c: c, ctx: *ctxID, out: *out, timeout: *timeout}
	if r.ctx == "" {
		st, err := c.c.CreateContext(ctx, wire.ContextCreateRequest{})
		if err != nil {
			return c.fail(err, "")
		}
		r.ctx = st.ContextID
		if *keep {
			c.note(fmt.Sprintf("sandbox-runtime code: context %s\n", r.ctx))
		} else {
			defer c.c.DeleteContext(context.Background(), r.ctx)
		}
	}
	if *repl {
		return r.repl(ctx)
	}
	return r.run(ctx, src)
}

// run executes src and prints its events; the exit code follows the end.
func (r *codeRun) run(ctx context.Context, src string) int {
	c := r.c
	req := wire.ExecutionRequest{Code: src}
	if r.timeout > 0 {
		req.Timeout = &r.timeout
	}
	end, err := c.c.RunCode(ctx, r.ctx, req, r.print)
	if err != nil {
		return c.fail(err, "")
	}
	if end.Status == wire.ExecTimedOut || end.Status == wire.ExecStateLost {
		c.errorf("%s: %s", end.Status, end.Reason)
	}
	if code, ok := codeExit[end.Status]; ok {
		return code
	}
	return ExitFailed
}

// print shows one event: text as it is, a bundle's image saved to a file
// (else its text/plain), an error's traceback on stderr.
func (r *codeRun) print(ev *wire.ContextEvent) error {
	c := r.c
	switch ev.Type {
	case wire.CtxEventStdout:
		c.emit(c.stdout, []byte(ev.Text))
	case wire.CtxEventStderr:
		c.emit(c.stderr, []byte(ev.Text))
	case wire.CtxEventResult, wire.CtxEventDisplay:
		for mime, ext := range mimeExt {
			raw, ok := ev.Data[mime]
			if !ok {
				continue
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return err
			}
			data := []byte(s)
			if mime != "image/svg+xml" {
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					return fmt.Errorf("%s of event %d: %w", mime, ev.Cursor, err)
				}
				data = b
			}
			r.images++
			name := filepath.Join(r.out, fmt.Sprintf("out-%d%s", r.images, ext))
			if err := os.WriteFile(name, data, 0o644); err != nil {
				return err
			}
			c.note(fmt.Sprintf("sandbox-runtime code: %s saved to %s\n", mime, name))
			return nil
		}
		var s string
		json.Unmarshal(ev.Data["text/plain"], &s)
		c.emit(c.stdout, []byte(s+"\n"))
		for mime, n := range ev.Omitted {
			c.note(fmt.Sprintf("sandbox-runtime code: %s of %d bytes left out (over the event bound)\n", mime, n))
		}
	case wire.CtxEventError:
		c.emit(c.stderr, []byte(strings.Join(ev.Traceback, "")))
	case wire.CtxEventGap:
		c.note(fmt.Sprintf("sandbox-runtime code: events %d to %d were dropped (the output bound)\n", ev.From, ev.To))
	}
	return nil
}

// repl reads statements from stdin and runs each; Ctrl-C interrupts the
// running one. It ends at EOF with the status of the last execution.
func (r *codeRun) repl(ctx context.Context) int {
	c := r.c
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT)
	defer func() { signal.Stop(sigs); close(sigs) }() // Stop never closes it: the relay below would outlive the run
	go func() {
		for range sigs {
			c.c.InterruptContext(context.Background(), r.ctx)
		}
	}()
	in := bufio.NewScanner(c.stdin)
	in.Buffer(nil, 1<<20)
	last := 0
	prompt := func(p string) { c.emit(c.stderr, []byte(p)) }
	for {
		prompt(">>> ")
		if !in.Scan() {
			prompt("\n")
			return last
		}
		src := in.Text()
		if strings.TrimSpace(src) == "" {
			continue
		}
		if strings.HasSuffix(strings.TrimSpace(src), ":") { // a block: until an empty line
			for {
				prompt("... ")
				if !in.Scan() || in.Text() == "" {
					break
				}
				src += "\n" + in.Text()
			}
		}
		last = r.run(ctx, src)
		if last == codeExit[wire.ExecStateLost] || last == codeExit[wire.ExecTimedOut] {
			if st, err := c.c.GetContext(ctx, r.ctx); err == nil && st.State == wire.ContextStateLost {
				c.note("sandbox-runtime code: the context lost its state; restarting it (empty state)\n")
				if _, err := c.c.RestartContext(ctx, r.ctx); err != nil {
					return c.fail(err, "")
				}
			}
		}
	}
}
