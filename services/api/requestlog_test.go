package api_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/orchardhq/orchard/internal/telemetry"
	"github.com/orchardhq/orchard/internal/testlog"
	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/store"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/services/api"
)

// logLines decodes the JSON lines of a log.
func logLines(t *testing.T, log *testlog.Buffer) []map[string]any {
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(log.Bytes()), []byte("\n")) {
		var m map[string]any
		require.NoError(t, json.Unmarshal(line, &m))
		out = append(out, m)
	}
	return out
}

// TestRequestLog: one structured line per call, at info for an error (with
// procedure, tenant, code, duration and trace id), at debug for a success.
func TestRequestLog(t *testing.T) {
	t.Parallel()
	sink := &testlog.Buffer{}
	e := newEnv(t, func(c *api.Config) {
		h, err := telemetry.NewLogHandler(sink, "json", slog.LevelInfo)
		require.NoError(t, err)
		c.Logger = slog.New(h)
		c.TracerProvider = sdktrace.NewTracerProvider()
	})
	acme := e.tenant("acme", nil, testsystem.QuickDef)
	c := e.all(acme)
	_, err := c.client.GetInstance(t.Context(), req(&orchardv1.GetInstanceRequest{InstanceId: "missing"}))
	requireCode(t, err, connect.CodeNotFound)
	_, err = c.client.CountInstances(t.Context(), req(&orchardv1.CountInstancesRequest{}))
	require.NoError(t, err)

	var calls []map[string]any
	for _, l := range logLines(t, sink) {
		if l["msg"] == "api: call" {
			calls = append(calls, l)
		}
	}
	require.Len(t, calls, 1, "the success logs at debug only")
	l := calls[0]
	require.Equal(t, "INFO", l["level"])
	require.Equal(t, "/orchard.v1.ClientService/GetInstance", l["procedure"])
	require.Equal(t, acme, l["tenant"])
	require.Equal(t, "not_found", l["code"])
	require.Contains(t, l, "duration")
	require.Len(t, l["trace_id"], 32)
	require.Len(t, l["span_id"], 16)
	for _, line := range bytes.Split(sink.Bytes(), []byte("\n")) {
		if bytes.Contains(line, []byte(`"msg":"api: call"`)) {
			require.Equal(t, 1, bytes.Count(line, []byte(`"trace_id"`)), "one trace id, not the call's and the handler's: %s", line)
		}
	}
}

// TestRequestLogRateRefusalsAtDebug: a call refused by the request rate logs
// at debug, not info: a tenant past its rate would otherwise write a line per
// refusal, hundreds a second.
func TestRequestLogRateRefusalsAtDebug(t *testing.T) {
	t.Parallel()
	sink := &testlog.Buffer{}
	e := newEnv(t, func(c *api.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	slow := e.tenant("slow", &store.Limits{RequestsPerSecond: 0.01, Burst: 1})
	c := e.all(slow)
	_, err := c.client.CountInstances(t.Context(), req(&orchardv1.CountInstancesRequest{}))
	require.NoError(t, err)
	_, err = c.client.CountInstances(t.Context(), req(&orchardv1.CountInstancesRequest{}))
	requireCode(t, err, connect.CodeResourceExhausted, "requests")

	var refused []map[string]any
	for _, l := range logLines(t, sink) {
		if l["msg"] == "api: call" && l["code"] == "resource_exhausted" {
			refused = append(refused, l)
		}
	}
	require.Len(t, refused, 1)
	require.Equal(t, "DEBUG", refused[0]["level"])
	require.Equal(t, slow, refused[0]["tenant"])
}
