package api_test

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/orchardhq/orchard/internal/testdb"
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

const (
	issuer   = "https://orchard.test"
	audience = "orchard-api"
)

// Definitions the tests register.
const (
	// echoDef runs one activity and returns its output.
	echoDef = `
name: echo
version: "1"
steps:
  - id: work
    activity: { name: work, task_queue: q, input: "${ input }" }
  - return: ${ steps.work.output }
`
	// quickDef returns its input at once.
	quickDef = `
name: quick
version: "1"
steps:
  - return: ${ input }
`
	// waiterDef waits for an event "go" and returns its payload.
	waiterDef = `
name: waiter
version: "1"
steps:
  - id: ev
    wait_event: { name: go }
  - return: ${ steps.ev.output }
`
	// loopDef continues as new until n reaches 3.
	loopDef = `
name: loop
version: "1"
steps:
  - if: ${ input.n >= 3 }
    return: ${ input.n }
  - continue_as_new:
      input:
        n: ${ input.n + 1 }
`
)

// env is a database, a store, an API server on loopback (HTTP/1.1 and h2c)
// and a minter whose tokens the server accepts.
type env struct {
	t      testing.TB
	store  *crdb.Store
	api    *api.Server
	srv    *httptest.Server
	minter *tenancy.Minter
	key    ed25519.PrivateKey // the minter's
	// h2c is an HTTP client that speaks unencrypted HTTP/2 (for gRPC).
	h2c *http.Client
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newEnv(t testing.TB, configure ...func(*api.Config)) *env {
	t.Helper()
	pool := testdb.Pool(t, 20)
	st := crdb.New(pool, crdb.Options{Logger: quiet()})
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	minter, err := tenancy.NewMinter(tenancy.MinterConfig{PrivateKey: priv, Issuer: issuer, Audience: audience, MaxTTL: 400 * 24 * time.Hour})
	require.NoError(t, err)
	verifier, err := tenancy.NewVerifier(t.Context(), tenancy.VerifierConfig{
		Issuer: issuer, Audience: audience, PublicKeys: []crypto.PublicKey{minter.PublicKey()},
	})
	require.NoError(t, err)
	cfg := api.Config{Store: st, Verifier: verifier, Minter: minter, Logger: quiet(), MaxPoll: 20 * time.Millisecond}
	for _, f := range configure {
		f(&cfg)
	}
	a, err := api.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(a.Handler())
	srv.Config.Protocols = api.Protocols()
	srv.Config.ReadHeaderTimeout = 5 * time.Second
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Stop(ctx)
	})
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: p}}
	t.Cleanup(h2c.CloseIdleConnections)
	return &env{t: t, store: st, api: a, srv: srv, minter: minter, key: priv, h2c: h2c}
}

// tenant registers a tenant with limits and definitions.
func (e *env) tenant(id string, limits *store.Limits, defs ...string) string {
	e.t.Helper()
	ctx := context.Background()
	require.NoError(e.t, e.store.CreateTenant(ctx, &store.CreateTenantParams{TenantID: id}))
	if limits != nil {
		_, err := e.store.UpdateTenant(ctx, &store.UpdateTenantParams{TenantID: id, Limits: limits})
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
	tok, err := e.minter.Mint(tenancy.Claims{Tenant: tenant, Subject: "test", Roles: roles}, time.Hour)
	require.NoError(e.t, err)
	return tok
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
	return e.clientsOn(e.srv.Client(), token, opts...)
}

// grpcClients speak gRPC over h2c.
func (e *env) grpcClients(token string) *clients {
	return e.clientsOn(e.h2c, token, connect.WithGRPC())
}

func (e *env) clientsOn(hc *http.Client, token string, opts ...connect.ClientOption) *clients {
	opts = append(opts, connect.WithInterceptors(bearer(token)))
	return &clients{
		client: orchardv1connect.NewClientServiceClient(hc, e.srv.URL, opts...),
		worker: orchardv1connect.NewWorkerServiceClient(hc, e.srv.URL, opts...),
		defs:   orchardv1connect.NewDefinitionServiceClient(hc, e.srv.URL, opts...),
		tenant: orchardv1connect.NewTenantServiceClient(hc, e.srv.URL, opts...),
		admin:  orchardv1connect.NewAdminServiceClient(hc, e.srv.URL, opts...),
	}
}

// roles gives a tenant's clients with every tenant role.
func (e *env) all(tenant string) *clients {
	return e.clients(e.token(tenant, tenancy.RoleClient, tenancy.RoleWorker, tenancy.RoleTenantAdmin))
}

// dispatch runs a dispatcher on the env's store until the test ends.
func (e *env) dispatch() {
	e.t.Helper()
	d, err := dispatcher.New(dispatcher.Config{Store: e.store, Logger: quiet(), MaxPoll: 10 * time.Millisecond, Loops: 2})
	require.NoError(e.t, err)
	require.NoError(e.t, d.Start(context.Background()))
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Stop(ctx)
	})
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

func mustVerifier(t testing.TB, e *env) *tenancy.Verifier {
	t.Helper()
	v, err := tenancy.NewVerifier(t.Context(), tenancy.VerifierConfig{Issuer: issuer, Audience: audience, PublicKeys: []crypto.PublicKey{e.minter.PublicKey()}})
	require.NoError(t, err)
	return v
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
