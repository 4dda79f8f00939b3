package sdk_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/sdk"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
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

// counter answers CountInstances; the other procedures are Unimplemented.
type counter struct {
	orchardv1connect.UnimplementedClientServiceHandler
}

func (counter) CountInstances(context.Context, *connect.Request[orchardv1.CountInstancesRequest]) (*connect.Response[orchardv1.CountInstancesResponse], error) {
	return connect.NewResponse(&orchardv1.CountInstancesResponse{Total: 1}), nil
}

// Each call is a client span named after its procedure, with the RPC
// conventions' attributes and its outcome, the same on the calls that
// follow as on the first; the request carries its trace context.
func TestCallSpans(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ts := serve(t, services{client: counter{}})
	c := newClient(t, ts, sdk.WithTracing(tp, propagation.TraceContext{}), sdk.WithRetryPolicy(sdk.RetryPolicy{MaxAttempts: 1}))
	host, port, err := net.SplitHostPort(strings.TrimPrefix(ts.URL, "http://"))
	require.NoError(t, err)
	for range 2 {
		_, err := c.Count(t.Context(), sdk.Filter{})
		require.NoError(t, err)
		_, err = c.Get(t.Context(), "x")
		var e *sdk.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, connect.CodeUnimplemented, e.Code)
	}

	spans := rec.Ended()
	require.Len(t, spans, 4)
	for i, sp := range spans {
		method := "orchard.v1.ClientService/CountInstances"
		want := map[string]string{
			"rpc.system.name": "connectrpc", "rpc.method": method, "server.address": host, "server.port": port,
			"rpc.response.status_code": "OK",
		}
		status := sdktrace.Status{Code: codes.Unset}
		if i%2 == 1 {
			method = "orchard.v1.ClientService/GetInstance"
			want["rpc.method"], want["rpc.response.status_code"], want["error.type"] = method, "UNIMPLEMENTED", "UNIMPLEMENTED"
			status = sdktrace.Status{Code: codes.Error, Description: "orchard.v1.ClientService.GetInstance is not implemented"}
		}
		require.Equal(t, method, sp.Name())
		require.Equal(t, trace.SpanKindClient, sp.SpanKind())
		got := map[string]string{}
		for _, a := range sp.Attributes() {
			got[string(a.Key)] = a.Value.String()
		}
		require.Equal(t, want, got, "span %d", i)
		require.Equal(t, status, sp.Status(), "span %d", i)
	}
	// The server saw each call's traceparent.
	require.Len(t, ts.traceparents(), 4)
	for i, tp := range ts.traceparents() {
		require.Equal(t, spans[i].SpanContext().TraceID().String(), strings.Split(tp, "-")[1], "call %d", i)
	}
}

// BenchmarkCall makes unary calls through a client whose spans nobody
// records (as with no tracer provider set) to a test server: allocs/op
// and B/op are per call, the server's share included.
func BenchmarkCall(b *testing.B) {
	ts := serve(b, services{client: counter{}})
	c := newClient(b, ts, sdk.WithTracing(noop.NewTracerProvider(), propagation.TraceContext{}))
	ctx, span := sdktrace.NewTracerProvider().Tracer("app").Start(b.Context(), "app request")
	defer span.End()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Count(ctx, sdk.Filter{}); err != nil {
			b.Fatal(err)
		}
	}
}
