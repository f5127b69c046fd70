package process_test

// Tests of the attacker's findings on the sandboxd gRPC listener (issue 22).

import (
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/sandbox-runtime/sandbox-runtime/internal/daemontest"
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

// TestIdleHTTP2FloodCapped (F2): raw HTTP/2 connections that send the
// preface and SETTINGS and then nothing count against the daemon's one
// connection cap: with nofile 1024 and more of them than that, the main
// port's and the REST port's /v1/health keep answering. Before the fix the
// flood took every fd and both went unanswered.
func TestIdleHTTP2FloodCapped(t *testing.T) {
	ours(t)
	const fdLimit, flood = 1024, 1300
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max < flood+256 {
		t.Skipf("this test needs nofile %d for its own connections; the hard limit is %d", flood+256, lim.Max)
	}
	if lim.Cur < flood+256 {
		raised := lim
		raised.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			t.Fatal(err)
		}
		defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	d := daemontest.StartT(t, daemontest.Options{Bin: binPath, BaseDir: filepath.Join(t.TempDir(), "base"),
		Prefix: []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", fdLimit, fdLimit)},
		Env:    []string{"SANDBOXD_GRPC_ADDR=127.0.0.1:0", "SANDBOXD_REST_ADDR=127.0.0.1:0"}})
	gaddr, _ := d.Listening["sandboxd_grpc_addr"].(string)
	raddr, _ := d.Listening["sandboxd_rest_addr"].(string)
	preface := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00" + "\x00\x00\x00\x04\x01\x00\x00\x00\x00")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < flood; i++ {
		c, err := net.DialTimeout("tcp", gaddr, 2*time.Second)
		if err != nil {
			continue
		}
		c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		c.Write(preface)
		conns = append(conns, c)
	}
	// Each connection the daemon accepts gets its SETTINGS frame: wait for
	// them (or the connection's end, or 10 s), so that the daemon has
	// taken all the flood it can before the probes.
	var wg sync.WaitGroup
	var answered atomic.Int64
	until := time.Now().Add(10 * time.Second)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(until)
			if n, _ := c.Read(make([]byte, 64)); n > 0 {
				answered.Add(1)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d idle HTTP/2 connections opened, %d answered by the daemon", len(conns), answered.Load())
	hc := &http.Client{Timeout: 5 * time.Second}
	for _, u := range []string{d.URL + "/v1/health", "http://" + raddr + "/v1/health"} {
		res, err := hc.Get(u)
		if err != nil {
			t.Errorf("GET %s under the flood: %v; want 200", u, err)
			continue
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Errorf("GET %s under the flood: %d; want 200", u, res.StatusCode)
		}
	}
}
