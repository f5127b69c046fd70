package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// watchRun is one run of `sandbox-runtime watch`: what it watches and how
// far it got.
type watchRun struct {
	c         *cli
	path      string
	recursive bool
	asJSON    bool
	count     int // stop after this many change events; 0: until the watch ends
	seen      int
	id        string
}

var errEnough = errors.New("enough events")

func (c *cli) watch(args []string) int {
	fs, url, tok := c.flags("watch [-r] [--json] [--count N] PATH", "Prints the changes below PATH (relative to the daemon's base dir; \"\" or . is the base) as they happen, one line each: TYPE PATH (a rename: rename OLD -> NEW). The stream resumes by cursor across disconnects, so nothing is missed silently: an overflow or gap line says changes may have been lost and the directory should be listed again. Ctrl-C deletes the watch.")
	w := &watchRun{c: c}
	fs.BoolVar(&w.recursive, "r", false, "watch the subdirectories too")
	fs.BoolVar(&w.asJSON, "json", false, "print each event as its JSON line")
	fs.IntVar(&w.count, "count", 0, "exit after this many change events (0: until the watch ends)")
	rest, code, ok := c.parse(fs, url, tok, args, 1)
	if !ok {
		return code
	}
	w.path = strings.TrimPrefix(rest[0], ":")
	if w.path == "." {
		w.path = ""
	}
	if w.count < 0 {
		c.usageError(fs, "--count must be 0 or more")
		return ExitUsage
	}
	return w.run()
}

func (w *watchRun) run() int {
	c := w.c
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	info, err := c.c.CreateWatch(ctx, w.path, w.recursive)
	if err != nil {
		return c.fail(err, "")
	}
	w.id = info.ID
	defer c.c.DeleteWatch(context.Background(), w.id)
	fmt.Fprintf(c.stderr, "watching %q (watch %s, %d directories)\n", "/"+info.ExactPath(), info.ID, info.Dirs)
	_, err = c.c.FollowWatch(ctx, w.id, 0, w.print)
	switch {
	case err == nil, errors.Is(err, errEnough), ctx.Err() != nil:
		return 0
	}
	return c.fail(err, "")
}

// print writes one event; it stops the run after count change events.
func (w *watchRun) print(ev *wire.WatchEvent) error {
	c := w.c
	var line string
	switch {
	case w.asJSON:
		b, _ := json.Marshal(ev)
		line = string(b)
	case ev.Type == wire.EventGap:
		line = fmt.Sprintf("gap: %d events lost; list the directory again", *ev.DroppedEvents)
	case ev.Type == wire.WatchOverflow:
		line = fmt.Sprintf("overflow (%s): changes may have been missed; list the directory again", ev.Reason)
	case ev.Type == wire.WatchRename:
		line = fmt.Sprintf("rename %s -> %s", showPath(ev.ExactOldPath()), showPath(ev.ExactPath()))
	default:
		line = ev.Type + " " + showPath(ev.ExactPath())
		if ev.Dir {
			line += "/"
		}
	}
	if !c.emit(c.stdout, []byte(line+"\n")) {
		return c.writeError()
	}
	if ev.Seq != nil {
		w.seen++
	}
	if w.count > 0 && w.seen >= w.count {
		return errEnough
	}
	return nil
}

// showPath is p for a line of text: as it is, or Go-quoted when it is not
// valid UTF-8 (then "a\xff" and "a\xfe" stay apart) or holds what a
// terminal would act on (control characters, escape sequences).
func showPath(p string) string {
	if !utf8.ValidString(p) || strings.IndexFunc(p, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(p)
	}
	return p
}
