package sdk_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/sdk"
	"github.com/orchardhq/orchard/pkg/tenancy"
	"github.com/orchardhq/orchard/services/api"
	"github.com/orchardhq/orchard/services/dispatcher"
)

// A call made inside the application's span continues its trace in the
// API: the server's span has the application's trace id.
func TestCallsCarryTheCallersTrace(t *testing.T) {
	t.Parallel()
	// What `orchard api` sets up (internal/telemetry).
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := newSystem(t, func(_ *testsystem.System, cfg *api.Config) { cfg.TracerProvider = tp })
	c := sdk.NewClient(s.URL, sdk.WithToken(s.token(tenancy.RoleClient)), sdk.WithTracing(tp, propagation.TraceContext{}))

	ctx, app := tp.Tracer("app").Start(t.Context(), "app request")
	_, err := c.Count(ctx, sdk.Filter{})
	app.End()
	require.NoError(t, err)

	kinds := map[trace.SpanKind]bool{}
	for _, sp := range rec.Ended() {
		if !strings.Contains(sp.Name(), "CountInstances") {
			continue
		}
		require.Equal(t, app.SpanContext().TraceID(), sp.SpanContext().TraceID(), "span %s (%v) is in another trace", sp.Name(), sp.SpanKind())
		kinds[sp.SpanKind()] = true
	}
	require.True(t, kinds[trace.SpanKindClient], "the SDK's span")
	require.True(t, kinds[trace.SpanKindServer], "the API's span")
}

// One trace runs through the queues: the application's call that starts
// an orchestration, the API's span of it, the dispatcher's first turn
// (which continues the start message's trace), the activity's handler in
// the worker (which continues the turn's, carried on the task), the API's
// span of its completion, and the turn that consumes the result.
func TestOneTraceFromStartToActivityAndBack(t *testing.T) {
	t.Parallel()
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ts := testsystem.New(t, testsystem.Options{Tenants: []string{tenant}, Configure: func(_ *testsystem.System, cfg *api.Config) {
		cfg.TracerProvider = tp
	}})
	ts.StartDispatcher(t, dispatcher.Config{TracerProvider: tp})
	s := &system{System: ts, t: t}
	s.register(s.client(tenancy.RoleTenantAdmin), testsystem.EchoDef)
	traced := func(roles ...tenancy.Role) *sdk.Client {
		return sdk.NewClient(s.URL, sdk.WithToken(s.token(roles...)), sdk.WithRetryPolicy(fastRetries),
			sdk.WithTracing(tp, propagation.TraceContext{}))
	}
	w := sdk.NewWorker(traced(tenancy.RoleWorker), "q", sdk.WithLogger(quiet()), sdk.WithPollWait(time.Second))
	sdk.Register(w, "work", func(_ context.Context, in string) (string, error) { return in, nil })
	startWorker(t, w)

	c := traced(tenancy.RoleClient)
	ctx, app := tp.Tracer("app").Start(t.Context(), "app request")
	_, err := c.Start(ctx, "echo", "hello", sdk.WithInstanceID("traced"))
	app.End()
	require.NoError(t, err)
	require.Equal(t, sdk.StatusCompleted, waitEnd(t, c, "traced").Status)

	traceID := app.SpanContext().TraceID()
	// What each step leaves in the application's trace, by span name.
	want := map[string]int{
		"orchard.v1.ClientService/StartOrchestration":   1,
		"orchestration turn":                            2,
		"orchard.activity work":                         1,
		"orchard.v1.WorkerService/CompleteActivityTask": 1,
	}
	testwait.Until(t, 30*time.Second, "the spans of every step, in the application's trace", func() bool {
		got := map[string]int{}
		for _, sp := range rec.Ended() {
			if sp.SpanContext().TraceID() == traceID {
				got[sp.Name()]++
			}
		}
		for name, n := range want {
			if got[name] < n {
				return false
			}
		}
		return true
	})
}
