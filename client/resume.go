package client

import (
	"context"
	"io"
	"time"
)

// resumeByCursor is the follow loop of every stream the client resumes by
// its cursor (a command's output, a watch, the event feed). once reads one
// window from *cursor, moving it past each event processed; done: the
// stream is over (nothing more to follow). A window that closed normally
// is followed at once by the next. After a failure the stream is re-opened
// while mayResume allows it: at once if the window moved the cursor before
// it broke, else after a backoff; the RetryFor without progress counts
// from the first break after the last progress (a stream quiet for long is
// as resumable as another). It returns nil once done, else the error that
// stopped it.
func resumeByCursor[C comparable](ctx context.Context, c *Client, cursor *C, once func() (done bool, err error)) error {
	var b backoff
	var deadline time.Time
	for {
		at := *cursor
		done, err := once()
		if err == nil && done {
			return nil
		}
		if err == nil { // the window closed: open the next one at once
			b.reset()
			deadline = time.Time{}
			continue
		}
		progressed := *cursor != at
		if progressed || deadline.IsZero() {
			b.reset()
			deadline = time.Now().Add(c.retryFor)
		}
		if !c.mayResume(ctx, err, deadline) {
			return err
		}
		if progressed {
			continue // the stream moved before it broke: re-open at once
		}
		if err := b.wait(ctx, 0); err != nil {
			return err
		}
	}
}

// withStream sends r (a request answered with a stream) once, or as send
// retries it, and hands its body to read under a context of its own:
// read's cancel ends it with a cause (ErrSilent, for a stream that went
// silent), which read reports. The body is closed and the context ended
// when read returns.
func (c *Client) withStream(ctx context.Context, r request, read func(sctx context.Context, cancel context.CancelCauseFunc, body io.Reader) error) error {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	resp, err := c.send(sctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return read(sctx, cancel, resp.Body)
}
