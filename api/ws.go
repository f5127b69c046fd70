package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/httpx"
)

// The opening of every WebSocket route (attach, the event feed, a watch's
// events): admission under the attach connection limit, then the upgrade
// with the route's buffer sizes, the kernel socket sizes and the unsent
// bound. What runs on the connection afterwards is the route's own.

// wsShape is what the routes' upgrades differ by.
type wsShape struct {
	readBuffer, writeBuffer int  // gorilla's buffers (the write one pooled: attachWriteBuffers)
	recvBuffer              bool // also shrink the kernel receive buffer to attachRecvBuffer
}

// wsConn is an admitted, upgraded WebSocket with the keep-alive timings of
// attachTimings. release ends the connection's count against the attach
// limit; the caller defers it.
type wsConn struct {
	conn                            *websocket.Conn
	release                         func()
	pingPeriod, pongWait, writeWait time.Duration
}

// openWebSocket admits r's connection (refused as plain JSON past the
// limit) and upgrades it with shape; not ok when it was refused or the
// upgrade failed (either has answered, and nothing is left to release).
func (s *Server) openWebSocket(w http.ResponseWriter, r *http.Request, shape wsShape) (wsConn, bool) {
	release, ok := s.conns.admitAttach(requestConn(r.Context()))
	if !ok {
		s.conns.refuseAttach(w)
		return wsConn{}, false
	}
	ws := wsConn{release: release}
	ws.pingPeriod, ws.pongWait, ws.writeWait = attachTimings(s.opts.HeartbeatInterval)
	ws.conn, ok = s.upgradeWebSocket(w, r, ws.writeWait, shape)
	if !ok {
		release()
		return wsConn{}, false
	}
	return ws, true
}

// upgradeWebSocket upgrades r to a WebSocket with shape's buffers and the
// attached socket sizes; not ok when the upgrade failed (it has answered).
func (s *Server) upgradeWebSocket(w http.ResponseWriter, r *http.Request, writeWait time.Duration, shape wsShape) (*websocket.Conn, bool) {
	up := websocket.Upgrader{
		HandshakeTimeout: writeWait,
		ReadBufferSize:   shape.readBuffer,
		WriteBufferSize:  shape.writeBuffer,
		WriteBufferPool:  &attachWriteBuffers,
		CheckOrigin:      s.origins.allows, // the middleware refused foreign origins already
		Error:            upgradeError,
	}
	// The upgrade response is written by gorilla on the hijacked connection:
	// carry the headers the middleware set.
	hdr := http.Header{}
	for _, k := range []string{"Sandbox-Runtime-Version", "X-Request-ID"} {
		if v := w.Header().Get(k); v != "" {
			hdr.Set(k, v)
		}
	}
	conn, err := up.Upgrade(w, r, hdr)
	if err != nil {
		return nil, false
	}
	if tc, ok := conn.NetConn().(interface {
		SetWriteBuffer(int) error
		SetReadBuffer(int) error
	}); ok { // a *net.TCPConn, or httpx.BoundWrites's connection of one
		tc.SetWriteBuffer(attachSendBuffer)
		if shape.recvBuffer {
			tc.SetReadBuffer(attachRecvBuffer)
		}
	}
	httpx.LimitUnsent(conn.NetConn(), streamUnsentLimit) // pings and the close frame do not wait behind a full buffer
	return conn, true
}

// readControls sets up a's connection for its reader: the read limit, a
// read deadline that any frame (a pong included) extends by pongWait, and
// pings and close frames answered through the writer (a.control), not from
// the reader.
func (a *attachment) readControls(limit int64) {
	a.conn.SetReadLimit(limit)
	a.conn.SetReadDeadline(time.Now().Add(a.pongWait))
	a.conn.SetPongHandler(func(string) error {
		return a.conn.SetReadDeadline(time.Now().Add(a.pongWait))
	})
	a.conn.SetPingHandler(func(data string) error {
		a.control(wsFrame{kind: websocket.PongMessage, data: []byte(data)})
		return nil
	})
	a.conn.SetCloseHandler(func(code int, _ string) error {
		var msg []byte
		if code != websocket.CloseNoStatusReceived {
			msg = websocket.FormatCloseMessage(code, "")
		}
		a.control(wsFrame{kind: websocket.CloseMessage, data: msg})
		return nil
	})
}

// newAttachment is the attachment of an event stream over ws, its channels
// made; the route sets what is its own (the command, cursor and stdin
// feeder of an attach). cancel ends its generator.
func (s *Server) newAttachment(ws wsConn, log *zap.Logger, cancel context.CancelFunc) *attachment {
	return &attachment{
		s: s, conn: ws.conn, log: log,
		pingPeriod: ws.pingPeriod, pongWait: ws.pongWait, writeWait: ws.writeWait,
		events:    make(chan wsFrame),
		out:       make(chan wsFrame, attachQueue),
		ctl:       make(chan wsFrame, 4),
		stop:      make(chan struct{}),
		readDone:  make(chan struct{}),
		writeDone: make(chan struct{}),
		feedDone:  make(chan struct{}),
		finished:  make(chan struct{}),
		cancel:    cancel,
	}
}

// runAttachment runs a: registered with the hijacked connections that
// shutdown closes (a closed set, shutdown begun: the connection is closed
// and nothing runs) and counted, its loops (reader, writer, feeder) each
// in a goroutine and gen, the generator, here. It returns when the writer
// (which closes the connection, ending the reader), the reader and the
// feeder have ended.
func (s *Server) runAttachment(a *attachment, gen func(), loops ...func()) {
	defer close(a.finished)
	if !s.hijacked.add(a) {
		a.conn.Close()
		return
	}
	defer s.hijacked.remove(a)
	defer s.metrics.WebSocketOpened()()
	for _, loop := range loops {
		go loop()
	}
	gen()
	<-a.writeDone
	<-a.readDone
	<-a.feedDone // the frames read are written, or the command is done
}

// closeAfter asks the writer for the close frame that ends a stream whose
// generator returned err: 1001 going away when its last event was an `end`
// (shutting_down: the runtime is going away), 1011 after a failure (logged
// as failed; errorEvent: after an internal error event), else 1000. None
// when the connection is gone (the writer has ended or is ending).
func (a *attachment) closeAfter(err error, sink *attachSink, failed string, errorEvent bool) {
	code := websocket.CloseNormalClosure
	switch {
	case err == nil && sink.ended:
		code = websocket.CloseGoingAway
	case errors.Is(err, errAttachClosed), errors.Is(err, context.Canceled):
		return
	case err != nil:
		a.log.Error(failed, zap.Error(err))
		if errorEvent {
			a.enqueue(a.events, errorFrame("internal", "internal error"))
		}
		code = websocket.CloseInternalServerErr
	}
	a.enqueue(a.events, wsFrame{kind: websocket.CloseMessage, closeCode: code})
}
