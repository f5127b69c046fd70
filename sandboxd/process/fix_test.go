package process_test

// Tests of the attacker's findings on the sandboxd gRPC listener (issue 22).

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	pb "github.com/sandbox-runtime/sandbox-runtime/sandboxd/processv1"
)

// TestAuthorityLoopbackOnly (F1): on loopback the listener asks no token,
// so, as on the REST listener, a call whose :authority is not a loopback
// IP literal or localhost is refused (PERMISSION_DENIED); the others run.
func TestAuthorityLoopbackOnly(t *testing.T) {
	ours(t)
	tg := start(t)
	defer tg.d.Stop()
	ctx := ctxT(t, 30*time.Second)
	evil := dialTarget(t, tg.d, tg.addr, tg.root, grpc.WithAuthority("rebind.attacker.example:1234"))
	defer evil.conn.Close()
	_, err := evil.client.Execute(ctx, &pb.ExecuteRequest{Config: argv("true")})
	wantCode(t, err, codes.PermissionDenied)
	for _, a := range []string{"localhost:1", "127.0.0.1", "[::1]:5"} {
		ok := dialTarget(t, tg.d, tg.addr, tg.root, grpc.WithAuthority(a))
		if _, err := ok.client.Execute(ctx, &pb.ExecuteRequest{Config: argv("true")}); err != nil {
			t.Errorf("Execute with :authority %s: %v; want it served", a, err)
		}
		ok.conn.Close()
	}
}
