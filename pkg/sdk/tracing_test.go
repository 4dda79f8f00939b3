package sdk_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/sdk"
	"github.com/orchardhq/orchard/pkg/tenancy"
	"github.com/orchardhq/orchard/services/api"
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
