// Package telemetry sets up what Orchard's processes report about themselves:
// OpenTelemetry metrics exported for Prometheus, traces exported over OTLP
// when OTEL_EXPORTER_OTLP_ENDPOINT (or its traces variant) is set, a pgx
// tracer for database spans, slog handlers that add the trace and span ids,
// and the operations endpoints /metrics, /livez and /readyz.
//
// It must never be imported by pkg/ packages: libraries take providers as
// parameters; only the commands decide where telemetry goes.
package telemetry

import (
	"context"
	"errors"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// Telemetry holds a process's providers. Setup installs them as the global
// ones too, for libraries that only look there.
type Telemetry struct {
	MeterProvider  *sdkmetric.MeterProvider
	TracerProvider *sdktrace.TracerProvider
	// Profiles makes OpsHandler serve net/http/pprof's /debug/pprof/ too.
	// Off by default: a profile stops nothing but costs CPU while it runs,
	// and it shows the process's code to whoever reaches the ops port.
	Profiles bool
	registry *prometheus.Registry
	// life is the context given to Setup: when it ends, the process was
	// told to stop, and /readyz answers 503 from then on.
	life context.Context
}

// Setup creates the providers for a service. ctx is the process's signal
// context: when it ends, the process is draining and no longer ready.
func Setup(ctx context.Context, service string) (*Telemetry, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil {
		return nil, err
	}
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithResource(res))

	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		traces, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdktrace.WithBatcher(traces))
	} else {
		// Nothing would read the spans: record none. A span recorded for no
		// processor still costs its attributes and events, and the database
		// tracer, seeing it record, adds a span per statement (a copy of
		// the connection's configuration each). The spans keep their trace
		// and span ids, so the logs still carry them.
		opts = append(opts, sdktrace.WithSampler(sdktrace.NeverSample()))
	}
	tp := sdktrace.NewTracerProvider(opts...)

	otel.SetMeterProvider(mp)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return &Telemetry{MeterProvider: mp, TracerProvider: tp, registry: registry, life: ctx}, nil
}

// Shutdown flushes and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	return errors.Join(t.TracerProvider.Shutdown(ctx), t.MeterProvider.Shutdown(ctx))
}

// InstrumentPool makes a pool configuration trace its queries.
func (t *Telemetry) InstrumentPool(cfg *pgx.ConnConfig) {
	cfg.Tracer = otelpgx.NewTracer(otelpgx.WithTracerProvider(t.TracerProvider))
}

// ReadyTimeout bounds a readiness check's dependency checks.
const ReadyTimeout = 2 * time.Second

// OpsHandler serves the operations endpoints:
//
//   - /metrics: Prometheus.
//   - /livez: 200 while the process can answer at all; it checks no
//     dependency, so a database outage never restarts the process.
//   - /readyz: 200 while the process is not draining and ready reports no
//     error within ReadyTimeout (the database answers), 503 otherwise.
//   - /debug/pprof/: CPU, heap, allocation and goroutine profiles, when
//     Profiles is set.
func (t *Telemetry) OpsHandler(ready func(ctx context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if t.Draining() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if t.Profiles {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// Draining reports whether the process was told to stop.
func (t *Telemetry) Draining() bool { return t.life.Err() != nil }
