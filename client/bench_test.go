package client

import (
	"context"
	"strings"
	"testing"
)

// BenchmarkRun measures Run end to end against the real daemon: create,
// stream and collect 8 MiB of multi-byte output (b.SetBytes: MB/s of
// command output), directly and through the proxy that cuts every
// connection after at most 256 KiB.
func BenchmarkRun(b *testing.B) {
	const n = 8 << 20
	for _, viaProxy := range []bool{false, true} {
		name := "direct"
		if viaProxy {
			name = "cutting-proxy"
		}
		b.Run(name, func(b *testing.B) {
			d := startDaemon(b, bigRing)
			url := d.url
			if viaProxy {
				url = newCutProxy(b, strings.TrimPrefix(d.url, "http://"), 256<<10, 1).url()
			}
			c, err := New(url, Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := c.Run(context.Background(), helperReq("pattern", "1", itoa(n), "0"), RunOptions{CollectLimit: -1})
				if err != nil || res.ExitCode() != 0 || res.Status.StdoutBytes != n {
					b.Fatalf("Run: %v %+v", err, res)
				}
			}
		})
	}
}
