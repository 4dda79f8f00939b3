package sdk_test

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/sdk"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
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

// gatedClient answers each start once n of them are in flight, so that n
// calls hold n connections at once, and notes the connections (the
// callers' addresses) they came on.
type gatedClient struct {
	orchardv1connect.UnimplementedClientServiceHandler
	n       int
	mu      sync.Mutex
	arrived int
	open    chan struct{}
	peers   map[string]bool
}

func (g *gatedClient) StartOrchestration(ctx context.Context, req *connect.Request[orchardv1.StartOrchestrationRequest]) (*connect.Response[orchardv1.StartOrchestrationResponse], error) {
	g.mu.Lock()
	g.peers[req.Peer().Addr] = true
	g.arrived++
	if g.arrived%g.n == 0 {
		close(g.open)
	}
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return connect.NewResponse(&orchardv1.StartOrchestrationResponse{InstanceId: "i", ExecutionId: 1}), nil
}

// A client made without an HTTP client of its own keeps the connections of
// its concurrent calls for the next ones (http.DefaultClient keeps 2 per
// host and would open most of them again).
func TestConcurrentCallsReuseTheirConnections(t *testing.T) {
	const n = 32
	g := &gatedClient{n: n, open: make(chan struct{}), peers: map[string]bool{}}
	c := newClient(t, serve(t, services{client: g}))
	wave := func() int {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				_, err := c.Start(t.Context(), "echo", nil, sdk.WithInstanceID("i"))
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		g.mu.Lock()
		defer g.mu.Unlock()
		g.open = make(chan struct{})
		return len(g.peers)
	}
	require.Equal(t, n, wave(), "connections of the first wave")
	// A connection goes back to the pool just after its call returns, so a
	// few of the second wave may still find theirs on the way.
	require.LessOrEqual(t, wave()-n, n/4, "connections the second wave opened")
}
