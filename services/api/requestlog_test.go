package api_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/orchardhq/orchard/internal/testsystem"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/services/api"
)

// lockedBuffer is a log sink the server's goroutines write to.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) lines(t *testing.T) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(b.buf.Bytes()), []byte("\n")) {
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
	sink := &lockedBuffer{}
	e := newEnv(t, func(c *api.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: slog.LevelInfo}))
		c.TracerProvider = sdktrace.NewTracerProvider()
	})
	acme := e.tenant("acme", nil, testsystem.QuickDef)
	c := e.all(acme)
	_, err := c.client.GetInstance(t.Context(), req(&orchardv1.GetInstanceRequest{InstanceId: "missing"}))
	requireCode(t, err, connect.CodeNotFound)
	_, err = c.client.CountInstances(t.Context(), req(&orchardv1.CountInstancesRequest{}))
	require.NoError(t, err)

	var calls []map[string]any
	for _, l := range sink.lines(t) {
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
}
