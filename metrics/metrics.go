// Package metrics is the Prometheus side of sandbox-runtime (protocol.md §3
// GET /metrics): it observes the runtime through runtime.Observer (commands
// started, finished, failed starts, output bytes, evictions, expiry, legacy
// runs) and counts the HTTP requests the transport reports to it. It is the
// one package that imports the Prometheus client.
package metrics

import (
	"net/http"
	goruntime "runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
)

// Metrics holds the Prometheus collectors of protocol.md §3 GET /metrics. It
// implements runtime.Observer. Build it with New, hand it to runtime.New as
// the Observer, and Watch the Manager (the Observer exists before the
// Manager, the gauges read the Manager after). A nil *Metrics is valid and
// counts nothing (its ServeHTTP answers 404).
type Metrics struct {
	reg *prometheus.Registry

	started      prometheus.Counter
	finished     *prometheus.CounterVec
	outputBytes  *prometheus.CounterVec
	stdoutBytes  prometheus.Counter
	stderrBytes  prometheus.Counter
	truncated    prometheus.Counter
	evicted      prometheus.Counter
	expired      prometheus.Counter
	legacy       prometheus.Counter
	spawnSeconds prometheus.Histogram

	streamClients    prometheus.Gauge
	websocketClients prometheus.Gauge

	httpRequests  *prometheus.CounterVec   // route, method, status
	httpDuration  *prometheus.HistogramVec // route, method
	refusals      *prometheus.CounterVec   // reason: the error code answered
	spawnFailures *prometheus.CounterVec   // class: runtime.SpawnClass
	buildInfo     *prometheus.GaugeVec     // version, go_version

	handler http.Handler
}

const ns = "sandbox_runtime"

// New returns the collectors of a daemon whose build is version
// (build_info), on a registry of their own. The Metrics is the
// runtime.Observer of the Manager it counts: give it as Config.Observer to
// runtime.New, then Watch the Manager that returned.
func New(version string) *Metrics {
	x := newCollectors()
	x.buildInfo.WithLabelValues(version, goruntime.Version()).Set(1)
	return x
}

// Watch adds the gauges that read m: commands running and retained, and
// the orphans its reaper reaped. Call it once, with the Manager x observes.
func (x *Metrics) Watch(m *runtime.Manager) {
	x.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "commands_running", Help: "Managed commands running now."},
			func() float64 { r, _ := m.Counts(); return float64(r) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "commands_retained", Help: "Handles retained now (running and finished)."},
			func() float64 { _, r := m.Counts(); return float64(r) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "orphans_reaped_total",
			Help: "Children reaped that were not started by the runtime (orphaned grandchildren)."},
			func() float64 { return float64(m.OrphansReaped()) }),
	)
}

// newCollectors returns the collectors that do not read the Manager, on a
// fresh registry.
func newCollectors() *Metrics {
	reg := prometheus.NewRegistry()
	x := &Metrics{
		reg:      reg,
		started:  prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "commands_started_total", Help: "Managed commands started."}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "commands_finished_total", Help: "Managed commands finished, by final state."}, []string{"state"}),
		outputBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "output_bytes_total",
			Help: "Output bytes read from managed commands' pipes, by stream."}, []string{"stream"}),
		truncated:    prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "output_truncated_total", Help: "Managed commands that finished with output_truncated."}),
		evicted:      prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "handles_evicted_total", Help: "Finished handles evicted at the retained limit."}),
		expired:      prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "handles_expired_total", Help: "Finished handles dropped after their TTL."}),
		legacy:       prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "legacy_executions_total", Help: "Legacy POST /execute runs."}),
		spawnSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "spawn_seconds", Help: "Time to fork and exec a managed command.", Buckets: prometheus.ExponentialBuckets(0.0002, 2, 14)}),
		streamClients: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "stream_clients",
			Help: "Open NDJSON output streams."}),
		websocketClients: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "websocket_clients", Help: "Open WebSocket attachments."}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "http_requests_total",
			Help: "HTTP requests answered, by route pattern, method and status."}, []string{"route", "method", "status"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "http_request_duration_seconds",
			Help:    "Time from a request's arrival until its handler returned (a stream: until it ended), by route pattern and method.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60}}, []string{"route", "method"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "refusals_total",
			Help: "Requests answered with an error (4xx or 5xx), by error code (too_many_running, too_large, stdin_full, ...)."}, []string{"reason"}),
		spawnFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "spawn_failures_total",
			Help: "Managed commands that could not be started, by class (not_found, permission, exec_format, resources, other)."}, []string{"class"}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "build_info",
			Help: "Always 1; the labels say which build is running."}, []string{"version", "go_version"}),
	}
	x.stdoutBytes = x.outputBytes.WithLabelValues("stdout")
	x.stderrBytes = x.outputBytes.WithLabelValues("stderr")
	for _, s := range []string{"exited", "cancelled", "timed_out", "terminated"} {
		x.finished.WithLabelValues(s)
	}
	for _, c := range runtime.SpawnClasses {
		x.spawnFailures.WithLabelValues(string(c))
	}
	for _, r := range []string{"too_many_running", "too_large", "stdin_full", "unauthorized"} {
		x.refusals.WithLabelValues(r) // present at 0, so rate() and alerts see them from the start
	}
	reg.MustRegister(x.started, x.finished, x.outputBytes, x.truncated, x.evicted, x.expired, x.legacy, x.spawnSeconds,
		x.streamClients, x.websocketClients, x.httpRequests, x.httpDuration, x.refusals, x.spawnFailures, x.buildInfo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	x.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return x
}

// ServeHTTP serves the Prometheus text format (404 on a nil Metrics).
func (x *Metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if x == nil {
		http.NotFound(w, r)
		return
	}
	x.handler.ServeHTTP(w, r)
}

// CommandStarted implements runtime.Observer.
func (x *Metrics) CommandStarted(spawn time.Duration) {
	x.started.Inc()
	x.spawnSeconds.Observe(spawn.Seconds())
}

// CommandFinished implements runtime.Observer.
func (x *Metrics) CommandFinished(s runtime.State, truncated bool) {
	x.finished.WithLabelValues(s.String()).Inc()
	if truncated {
		x.truncated.Inc()
	}
}

// OutputBytes implements runtime.Observer.
func (x *Metrics) OutputBytes(stdout bool, n int) {
	if stdout {
		x.stdoutBytes.Add(float64(n))
	} else {
		x.stderrBytes.Add(float64(n))
	}
}

// HandleEvicted implements runtime.Observer.
func (x *Metrics) HandleEvicted() { x.evicted.Inc() }

// HandleExpired implements runtime.Observer.
func (x *Metrics) HandleExpired() { x.expired.Inc() }

// LegacyExecuted implements runtime.Observer.
func (x *Metrics) LegacyExecuted() { x.legacy.Inc() }

// SpawnFailed implements runtime.Observer.
func (x *Metrics) SpawnFailed(class runtime.SpawnClass) {
	x.spawnFailures.WithLabelValues(string(class)).Inc()
}

// StreamOpened counts an open NDJSON output stream until the returned
// function is called.
func (x *Metrics) StreamOpened() (closed func()) {
	if x == nil {
		return func() {}
	}
	x.streamClients.Inc()
	return x.streamClients.Dec
}

// WebSocketOpened counts an open WebSocket attachment until the returned
// function is called.
func (x *Metrics) WebSocketOpened() (closed func()) {
	if x == nil {
		return func() {}
	}
	x.websocketClients.Inc()
	return x.websocketClients.Dec
}

// ObserveRequest records one answered request (the transport calls it for
// every request); route is its route pattern, code the error code of a
// 4xx/5xx answer.
func (x *Metrics) ObserveRequest(route, method string, status int, d time.Duration, code string) {
	if x == nil {
		return
	}
	method = metricMethod(method)
	x.httpRequests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	x.httpDuration.WithLabelValues(route, method).Observe(d.Seconds())
	if status >= 400 && code != "" {
		x.refusals.WithLabelValues(code).Inc()
	}
}

// metricMethod bounds the method label to the methods the API knows.
func metricMethod(m string) string {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS":
		return m
	}
	return "other"
}
