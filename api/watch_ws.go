package api

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/watch"
)

// A watch's events over a WebSocket: GET /v1/watches/{id}/events with an
// upgrade. The frames are the NDJSON lines, one text frame each; there is
// no max_wait (as an attachment, it lasts until the watch ends, shutdown,
// or the client leaves); pings keep it alive, and a client that does not
// take a frame within the write wait is disconnected. Client frames are
// read and ignored (a close frame ends it).

// wsWatchSink writes each event as a text frame, with a write deadline.
type wsWatchSink struct {
	conn      *websocket.Conn
	writeWait time.Duration
	mu        sync.Mutex // the writer and the pinger
	ended     bool       // the last frame was `end` shutting_down
}

func (k *wsWatchSink) event(obj []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ended = bytes.HasPrefix(obj, []byte(`{"type":"end","reason":"shutting_down"`))
	k.conn.SetWriteDeadline(time.Now().Add(k.writeWait))
	return k.conn.WriteMessage(websocket.TextMessage, obj)
}

func (k *wsWatchSink) flush() error { return nil }
func (k *wsWatchSink) last() error  { return nil }

func (k *wsWatchSink) heartbeat(int64) error {
	return k.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(k.writeWait))
}

func (s *Server) watchWebSocket(w http.ResponseWriter, r *http.Request, h *watch.Handle, cursor int64) {
	if s.streamsCtx.Err() != nil {
		fail(w, runtime.ErrShuttingDown)
		return
	}
	ws, ok := s.openWebSocket(w, r, wsShape{readBuffer: 1 << 10, writeBuffer: 16 << 10, recvBuffer: true})
	if !ok {
		return
	}
	defer ws.release()
	conn := ws.conn
	defer conn.Close()
	pingPeriod, pongWait, writeWait := ws.pingPeriod, ws.pongWait, ws.writeWait
	defer s.metrics.WebSocketOpened()()
	defer h.Reading()()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The reader: pongs extend the read deadline; any error (the client
	// left or closed) ends the stream.
	readDone := make(chan struct{})
	conn.SetReadLimit(4 << 10)
	conn.SetReadDeadline(time.Now().Add(pongWait))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(pongWait)) })
	go func() {
		defer close(readDone)
		defer cancel()
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()
	sink := &wsWatchSink{conn: conn, writeWait: writeWait}
	// Pings every pingPeriod (streamWatch's heartbeats).
	err := s.streamWatchPing(ctx, h, cursor, sink, pingPeriod)
	code := websocket.CloseNormalClosure
	if sink.ended {
		code = websocket.CloseGoingAway
	}
	if err == nil {
		conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""), time.Now().Add(writeWait))
	}
	conn.Close()
	<-readDone
}

// streamWatchPing is streamWatch without a window, pinging every period.
func (s *Server) streamWatchPing(ctx context.Context, h *watch.Handle, cursor int64, sink eventSink, period time.Duration) error {
	return s.streamWatchEvery(ctx, h, cursor, true, attachWindow, sink, period)
}
