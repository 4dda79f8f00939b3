package api_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
	"github.com/orchardhq/orchard/services/api"
	"github.com/orchardhq/orchard/services/dispatcher"
)

// apiConfig is api.Config, for option funcs.
type apiConfig = api.Config

func TestMain(m *testing.M) { testdb.Main(m) }

// env is the system (internal/testsystem) without dispatchers, and an
// HTTP client that speaks unencrypted HTTP/2 (for gRPC).
type env struct {
	*testsystem.System
	t   testing.TB
	h2c *http.Client
}

func quiet() *slog.Logger { return testsystem.Quiet() }

func newEnv(t testing.TB, configure ...func(*api.Config)) *env {
	t.Helper()
	s := testsystem.New(t, testsystem.Options{Configure: func(_ *testsystem.System, cfg *api.Config) {
		for _, f := range configure {
			f(cfg)
		}
	}})
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: p}}
	t.Cleanup(h2c.CloseIdleConnections)
	return &env{System: s, t: t, h2c: h2c}
}

// tenant registers a tenant with limits and definitions.
func (e *env) tenant(id string, limits *store.Limits, defs ...string) string {
	e.t.Helper()
	ctx := context.Background()
	require.NoError(e.t, e.Store.CreateTenant(ctx, &store.CreateTenantParams{TenantID: id}))
	if limits != nil {
		_, err := e.Store.UpdateTenant(ctx, &store.UpdateTenantParams{TenantID: id, Limits: limits})
		require.NoError(e.t, err)
	}
	if len(defs) > 0 {
		admin := e.clients(e.token(id, tenancy.RoleTenantAdmin))
		for _, d := range defs {
			_, err := admin.defs.RegisterDefinition(ctx, connect.NewRequest(&orchardv1.RegisterDefinitionRequest{Document: []byte(d)}))
			require.NoError(e.t, err)
		}
	}
	return id
}

func (e *env) token(tenant string, roles ...tenancy.Role) string {
	e.t.Helper()
	return e.Token(e.t, tenant, roles...)
}

// clients are the generated clients of every service, sending a token.
type clients struct {
	client orchardv1connect.ClientServiceClient
	worker orchardv1connect.WorkerServiceClient
	defs   orchardv1connect.DefinitionServiceClient
	tenant orchardv1connect.TenantServiceClient
	admin  orchardv1connect.AdminServiceClient
}

func bearer(token string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if token != "" {
				req.Header().Set("Authorization", "Bearer "+token)
			}
			return next(ctx, req)
		}
	}
}

// clients speak the Connect protocol over HTTP/1.1.
func (e *env) clients(token string, opts ...connect.ClientOption) *clients {
	return e.clientsOn(e.Server.Client(), token, opts...)
}

// grpcClients speak gRPC over h2c.
func (e *env) grpcClients(token string) *clients {
	return e.clientsOn(e.h2c, token, connect.WithGRPC())
}

func (e *env) clientsOn(hc *http.Client, token string, opts ...connect.ClientOption) *clients {
	opts = append(opts, connect.WithInterceptors(bearer(token)))
	return &clients{
		client: orchardv1connect.NewClientServiceClient(hc, e.Server.URL, opts...),
		worker: orchardv1connect.NewWorkerServiceClient(hc, e.Server.URL, opts...),
		defs:   orchardv1connect.NewDefinitionServiceClient(hc, e.Server.URL, opts...),
		tenant: orchardv1connect.NewTenantServiceClient(hc, e.Server.URL, opts...),
		admin:  orchardv1connect.NewAdminServiceClient(hc, e.Server.URL, opts...),
	}
}

// roles gives a tenant's clients with every tenant role.
func (e *env) all(tenant string) *clients {
	return e.clients(e.token(tenant, tenancy.RoleClient, tenancy.RoleWorker, tenancy.RoleTenantAdmin))
}

// dispatch runs a dispatcher on the env's store until the test ends.
func (e *env) dispatch() {
	e.t.Helper()
	e.StartDispatcher(e.t, dispatcher.Config{})
}

// requireCode checks a Connect error's code and, when given, that its
// message names a field.
func requireCode(t testing.TB, err error, code connect.Code, mentions ...string) {
	t.Helper()
	require.Error(t, err)
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "not a connect error: %v", err)
	require.Equal(t, code, ce.Code(), "error: %v", err)
	for _, m := range mentions {
		require.Contains(t, ce.Message(), m)
	}
}

// requireReason checks that err carries a google.rpc.ErrorInfo detail
// with the given reason.
func requireReason(t testing.TB, err error, reason string) {
	t.Helper()
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "not a connect error: %v", err)
	for _, d := range ce.Details() {
		if info, derr := d.Value(); derr == nil {
			if info, ok := info.(*errdetails.ErrorInfo); ok {
				require.Equal(t, reason, info.Reason, "error: %v", err)
				return
			}
		}
	}
	t.Fatalf("no ErrorInfo in %v", err)
}

func req[T any](m *T) *connect.Request[T] { return connect.NewRequest(m) }

// waitDone waits through the API for an instance to end.
func (c *clients) waitDone(t testing.TB, id string) *orchardv1.Instance {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		res, err := c.client.WaitForCompletion(t.Context(), req(&orchardv1.WaitForCompletionRequest{InstanceId: id}))
		require.NoError(t, err)
		if res.Msg.Done {
			return res.Msg.Instance
		}
	}
	t.Fatalf("instance %s did not end", id)
	return nil
}

func newClientAt(base, token string) orchardv1connect.ClientServiceClient {
	return orchardv1connect.NewClientServiceClient(http.DefaultClient, base, connect.WithInterceptors(bearer(token)))
}

// When the database cannot be reached, calls answer Unavailable with a
// message that says nothing of the database.
func TestDatabaseDownIsUnavailable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())
	pool, err := pgxpool.New(t.Context(), "postgres://postgres@"+dead+"/orchard?connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	e := newEnv(t, func(c *api.Config) { c.Store = crdb.New(pool, crdb.Options{Logger: quiet(), MaxAttempts: 2}) })
	_, err = e.clients(e.token("acme", tenancy.RoleClient)).client.CountInstances(t.Context(), req(&orchardv1.CountInstancesRequest{}))
	requireCode(t, err, connect.CodeUnavailable)
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	hint := false
	for _, d := range ce.Details() {
		if m, derr := d.Value(); derr == nil {
			if ri, ok := m.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().AsDuration() > 0 {
				hint = true
			}
		}
	}
	require.True(t, hint, "Unavailable carries a RetryInfo")
	require.NotContains(t, err.Error(), dead)
	require.NotContains(t, err.Error(), "postgres")
}
