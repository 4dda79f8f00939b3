package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/telemetry"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil))
	body, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	return rec.Code, string(body)
}

// /livez checks nothing; /readyz checks the dependency and ends when the
// process's context ends (the drain), before anything else stops.
func TestOpsProbes(t *testing.T) {
	ctx, stop := context.WithCancel(t.Context())
	tel, err := telemetry.Setup(ctx, "test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	var dbErr error
	h := tel.OpsHandler(func(ctx context.Context) error {
		_, ok := ctx.Deadline()
		require.True(t, ok, "the readiness check runs without a deadline")
		return dbErr
	})

	code, _ := get(t, h, "/readyz")
	require.Equal(t, http.StatusOK, code)
	dbErr = errors.New("connection refused")
	code, body := get(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "connection refused")
	code, _ = get(t, h, "/livez")
	require.Equal(t, http.StatusOK, code, "liveness must not depend on the database")

	dbErr = nil
	require.False(t, tel.Draining())
	stop()
	require.True(t, tel.Draining(), "draining starts when the context ends")
	code, body = get(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "draining")
	code, _ = get(t, h, "/livez")
	require.Equal(t, http.StatusOK, code)
	code, _ = get(t, h, "/metrics")
	require.Equal(t, http.StatusOK, code)
}

// The profiles are served only when asked for.
func TestOpsProfiles(t *testing.T) {
	tel, err := telemetry.Setup(t.Context(), "test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	ready := func(context.Context) error { return nil }

	code, _ := get(t, tel.OpsHandler(ready), "/debug/pprof/")
	require.Equal(t, http.StatusNotFound, code, "profiles are off by default")

	tel.Profiles = true
	h := tel.OpsHandler(ready)
	code, body := get(t, h, "/debug/pprof/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "allocs")
	code, body = get(t, h, "/debug/pprof/heap?debug=1")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "heap profile")
	code, _ = get(t, h, "/metrics")
	require.Equal(t, http.StatusOK, code)
}

// Spans are recorded only when an exporter takes them; either way they
// have the ids that the logs carry.
func TestSpansRecordedOnlyWhenExported(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	for _, exported := range []bool{false, true} {
		if exported {
			// Never reached: the span is not ended, so nothing is sent.
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:1")
		}
		tel, err := telemetry.Setup(t.Context(), "test")
		require.NoError(t, err)
		_, span := tel.TracerProvider.Tracer("test").Start(t.Context(), "op")
		require.Equal(t, exported, span.IsRecording())
		require.True(t, span.SpanContext().HasTraceID())
		require.True(t, span.SpanContext().HasSpanID())
		require.NoError(t, tel.Shutdown(context.Background()))
	}
}

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	t.Parallel()
	tel, err := telemetry.Setup(t.Context(), "test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	var buf bytes.Buffer
	level, err := telemetry.ParseLogLevel("WARN")
	require.NoError(t, err)
	h, err := telemetry.NewLogHandler(&buf, "json", level)
	require.NoError(t, err)
	log := slog.New(h).With("service", "test")

	ctx, span := tel.TracerProvider.Tracer("test").Start(t.Context(), "op")
	log.InfoContext(ctx, "below the level")
	log.WarnContext(ctx, "in a span", "tenant", "acme")
	span.End()
	log.Warn("no span")

	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	require.Len(t, lines, 2, "%s", buf.String())
	var first, second map[string]any
	require.NoError(t, json.Unmarshal(lines[0], &first))
	require.NoError(t, json.Unmarshal(lines[1], &second))
	require.Equal(t, "in a span", first["msg"])
	require.Equal(t, "acme", first["tenant"])
	require.Equal(t, "test", first["service"])
	require.Equal(t, span.SpanContext().TraceID().String(), first["trace_id"])
	require.Equal(t, span.SpanContext().SpanID().String(), first["span_id"])
	require.NotContains(t, second, "trace_id")

	_, err = telemetry.NewLogHandler(&buf, "xml", level)
	require.Error(t, err)
	_, err = telemetry.ParseLogLevel("loud")
	require.Error(t, err)
}
