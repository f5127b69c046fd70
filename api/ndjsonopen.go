package api

import (
	"context"
	"net/http"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
)

// openNDJSON is the opening of the event feed's and a watch's NDJSON
// streams, after their headers: the bounds of streamNDJSON (stream.go).
// The connection's unsent limit, write deadlines within window (plus
// streamEndGrace), lowered to the shutdown grace once shutdown starts;
// done, which the caller defers, leaves the connection clean for the
// client's next request once the last line is written (one more bounded
// deadline for what net/http writes after the handler, the unsent limit
// off). Shutdown having lowered the deadline, the connection is ending and
// done leaves it so.
func (s *Server) openNDJSON(w http.ResponseWriter, r *http.Request, window time.Duration) (sink *ndjsonSink, done func()) {
	conn := requestConn(r.Context())
	if conn != nil {
		limitUnsent(conn, streamUnsentLimit)
	}
	rc := http.NewResponseController(w)
	sink = &ndjsonSink{w: w, rc: rc, bound: httpx.WriteBound{RC: rc, Wait: streamWriteWait}}
	sink.lower(time.Now().Add(window + streamEndGrace))
	stopShutdown := context.AfterFunc(s.streamsCtx, func() { sink.lower(time.Now().Add(streamShutdownGrace)) })
	return sink, func() {
		if stopShutdown() {
			sink.armDeadline()
			if conn != nil {
				limitUnsent(conn, 0)
			}
		}
	}
}
