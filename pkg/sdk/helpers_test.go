package sdk_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/sdk"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
)

// services are the handlers a test server mounts; nil ones answer
// Unimplemented.
type services struct {
	client      orchardv1connect.ClientServiceHandler
	worker      orchardv1connect.WorkerServiceHandler
	definitions orchardv1connect.DefinitionServiceHandler
}

// testServer is a real Connect server on loopback with the test's
// handlers, recording the Authorization and traceparent headers of every
// request.
type testServer struct {
	*httptest.Server
	mu     sync.Mutex
	tokens []string
	traces []string
}

func serve(t testing.TB, s services) *testServer {
	t.Helper()
	if s.client == nil {
		s.client = orchardv1connect.UnimplementedClientServiceHandler{}
	}
	if s.worker == nil {
		s.worker = orchardv1connect.UnimplementedWorkerServiceHandler{}
	}
	if s.definitions == nil {
		s.definitions = orchardv1connect.UnimplementedDefinitionServiceHandler{}
	}
	mux := http.NewServeMux()
	mux.Handle(orchardv1connect.NewClientServiceHandler(s.client))
	mux.Handle(orchardv1connect.NewWorkerServiceHandler(s.worker))
	mux.Handle(orchardv1connect.NewDefinitionServiceHandler(s.definitions))
	ts := &testServer{}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.mu.Lock()
		ts.tokens = append(ts.tokens, r.Header.Get("Authorization"))
		ts.traces = append(ts.traces, r.Header.Get("Traceparent"))
		ts.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts
}

func (ts *testServer) authorizations() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.tokens...)
}

func (ts *testServer) traceparents() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.traces...)
}

// fastRetries keeps the retry tests quick.
var fastRetries = sdk.RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}

func newClient(t testing.TB, ts *testServer, opts ...sdk.Option) *sdk.Client {
	t.Helper()
	opts = append([]sdk.Option{sdk.WithToken("test-token"), sdk.WithRetryPolicy(fastRetries)}, opts...)
	return sdk.NewClient(ts.URL, opts...)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// eventually polls cond until it holds or fails the test after 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 10*time.Second, what, cond)
}

// unavailable is the error of a server that cannot serve now.
func unavailable() error {
	return connect.NewError(connect.CodeUnavailable, errStr("the service is temporarily unavailable"))
}

type errStr string

func (e errStr) Error() string { return string(e) }
