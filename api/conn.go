package api

import (
	"context"
	"net"
)

// connKey is the context key of the connection a request arrived on.
type connKey struct{}

// ConnContext is for http.Server.ConnContext: it lets a stream reach its
// connection, to bound what the kernel queues for a slow reader (see
// streamUnsentLimit). Without it streams still work, and only the kernel's
// own send-buffer tuning bounds what is in flight.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// requestConn returns the connection of a request served with ConnContext.
func requestConn(ctx context.Context) net.Conn {
	c, _ := ctx.Value(connKey{}).(net.Conn)
	return c
}
