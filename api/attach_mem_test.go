package api

import (
	goruntime "runtime"
	"testing"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// attachUnreadBound is what a WebSocket client that never reads may cost
// the daemon in live heap while it is attached (until it is dropped for
// not reading, writeWait later): the generator's read buffer (64 KiB), two
// event frames (one being written, one handed over; about 50 KiB each for
// `yes`, whose newlines are escaped), gorilla's write buffer (32 KiB) and
// the connection itself. It was 1.6 MiB with a 16-frame queue.
const attachUnreadBound = 320 << 10

// TestAttachUnreadBoundedMemory: 100 clients that attach to `yes` and never
// read cost at most attachUnreadBound each, however much output waits.
func TestAttachUnreadBoundedMemory(t *testing.T) {
	ts := newTestServer(t, func(c *runtime.Config, o *Options) {
		atQuietAPI(c, o)
		o.HeartbeatInterval = time.Minute // nobody is dropped while we measure
	})
	st := atCreate(t, ts, `{"argv":["yes"],"timeout":120}`)
	defer atDo(t, "POST", ts.URL+"/v1/commands/"+st.CommandID+"/kill", "", nil)
	c, err := ts.M.Get(st.CommandID)
	if err != nil {
		t.Fatal(err)
	}
	atWaitFor(t, "the ring to fill", func() bool { return c.NextCursor() > 4<<20 })
	heap := func() uint64 {
		var ms goruntime.MemStats
		goruntime.GC()
		goruntime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	const n = 100
	for range n {
		atDialWith(t, atSmallBufferDialer(64<<10), ts, st.CommandID, "")
	}
	// The output is there at once (the ring holds 1 MiB from cursor 0),
	// so every attachment fills what it may hold within moments; the
	// bound must hold at every sample.
	var after uint64
	for range 10 {
		time.Sleep(100 * time.Millisecond) // spacing of the samples
		after = max(after, heap())
	}
	per := (int64(after) - int64(before)) / n
	t.Logf("%d unread attachments: heap %d -> %d KiB, %d KiB each", n, before>>10, after>>10, per>>10)
	if per > attachUnreadBound {
		t.Fatalf("an unread attachment costs %d KiB of heap; want at most %d KiB", per>>10, attachUnreadBound>>10)
	}
}
