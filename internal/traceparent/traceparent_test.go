package traceparent_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/orchardhq/orchard/internal/traceparent"
)

// A span's traceparent read back is the span's context, as a remote parent;
// no span, or text that is not a traceparent, gives none.
func TestRoundTrip(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(context.Background(), "call")
	defer span.End()

	text := traceparent.Of(ctx)
	require.Len(t, text, 55)
	require.LessOrEqual(t, len(text), traceparent.MaxLen)
	sc := traceparent.SpanContext(text)
	require.True(t, sc.IsRemote())
	require.Equal(t, span.SpanContext().TraceID(), sc.TraceID())
	require.Equal(t, span.SpanContext().SpanID(), sc.SpanID())

	_, child := tp.Tracer("test").Start(traceparent.Context(context.Background(), text), "turn")
	defer child.End()
	require.Equal(t, span.SpanContext().TraceID(), child.SpanContext().TraceID())

	require.Empty(t, traceparent.Of(context.Background()))
	for _, bad := range []string{"", "00-nothex", strings.Repeat("0", 200)} {
		require.False(t, traceparent.SpanContext(bad).IsValid(), bad)
		require.False(t, trace.SpanContextFromContext(traceparent.Context(context.Background(), bad)).IsValid(), bad)
	}
}
