//go:build reliability && linux

package reliability

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/sandbox-runtime/sandbox-runtime/sandboxd/processv1"
)

// TestSandboxdGRPCHostile drives sandboxd's gRPC listener with what a
// hostile or broken client sends: malformed frames, a message declaring
// 2 GiB, thousands of concurrent calls, cancelled streams, unknown process
// ids, and streams whose reader never reads. The daemon (PID alive) must
// answer each with a status or a closed connection, keep its RSS bounded
// while it happens, and get back to its idle goroutines and fds with no
// process left behind.
func TestSandboxdGRPCHostile(t *testing.T) {
	d := startDaemon(t, daemonConfig{env: map[string]string{"SANDBOXD_GRPC_ADDR": "127.0.0.1:0"}})
	addr, _ := d.d.Listening["sandboxd_grpc_addr"].(string)
	if addr == "" {
		t.Fatalf("no sandboxd_grpc_addr in the listening line %v", d.d.Listening)
	}
	base := d.baseline()
	rss0 := rssKB(d.pid)

	// 1. Malformed frames on raw connections: each is closed by the daemon.
	preface := []byte(http2.ClientPreface)
	huge := []byte{0xff, 0xff, 0xff, 0x0, 0x0, 0x0, 0x0, 0x0, 0x1} // a DATA frame declaring 16 MiB on stream 1
	garbage := bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 4096)
	for name, payload := range map[string][]byte{
		"garbage":            garbage,
		"preface+garbage":    append(append([]byte{}, preface...), garbage...),
		"preface+huge frame": append(append([]byte{}, preface...), huge...),
		"http/1.1":           []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"half a preface":     preface[:10],
	} {
		closed := rawClosed(t, addr, payload, 15*time.Second)
		if !closed {
			t.Errorf("%s: the connection was not closed within 15 s", name)
		}
	}

	// 2. A well-formed call whose message declares 2 GiB.
	if code := declareHuge(t, addr); code != codes.ResourceExhausted {
		t.Errorf("a message declaring 2 GiB: %v, want RESOURCE_EXHAUSTED", code)
	}

	conns := make([]*grpc.ClientConn, 8)
	for i := range conns {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	client := func(i int) pb.ProcessServiceClient { return pb.NewProcessServiceClient(conns[i%len(conns)]) }

	// 3. Many concurrent calls: Starts (16 run, the rest RESOURCE_EXHAUSTED),
	// unknown ids, Executes (8 slots, the rest wait).
	n := scale(2000, 500)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	var wg sync.WaitGroup
	var started, exhausted, notFound, executed, other atomic.Int64
	var peak atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client(i)
			switch i % 4 {
			case 0, 1:
				s, err := c.Start(ctx, &pb.StartRequest{Config: &pb.ProcessConfig{Command: []string{"sleep", "3"}}})
				if err == nil {
					_, err = s.Recv()
				}
				switch status.Code(err) {
				case codes.OK:
					started.Add(1)
					for {
						if _, err := s.Recv(); err != nil {
							break
						}
					}
				case codes.ResourceExhausted:
					exhausted.Add(1)
				default:
					other.Add(1)
				}
			case 2:
				_, err := c.WriteStdin(ctx, &pb.WriteStdinRequest{ProcessId: int32(1_000_000 + i), Payload: &pb.WriteStdinRequest_Input{Input: []byte("x")}})
				if status.Code(err) == codes.NotFound {
					notFound.Add(1)
				} else {
					other.Add(1)
				}
			case 3:
				if _, err := c.Execute(ctx, &pb.ExecuteRequest{Config: &pb.ProcessConfig{Command: []string{"true"}}}); err == nil {
					executed.Add(1)
				} else {
					other.Add(1)
				}
			}
			if r := rssKB(d.pid); r > peak.Load() {
				peak.Store(r)
			}
		}()
	}
	wg.Wait()
	cancel()
	figure(t, "sandboxd grpc: %d concurrent calls: %d Starts ran, %d RESOURCE_EXHAUSTED, %d NOT_FOUND, %d Executes, %d other; RSS %d KiB idle, %d KiB peak",
		n, started.Load(), exhausted.Load(), notFound.Load(), executed.Load(), other.Load(), rss0, peak.Load())
	if other.Load() != 0 || started.Load() < 16 || notFound.Load() != int64(n/4) || executed.Load() != int64(n/4) {
		t.Errorf("unexpected answers: %d other, %d started, %d not found of %d, %d executed of %d", other.Load(), started.Load(), notFound.Load(), n/4, executed.Load(), n/4)
	}

	// 4. Cancelled streams: each takes its group along.
	for i := range scale(300, 100) {
		cctx, ccancel := context.WithCancel(context.Background())
		s, err := client(i).Start(cctx, &pb.StartRequest{Config: &pb.ProcessConfig{Command: []string{"sh", "-c", "sleep 60 & sleep 60"}}})
		if err == nil {
			_, err = s.Recv()
		}
		ccancel()
		if err != nil && status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("start %d: %v", i, err)
		}
	}
	if ok, msg := poll(30*time.Second, 100*time.Millisecond, func() (bool, string) {
		ds := descendants(d.pid)
		return len(ds) == 0, truncate(fmt.Sprint(ds), 300)
	}); !ok {
		t.Errorf("processes left after the cancelled streams: %s", msg)
	}

	// 5. Readers that never read: 8 streams of 256 MiB each. The ring keeps
	// the last 1 MiB per command; RSS must not follow the output.
	readers := 8
	rctx, rcancel := context.WithCancel(context.Background())
	var streams []grpc.ServerStreamingClient[pb.StartResponse]
	for i := range readers {
		s, err := client(i).Start(rctx, &pb.StartRequest{Config: &pb.ProcessConfig{Command: []string{"head", "-c", "268435456", "/dev/zero"}}})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	var rssPeak int64
	poll(60*time.Second, 200*time.Millisecond, func() (bool, string) {
		rssPeak = max(rssPeak, rssKB(d.pid))
		running, err := d.list("running")
		return err == nil && len(running) == 0, ""
	})
	rcancel()
	figure(t, "sandboxd grpc: %d never-reading streams of 256 MiB: RSS %d KiB idle, %d KiB peak", readers, rss0, rssPeak)
	if !raceDaemon && rssPeak > rss0+96*1024 {
		t.Errorf("RSS grew to %d KiB (idle %d) with readers that never read", rssPeak, rss0)
	}
	for _, c := range conns {
		c.Close()
	}

	if !d.alive() {
		t.Fatalf("the daemon died: %v", d.exitErr())
	}
	after, ok := d.settle(base, 3, 30*time.Second)
	figure(t, "sandboxd grpc: goroutines %d idle, %d after; fds %d idle, %d after (slack 3)", base.goroutines, after.goroutines, base.fds, after.fds)
	if !ok {
		t.Errorf("resources did not settle: %+v, idle %+v", after, base)
	}
}

// rawClosed writes payload on a new connection and reports whether the
// daemon closed it within d.
func rawClosed(t *testing.T, addr string, payload []byte, d time.Duration) bool {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(d))
	c.Write(payload)
	_, err = io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// declareHuge sends an Execute whose one message declares 2 GiB and
// returns the grpc-status the daemon answers.
func declareHuge(t *testing.T, addr string) codes.Code {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	c.Write([]byte(http2.ClientPreface))
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/process.v1.ProcessService/Execute"},
		{":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	msg := make([]byte, 5+1024)
	binary.BigEndian.PutUint32(msg[1:5], 1<<31-1)
	fr.WriteData(1, false, msg)
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Logf("reading the answer: %v", err)
			return codes.Unknown
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			fields, _ := dec.DecodeFull(f.HeaderBlockFragment())
			for _, hf := range fields {
				if hf.Name == "grpc-status" {
					var n int
					for _, ch := range hf.Value {
						n = n*10 + int(ch-'0')
					}
					return codes.Code(n)
				}
			}
		case *http2.GoAwayFrame, *http2.RSTStreamFrame:
			return codes.Unknown
		}
	}
}
