//go:build linux

package cli

// sandbox-runtime events [-f] and sandbox-runtime wait ID…: the daemon's
// lifecycle event feed (protocol.md §4 "The event feed").

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	srclient "github.com/sandbox-runtime/sandbox-runtime/client"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// exitWaitTimeout is wait's exit code when --timeout passes first (as
// timeout(1)).
const exitWaitTimeout = 124

// idList is a repeatable flag of command ids (also comma-separated).
type idList []string

func (l *idList) String() string { return strings.Join(*l, ",") }
func (l *idList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s == "" {
			return errors.New("an empty command id")
		}
		*l = append(*l, s)
	}
	return nil
}

func (c *cli) events(args []string) int {
	fs, url, tok := c.flags("events [-f] [--json] [--cursor C] [--type T,…] [--id ID]…",
		"Prints the lifecycle events the daemon holds (created, started, listening, closed, exited, expired, evicted), oldest first, one per line: "+
			"SEQ TIME TYPE COMMAND_ID and what happened. With -f, follows new events until interrupted, resuming after disconnects without losing or repeating one. "+
			"The daemon keeps the last 8,192 events; when some were lost before they were read, it says how many on stderr (and, without -f, exits 125). "+
			"The last line's cursor (--json: next_cursor) resumes where it stopped with --cursor; a cursor from before a restart of the daemon is refused.")
	follow := fs.Bool("f", false, "follow new events until interrupted")
	asJSON := fs.Bool("json", false, "print each event as its JSON object (the protocol's), one per line")
	cursor := fs.String("cursor", "", `start at this cursor (a next_cursor printed before), or "now"; default: the oldest event held`)
	types := fs.String("type", "", "only these event types, comma-separated: created, started, listening, closed, exited, expired, evicted")
	var ids idList
	fs.Var(&ids, "id", "only the events of this command (repeatable, or comma-separated)")
	if _, code, ok := c.parse(fs, url, tok, args, 0); !ok {
		return code
	}
	o := srclient.EventsOptions{Cursor: *cursor, CommandIDs: ids}
	if *types != "" {
		o.Types = strings.Split(*types, ",")
	}
	var lost int64
	fn := func(ev *wire.FeedEvent) error {
		if ev.Type == wire.FeedGap {
			lost += *ev.DroppedEvents
			c.errorf("%d events were lost before they were read: the daemon keeps only the last 8,192", *ev.DroppedEvents)
			return nil
		}
		var line []byte
		if *asJSON {
			line, _ = json.Marshal(ev)
			line = append(line, '\n')
		} else {
			line = []byte(eventLine(ev))
		}
		if !c.emit(c.stdout, line) {
			return c.writeError()
		}
		return nil
	}
	ctx := context.Background()
	var err error
	if *follow {
		_, err = c.c.FollowEvents(ctx, o, fn)
	} else {
		var next string
		next, err = c.c.Events(ctx, o, fn)
		if err == nil && !*asJSON {
			fmt.Fprintf(c.stderr, "cursor %s\n", next)
		}
	}
	if c.writeError() != nil {
		return c.writeFailed("")
	}
	if err != nil {
		if srclient.ErrorCode(err) == wire.CodeStaleCursor {
			c.errorf("the cursor %s is from before the daemon restarted: its events are gone (run events without --cursor)", *cursor)
			return ExitFailed
		}
		return c.fail(err, "")
	}
	if lost > 0 {
		return ExitFailed
	}
	return 0
}

// eventLine is the human form of a feed event.
func eventLine(ev *wire.FeedEvent) string {
	at := ""
	if ev.Time != nil {
		at = ev.Time.Local().Format("15:04:05.000")
	}
	what := ""
	switch ev.Type {
	case wire.FeedStarted:
		what = fmt.Sprintf("pid %d", ev.PID)
	case wire.FeedListening, wire.FeedClosed:
		if l := ev.Listener; l != nil {
			what = fmt.Sprintf("%s %s", l.Protocol, net.JoinHostPort(l.Address, strconv.Itoa(l.Port)))
			if l.LoopbackOnly {
				what += " (loopback only)"
			}
		}
	case wire.FeedExited:
		what = string(ev.State)
		if ev.ExitCode != nil {
			what += fmt.Sprintf(", exit code %d", *ev.ExitCode)
		}
		if ev.Signal != nil {
			what += " (" + *ev.Signal + ")"
		}
		if ev.OOMKilled != nil && *ev.OOMKilled {
			what += ", OOM-killed"
		}
		if ev.DurationSeconds != nil {
			what += fmt.Sprintf(", ran %.3fs", *ev.DurationSeconds)
		}
	}
	return strings.TrimRight(fmt.Sprintf("%d\t%s\t%-8s\t%s\t%s", ev.Seq, at, ev.Type, ev.CommandID, what), "\t") + "\n"
}

func (c *cli) wait(args []string) int {
	fs, url, tok := c.flags("wait [--any] [--timeout S] ID…",
		"Waits until every command named has ended (with --any: the first of them), prints how each ended (ID STATE, exit code N), "+
			"and exits with the exit code: with --any, that of the command that ended (the first named, when several had already ended); "+
			"otherwise 0 when all exited 0, else that of the first named that did not (128+N for signal N). "+
			"It follows the daemon's event feed: one connection whatever the number of ids. A command that is unknown or gone is an error (125).")
	anyOf := fs.Bool("any", false, "return when any one of them has ended")
	timeout := fs.Float64("timeout", 0, "give up after this many seconds (exit 124); 0: wait as long as it takes")
	rest, code, ok := c.parse(fs, url, tok, args, -2)
	if !ok {
		return code
	}
	if len(rest) == 0 {
		c.usageError(fs, "name the command ids to wait for, e.g. wait \"$ID\"")
		return ExitUsage
	}
	if *timeout < 0 || *timeout != *timeout {
		c.usageError(fs, fmt.Sprintf("--timeout %v is not a number of seconds >= 0", *timeout))
		return ExitUsage
	}
	ctx := context.Background()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*timeout*float64(time.Second)))
		defer cancel()
	}
	sts, err := c.c.WaitCommands(ctx, rest, *anyOf)
	if errors.Is(err, context.DeadlineExceeded) {
		var running []string
		for i, st := range sts {
			if st == nil {
				running = append(running, rest[i])
			}
		}
		c.errorf("the wait timed out after %gs; still running: %s", *timeout, strings.Join(running, " "))
		return exitWaitTimeout
	}
	if err != nil {
		id := ""
		if len(rest) == 1 {
			id = rest[0]
		}
		return c.fail(err, id)
	}
	exit, set := 0, false
	for _, st := range sts {
		if st == nil {
			continue
		}
		how := string(st.State)
		if st.Signal != nil {
			how += " by " + *st.Signal
		}
		n := srclient.ExitCode(st)
		fmt.Fprintf(c.stdout, "%s %s, exit code %d\n", st.CommandID, how, n)
		if !set && (*anyOf || n != 0) {
			exit, set = n, true
		}
	}
	return exit
}
