// Package traceparent carries a span's context across the queues, as W3C
// traceparent text: the API stores it on the rows it queues, the dispatcher
// continues it in the turn those rows cause and stores the turn's on the
// activity tasks it schedules, and the SDK continues it in the activity's
// handler. One trace then runs from a tenant's call through every process
// that works on it.
package traceparent

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// MaxLen bounds the text stored (the queue columns are VARCHAR(64)): the
// version 00 form is 55 characters.
const MaxLen = 64

const header = "traceparent"

var w3c propagation.TraceContext

// carrier holds the one header the W3C propagator reads and writes.
type carrier struct{ value string }

func (c *carrier) Get(key string) string {
	if key == header {
		return c.value
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	if key == header {
		c.value = value
	}
}

func (c *carrier) Keys() []string { return []string{header} }

// Of returns the traceparent of the span in ctx; "" when ctx has none.
func Of(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	var c carrier
	w3c.Inject(ctx, &c)
	return c.value
}

// SpanContext returns the remote span context that tp names; an invalid
// one when tp is empty or malformed.
func SpanContext(tp string) trace.SpanContext {
	if tp == "" || len(tp) > MaxLen {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(w3c.Extract(context.Background(), &carrier{value: tp}))
}

// Context returns ctx with the remote span context that tp names as the
// parent of the spans started from it; ctx itself when tp names none.
func Context(ctx context.Context, tp string) context.Context {
	sc := SpanContext(tp)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}
