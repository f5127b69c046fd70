package runtime

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkEchoHiPTY measures the round trip of `echo hi` (create → output
// read → finished) on a terminal next to the same command on pipes, in the
// same run. Each sub-benchmark reports the median of its iterations as
// p50-ms (and p90-ms), since a spawn's latency is skewed by the scheduler.
func BenchmarkEchoHiPTY(b *testing.B) {
	for _, tc := range []struct {
		name string
		req  CreateRequest
		want string
	}{
		{"pipe", CreateRequest{Argv: []string{"echo", "hi"}}, "hi\n"},
		{"pty", CreateRequest{Argv: []string{"echo", "hi"}, PTY: &PTYRequest{Cols: 80, Rows: 24}}, "hi\r\n"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := newManager(b, nil)
			var lat []time.Duration
			buf := make([]byte, 0, 64)
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				st, _, err := m.Create(tc.req)
				if err != nil {
					b.Fatal(err)
				}
				c, err := m.Get(st.CommandID)
				if err != nil {
					b.Fatal(err)
				}
				<-c.Done()
				res, err := c.Read(0, 64, buf[:0], nil)
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
				var got strings.Builder
				for _, r := range res.Records {
					got.Write(r.Data)
				}
				if got.String() != tc.want {
					b.Fatalf("output %q; want %q", got.String(), tc.want)
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, "p90-ms")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
		})
	}
}
