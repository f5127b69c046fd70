//go:build linux

package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	srclient "github.com/sandbox-runtime/sandbox-runtime/client"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

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
