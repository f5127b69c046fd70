package api

import (
	"context"
	"net/http"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
)

// openNDJSON is the opening of every NDJSON stream (a command's output, the
// event feed, a watch), after its headers. The connection's unsent limit,
// write deadlines within window (plus streamEndGrace), lowered to the
// shutdown grace once shutdown starts, so that a write blocked on a client
// that does not read cannot hold shutdown (which ends a stream with an
// `end` line). The connection carries the client's next request
// (keep-alive: a new connection per stream cost each `echo hi` a TCP
// handshake and a goroutine), so done, which the caller defers, leaves it
// clean once the last line is given: one more bounded deadline for what
// net/http writes after the handler (the last line, sink.last, and the
// closing chunk; ConnState clears it once the response is complete, as
// net/http resets deadlines only with Server.WriteTimeout), the unsent
// limit back to the connection's (httpx.DefaultUnsent). A stream whose write failed has a broken connection, which
// net/http closes; once shutdown has lowered the deadline the connection
// is ending and done leaves it so.
func (s *Server) openNDJSON(w http.ResponseWriter, r *http.Request, window time.Duration) (sink *ndjsonSink, done func()) {
	conn := requestConn(r.Context())
	if conn != nil {
		httpx.LimitUnsent(conn, streamUnsentLimit)
	}
	rc := http.NewResponseController(w)
	sink = &ndjsonSink{w: w, rc: rc, bound: httpx.WriteBound{RC: rc, Wait: streamWriteWait}}
	sink.lower(time.Now().Add(window + streamEndGrace))
	stopShutdown := context.AfterFunc(s.streamsCtx, func() { sink.lower(time.Now().Add(streamShutdownGrace)) })
	return sink, func() {
		if stopShutdown() {
			sink.armDeadline()
			if conn != nil {
				httpx.LimitUnsent(conn, httpx.DefaultUnsent)
			}
		}
	}
}
