// Command sandbox-bench is the load tool of sandbox-runtime: it starts a
// daemon (the binary given by -daemon, or ./cmd/sandbox-runtime built into a
// temporary directory) on 127.0.0.1:0 with its own temporary base dir, runs
// the scenarios of BENCHMARKS.md against it, and prints one table of
// figures, each next to a raw baseline measured by this process in the same
// run (the machine is shared and noisy: only ratios within one run mean
// anything).
//
//	go run ./cmd/sandbox-bench              # defaults: < 2 minutes
//	go run ./cmd/sandbox-bench -quick       # CI smoke: < 30 s
//	go run ./cmd/sandbox-bench -addr 127.0.0.1:8888 -pid 1234   # an already running daemon
//
// Scenarios (-scenarios, comma-separated; default all):
//
//	latency     N sequential `echo hi` via POST /v1/commands?stream=true vs os/exec
//	legacy      the same via legacy POST /execute ("not available" while it answers 404)
//	grpc        the same via sandboxd's gRPC ProcessService.Execute (SANDBOXD_GRPC_ADDR), beside a naive grpc-go + os/exec server
//	throughput  C concurrent clients, R runs of `echo hi` in all, vs C goroutines of os/exec
//	stream      S bytes of text to one live NDJSON follower vs a raw pipe read of the same command
//	ws          the same over WebSocket /v1/commands/{id}/attach (skipped while it answers 404)
//	lossless    the highest paced producer rate one NDJSON / one WebSocket follower receives with no gap
//	memory      idle RSS, peak RSS during a flood with no reader, RSS with 64 full rings (own daemon)
//	idle        context switches of an idle daemon in 10 s: how often timers wake it (own daemon)
//	fanout      F followers of one command at full speed, each checking every byte (own daemon)
//
// Goals are figures, not tests: a missed goal does not change the exit
// status. It exits 1 when a check fails (a wrong answer: a byte missing
// without a gap, a wrong total, an unexpected status) or when the deadline
// cut the run short, 2 on bad flags.
//
// It only connects to loopback addresses, stops by itself at -deadline, and
// ends only the daemons it started (SIGTERM to their PID, SIGKILL after 30 s).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
)

type options struct {
	daemonBin string
	naiveBin  string
	addr      string
	pid       int
	quick     bool
	scenarios string
	deadline  time.Duration
	keepTmp   bool
	markdown  bool
	cpuprof   string
	produce   int64
	rate      float64
	env       envFlag

	latencyN       int
	latencyWarmup  int
	clients        int
	runs           int
	streamBytes    int64
	streamRounds   int
	streamCmd      string
	floodDuration  time.Duration
	retained       int
	retainedBytes  int
	fanout         int
	fanoutBytes    int64
	fanoutRing     int64
	hold           time.Duration
	losslessBytes  int64
	losslessBudget time.Duration
	idleWindow     time.Duration
}

var allScenarios = []string{"latency", "legacy", "grpc", "throughput", "stream", "ws", "lossless", "memory", "idle", "fanout"}

// parseFlags parses the benchmark's command line.
//
// long: the flag table, one flag a line.
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("sandbox-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.daemonBin, "daemon", "", "daemon binary to start (default: go build ./cmd/sandbox-runtime into a temp dir)")
	fs.StringVar(&o.naiveBin, "naive", "", "naive baseline server binary (default: go build ./cmd/sandbox-bench/naive; \"off\": no naive baseline)")
	fs.StringVar(&o.addr, "addr", "", "target an already running daemon at this loopback host:port instead of starting one")
	fs.IntVar(&o.pid, "pid", 0, "with -addr: the daemon's PID, for the RSS figures")
	fs.BoolVar(&o.quick, "quick", false, "small counts and sizes for a CI smoke run (< 30 s)")
	fs.StringVar(&o.scenarios, "scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios to run")
	fs.DurationVar(&o.deadline, "deadline", 170*time.Second, "global deadline: everything stops by then")
	fs.BoolVar(&o.keepTmp, "keep", false, "keep the temp dir (daemon logs) instead of removing it")
	fs.BoolVar(&o.markdown, "markdown", false, "print the tables as Markdown")
	fs.Var(&o.env, "daemon-env", "K=V added to the environment of every daemon started (repeatable; e.g. GOGC=50, GODEBUG=gctrace=1)")
	fs.StringVar(&o.cpuprof, "cpuprofile", "", "write this tool's CPU profile to the file (the client side)")
	fs.Int64Var(&o.produce, "produce", -1, "act as the stream producer: write this many bytes of text lines to stdout and exit")
	fs.Float64Var(&o.rate, "rate", 0, "with -produce: at most this many bytes/s (paced 64 KiB writes); 0: full speed")
	fs.DurationVar(&o.hold, "hold", 0, "the ?hold= of the followers of the stream, ws and lossless scenarios (protocol.md §4 \"Holding the producer\"; 0: none, the default drain)")
	fs.Int64Var(&o.losslessBytes, "lossless-bytes", 256<<20, "bytes of output of each lossless-follow probe")
	fs.DurationVar(&o.losslessBudget, "lossless-budget", 25*time.Second, "time budget of the lossless-follow search, per transport")
	fs.DurationVar(&o.idleWindow, "idle-window", 10*time.Second, "how long the idle scenario counts the daemon's context switches")
	fs.IntVar(&o.latencyN, "latency-n", 400, "sequential runs per latency scenario (each side)")
	fs.IntVar(&o.latencyWarmup, "latency-warmup", 20, "warm-up runs per side, not counted")
	fs.IntVar(&o.clients, "clients", 8, "concurrent clients of the throughput scenario")
	fs.IntVar(&o.runs, "runs", 1000, "runs in all of the throughput scenario (each side)")
	fs.Int64Var(&o.streamBytes, "stream-bytes", 256<<20, "bytes of output of the stream scenarios")
	fs.IntVar(&o.streamRounds, "stream-rounds", 3, "rounds of each stream scenario (raw and daemon alternate; the median counts)")
	fs.StringVar(&o.streamCmd, "stream-cmd", "",
		"sh -c command writing the stream output, %d replaced by the byte count (default: this binary's -produce, 64 KiB writes of 64-byte text lines)")
	fs.DurationVar(&o.floodDuration, "flood", 10*time.Second, "how long the memory scenario floods (yes) with no reader")
	fs.IntVar(&o.retained, "retained", 64, "commands retained with a full ring in the memory scenario (the daemon's max retained)")
	fs.IntVar(&o.retainedBytes, "retained-bytes", 1<<20+256<<10, "bytes each retained command prints (more than the 1 MiB ring)")
	fs.IntVar(&o.fanout, "fanout", 32, "followers of the fan-out scenario")
	fs.Int64Var(&o.fanoutBytes, "fanout-bytes", 16<<20, "bytes of output of the fan-out command")
	fs.Int64Var(&o.fanoutRing, "fanout-ring", 0, "SANDBOX_OUTPUT_LIMIT_BYTES of the fan-out daemon (default: -fanout-bytes, so no follower can fall out of the ring; 1048576 to see gaps)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		quick := map[string]func(){
			"latency-n":       func() { o.latencyN = 100 },
			"latency-warmup":  func() { o.latencyWarmup = 10 },
			"runs":            func() { o.runs = 200 },
			"stream-bytes":    func() { o.streamBytes = 32 << 20 },
			"stream-rounds":   func() { o.streamRounds = 1 },
			"flood":           func() { o.floodDuration = 2 * time.Second },
			"fanout-bytes":    func() { o.fanoutBytes = 4 << 20 },
			"deadline":        func() { o.deadline = 60 * time.Second },
			"lossless-bytes":  func() { o.losslessBytes = 32 << 20 },
			"lossless-budget": func() { o.losslessBudget = 6 * time.Second },
		}
		for name, f := range quick {
			if !set[name] {
				f()
			}
		}
	}
	if o.fanoutRing == 0 {
		o.fanoutRing = max(o.fanoutBytes, 1<<20)
	}
	for _, s := range strings.Split(o.scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(allScenarios, s) {
			return nil, fmt.Errorf("unknown scenario %q (have %s)", s, strings.Join(allScenarios, ", "))
		}
	}
	switch {
	case o.latencyN < 1, o.clients < 1, o.runs < o.clients, o.streamBytes < 1, o.streamRounds < 1,
		o.retained < 1, o.retainedBytes < 1, o.fanout < 1, o.fanoutBytes < 1, o.floodDuration <= 0,
		o.losslessBytes < 1, o.losslessBudget <= 0, o.idleWindow <= 0:
		return nil, errors.New("counts, sizes and durations must be positive (and -runs >= -clients)")
	}
	if o.addr != "" {
		if err := checkLoopback(o.addr); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// envFlag collects repeated -daemon-env K=V flags.
type envFlag []string

func (e *envFlag) String() string { return strings.Join(*e, " ") }
func (e *envFlag) Set(v string) error {
	if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
		return fmt.Errorf("%q is not K=V", v)
	}
	*e = append(*e, v)
	return nil
}

// wantNaive tells whether a scenario that compares with the naive server runs.
func (b *bench) wantNaive() bool {
	return b.o.want("latency") || b.o.want("legacy") || b.o.want("grpc") || b.o.want("throughput") || b.o.want("stream")
}

func (o *options) want(s string) bool {
	for _, x := range strings.Split(o.scenarios, ",") {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}

func main() { os.Exit(mainCode()) }

func mainCode() int {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-bench:", err)
		return 2
	}
	if o.produce >= 0 {
		produce := produce
		if o.rate > 0 {
			produce = func(w io.Writer, n int64) error { return producePaced(w, n, o.rate) }
		}
		if err := produce(os.Stdout, o.produce); err != nil {
			return 1
		}
		return 0
	}
	if o.streamCmd == "" {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-bench:", err)
			return 1
		}
		o.streamCmd = "exec " + shellQuote(exe) + " -produce %d"
	}
	if o.cpuprof != "" {
		f, err := os.Create(o.cpuprof)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-bench:", err)
			return 1
		}
		pprof.StartCPUProfile(f)
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.deadline)
	defer cancel()
	return run(ctx, o, os.Stdout, os.Stderr)
}

// produce writes n bytes of text lines ("aaa…a\n", 64 bytes each) to w in
// 64 KiB writes: a producer fast enough that the pipe, not the writer, is
// the limit of the raw baseline.
func produce(w io.Writer, n int64) error {
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = 'a' + byte(i/64%26)
		if i%64 == 63 {
			buf[i] = '\n'
		}
	}
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// shellQuote quotes s for sh -c.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// bench holds what the scenarios share.
type bench struct {
	o      *options
	out    io.Writer
	log    io.Writer
	bin    string // daemon binary ("" when targeting -addr)
	tmp    string
	client *http.Client
	rows   []row
	naive  *daemon // the naive baseline server, nil when off
	grpcMu sync.Mutex
	grpcs  map[string]*grpc.ClientConn // by address: the gRPC scenario's connections
	mem    []memRow
	notes  []string
	failed bool // a check failed (not a goal: a wrong answer)

	loadStart string // the machine's load when the run began
}

// row is one line of the result table.
type row struct {
	measure  string
	value    string
	baseline string
	ratio    string
	naive    string // the naive server's figure, "" when there is none
	nratio   string // the ratio to it
	goal     string
	result   string // met, missed, info, n/a
}

type memRow struct{ what, value string }

func (b *bench) add(r row) { b.rows = append(b.rows, r) }
func (b *bench) note(format string, args ...any) {
	b.notes = append(b.notes, fmt.Sprintf(format, args...))
}
func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "sandbox-bench: "+format+"\n", args...)
}

// run runs the benchmark with o and returns the exit code.
//
// long: the benchmark's one sequence (set up, start or find the daemon, run
// the scenarios, report), whose steps share its deferred clean-ups.
func run(ctx context.Context, o *options, stdout, stderr io.Writer) int {
	start := time.Now()
	b := &bench{o: o, out: stdout, log: stderr, loadStart: loadInfo()}
	tmp, err := os.MkdirTemp("", "sandbox-bench-")
	if err != nil {
		b.logf("%v", err)
		return 1
	}
	b.tmp = tmp
	if o.keepTmp {
		b.logf("temp dir (kept): %s", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	b.client = &http.Client{Transport: &http.Transport{
		DialContext:         loopbackDialer,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}}
	defer b.client.CloseIdleConnections()

	if o.addr == "" {
		b.bin = o.daemonBin
		if b.bin == "" {
			b.logf("building ./cmd/sandbox-runtime …")
			t0 := time.Now()
			if b.bin, err = buildDaemon(ctx, tmp); err != nil {
				b.logf("%v", err)
				return 1
			}
			b.logf("built in %.1f s", time.Since(t0).Seconds())
		}
	}

	if o.naiveBin != "off" && b.wantNaive() {
		bin := o.naiveBin
		if bin == "" {
			if bin, err = buildNaive(ctx, tmp); err != nil {
				b.logf("%v", err)
				return 1
			}
		}
		if b.naive, err = startDaemon(ctx, "naive", bin, tmp, map[string]string{"SANDBOXD_GRPC_ADDR": "127.0.0.1:0"}, nil); err != nil {
			b.logf("naive: %v", err)
			return 1
		}
		defer func() {
			if err := b.naive.stop(); err != nil {
				b.logf("stopping the naive server: %v", err)
			}
		}()
	}

	type scenario struct {
		name string
		run  func(context.Context, *daemon) error
		own  map[string]string // non-nil: needs its own daemon with this env
	}
	scenarios := []scenario{
		{name: "memory", run: b.memory, own: map[string]string{
			"SANDBOX_MAX_RUNNING": "16", "SANDBOX_MAX_RETAINED": fmt.Sprint(o.retained),
			"SANDBOX_OUTPUT_LIMIT_BYTES": "1048576"}},
		{name: "idle", run: b.idle, own: map[string]string{}},
		{name: "latency", run: b.latency},
		{name: "legacy", run: b.legacy},
		{name: "grpc", run: b.grpcScenario},
		{name: "throughput", run: b.throughput},
		{name: "stream", run: b.stream},
		{name: "ws", run: b.ws},
		{name: "lossless", run: b.lossless},
		{name: "fanout", run: b.fanoutScenario, own: map[string]string{
			"SANDBOX_OUTPUT_LIMIT_BYTES": fmt.Sprint(o.fanoutRing)}},
	}
	var shared *daemon
	defer func() {
		if err := shared.stop(); err != nil {
			b.logf("stopping the daemon: %v", err)
		}
	}()
	for _, s := range scenarios {
		if !o.want(s.name) {
			continue
		}
		if ctx.Err() != nil {
			b.note("%s: not run: deadline reached", s.name)
			b.failed = true
			continue
		}
		b.logf("scenario %s …", s.name)
		t0 := time.Now()
		var d *daemon
		if o.addr != "" {
			d = &daemon{name: "target", addr: o.addr, pid: o.pid}
		} else if s.own != nil {
			// A daemon of its own: fresh memory figures, or a different ring.
			if d, err = startDaemon(ctx, s.name, b.bin, tmp, s.own, o.env); err != nil {
				b.logf("%s: %v", s.name, err)
				b.failed = true
				continue
			}
		} else {
			if shared == nil {
				if shared, err = startDaemon(ctx, "shared", b.bin, tmp, map[string]string{"SANDBOXD_GRPC_ADDR": "127.0.0.1:0"}, o.env); err != nil {
					b.logf("%s: %v", s.name, err)
					b.failed = true
					continue
				}
			}
			d = shared
		}
		err := s.run(ctx, d)
		if s.own != nil && o.addr == "" {
			if serr := d.stop(); serr != nil {
				b.logf("stopping the %s daemon: %v", s.name, serr)
			}
		}
		switch {
		case err == nil:
		case ctx.Err() != nil:
			b.note("%s: stopped by the deadline (%v)", s.name, err)
			b.failed = true
		default:
			b.logf("%s: FAILED: %v", s.name, err)
			b.note("%s: FAILED: %v", s.name, err)
			b.failed = true
		}
		b.logf("scenario %s: %.1f s", s.name, time.Since(t0).Seconds())
	}
	b.print(time.Since(start))
	if b.failed {
		return 1
	}
	return 0
}

// loopbackDialer dials loopback addresses only.
func loopbackDialer(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := checkLoopback(addr); err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func (b *bench) print(total time.Duration) {
	w := b.out
	fmt.Fprintf(w, "\nsandbox-bench: %d CPUs, GOMAXPROCS %d, %s/%s, %s in all\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, total.Round(100*time.Millisecond))
	fmt.Fprintf(w, "machine: at start %s; at end %s\n\n", b.loadStart, loadInfo())
	header := []string{"measure", "value", "baseline", "ratio", "naive", "× naive", "goal", "result"}
	rows := make([][]string, 0, len(b.rows))
	for _, r := range b.rows {
		rows = append(rows, []string{r.measure, r.value, r.baseline, r.ratio, r.naive, r.nratio, r.goal, r.result})
	}
	b.table(header, rows)
	if len(b.mem) > 0 {
		fmt.Fprintln(w)
		rows = rows[:0]
		for _, m := range b.mem {
			rows = append(rows, []string{m.what, m.value})
		}
		b.table([]string{"daemon RSS", "value"}, rows)
	}
	if len(b.notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range b.notes {
			fmt.Fprintln(w, "note:", n)
		}
	}
	met, missed := 0, 0
	for _, r := range b.rows {
		switch r.result {
		case "met":
			met++
		case "missed":
			missed++
		}
	}
	fmt.Fprintf(w, "\ngoals: %d met, %d missed\n", met, missed)
}

func (b *bench) table(header []string, rows [][]string) {
	w := b.out
	if b.o.markdown {
		fmt.Fprintln(w, "| "+strings.Join(header, " | ")+" |")
		seps := make([]string, len(header))
		for i := range seps {
			seps[i] = "---"
		}
		fmt.Fprintln(w, "| "+strings.Join(seps, " | ")+" |")
		for _, r := range rows {
			fmt.Fprintln(w, "| "+strings.Join(r, " | ")+" |")
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}
