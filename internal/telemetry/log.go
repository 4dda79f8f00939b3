package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// NewLogHandler returns the slog handler of a process: format "text" or
// "json", records below level dropped, and the trace_id and span_id of the
// span in a record's context added to it (the *Context logging functions
// carry it), so that logs and traces join.
func NewLogHandler(w io.Writer, format string, level slog.Level) (slog.Handler, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return traceHandler{slog.NewTextHandler(w, opts)}, nil
	case "json":
		return traceHandler{slog.NewJSONHandler(w, opts)}, nil
	default:
		return nil, fmt.Errorf("log format %q: want text or json", format)
	}
}

// ParseLogLevel reads debug, info, warn or error (any case, with an
// optional offset such as "debug-4").
func ParseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.TrimSpace(s))); err != nil {
		return 0, fmt.Errorf("log level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// traceHandler adds the ids of the context's span to each record.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
