package sdk_test

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/sdk"
)

// countingConn counts the writes on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// A unary call goes out in one write over HTTP/1.1: its headers are not
// flushed apart from its body; the server receives the body whole.
func TestACallIsOneWrite(t *testing.T) {
	rec := &recordingClient{}
	ts := serve(t, services{client: rec})
	var writes atomic.Int64
	var dialer net.Dialer
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, addr)
		return countingConn{Conn: conn, writes: &writes}, err
	}}}
	t.Cleanup(hc.CloseIdleConnections)
	c := newClient(t, ts, sdk.WithHTTPClient(hc))
	input := map[string]int{"n": 7}
	for i := range 3 {
		_, err := c.Start(t.Context(), "echo", input, sdk.WithInstanceID("i"))
		require.NoError(t, err)
		require.Equal(t, int64(i+1), writes.Load(), "writes after %d calls", i+1)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.starts, 3)
	require.JSONEq(t, `{"n":7}`, string(rec.starts[2].Input))
}
