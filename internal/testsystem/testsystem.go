// Package testsystem runs the whole control plane inside a test's process,
// from real parts: a fresh database from internal/testdb, the store on it,
// the API (services/api) on loopback with a minter whose tokens it accepts,
// and dispatchers. The tests of the API, the SDK, the CLI, the console and
// the load generator share it, and share the fixture definitions in
// definitions/.
//
// It is for tests: it must never be used by a service.
package testsystem

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	_ "embed"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/pkg/tenancy"
	"github.com/orchardhq/orchard/services/api"
	"github.com/orchardhq/orchard/services/dispatcher"
)

// The issuer and audience of the tokens the system's API accepts.
const (
	Issuer   = "https://orchard.test"
	Audience = "orchard-api"
)

// Fixture definitions; each file says what its definition does.
var (
	//go:embed definitions/echo.yaml
	EchoDef string
	//go:embed definitions/quick.yaml
	QuickDef string
	//go:embed definitions/waiter.yaml
	WaiterDef string
	//go:embed definitions/parent.yaml
	ParentDef string
	//go:embed definitions/loop.yaml
	LoopDef string
	//go:embed definitions/race.yaml
	RaceDef string
	//go:embed definitions/greet.yaml
	GreetDef string
	//go:embed definitions/family.yaml
	FamilyDef string
	//go:embed definitions/stuck.yaml
	StuckDef string
)

// Options shape a System; the zero value is a served API without
// dispatchers on a fresh database.
type Options struct {
	// Pool is the database; default a fresh one (testdb.Pool, 20 connections).
	Pool *pgxpool.Pool
	// Key signs the tokens; default a fresh Ed25519 key.
	Key ed25519.PrivateKey
	// Configure adjusts the API's configuration before the API is made;
	// the system's Pool and Store are set by then.
	Configure func(s *System, cfg *api.Config)
	// Unserved leaves the API's handler unserved, for tests that serve it
	// themselves (System.Server is nil, System.URL empty).
	Unserved bool
	// Dispatchers is how many dispatchers run on the store, each as
	// StartDispatcher starts it with a zero Config.
	Dispatchers int
	// Tenants are created in the store.
	Tenants []string
}

// System is a running control plane; everything it started stops when the
// test ends.
type System struct {
	Pool   *pgxpool.Pool
	Store  *crdb.Store
	API    *api.Server
	Minter *tenancy.Minter
	Key    ed25519.PrivateKey
	// Server serves the API over HTTP/1.1 and h2c, at URL.
	Server *httptest.Server
	URL    string
}

// Quiet is the logger of the system's parts.
func Quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// New starts a system.
func New(tb testing.TB, opts Options) *System {
	tb.Helper()
	s := &System{Pool: opts.Pool, Key: opts.Key}
	if s.Pool == nil {
		s.Pool = testdb.Pool(tb, 20)
	}
	s.Store = crdb.New(s.Pool, crdb.Options{Logger: Quiet()})
	if s.Key == nil {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(tb, err)
		s.Key = priv
	}
	var err error
	// The minter's own bound lies above the API's bound on the tokens it
	// issues, so that the API's bound is the one tests meet.
	s.Minter, err = tenancy.NewMinter(tenancy.MinterConfig{PrivateKey: s.Key, Issuer: Issuer, Audience: Audience, MaxTTL: 400 * 24 * time.Hour})
	require.NoError(tb, err)
	cfg := api.Config{Store: s.Store, Verifier: s.Verifier(tb), Minter: s.Minter, Logger: Quiet(), MaxPoll: 20 * time.Millisecond}
	if opts.Configure != nil {
		opts.Configure(s, &cfg)
	}
	s.API, err = api.New(cfg)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.API.Stop(ctx)
	})
	if !opts.Unserved {
		s.Server = httptest.NewUnstartedServer(s.API.Handler())
		s.Server.Config.Protocols = api.Protocols()
		s.Server.Config.ReadHeaderTimeout = 5 * time.Second
		s.Server.Start()
		tb.Cleanup(s.Server.Close)
		s.URL = s.Server.URL
	}
	for _, id := range opts.Tenants {
		require.NoError(tb, s.Store.CreateTenant(tb.Context(), &store.CreateTenantParams{TenantID: id}))
	}
	for range opts.Dispatchers {
		s.StartDispatcher(tb, dispatcher.Config{})
	}
	return s
}

// Verifier returns a verifier that accepts the system's tokens.
func (s *System) Verifier(tb testing.TB) *tenancy.Verifier {
	tb.Helper()
	v, err := tenancy.NewVerifier(tb.Context(), tenancy.VerifierConfig{
		Issuer: Issuer, Audience: Audience, PublicKeys: []crypto.PublicKey{s.Minter.PublicKey()},
	})
	require.NoError(tb, err)
	return v
}

// Token mints a token of the tenant ("" for none) with the roles.
func (s *System) Token(tb testing.TB, tenant string, roles ...tenancy.Role) string {
	tb.Helper()
	tok, err := s.Minter.Mint(tenancy.Claims{Tenant: tenant, Subject: "test", Roles: roles}, time.Hour)
	require.NoError(tb, err)
	return tok
}

// StartDispatcher starts a dispatcher on the system's store until the test
// ends. Zero fields of cfg take the tests' defaults: the system's store, a
// quiet logger, two loops that poll at most every 10ms.
func (s *System) StartDispatcher(tb testing.TB, cfg dispatcher.Config) *dispatcher.Dispatcher {
	tb.Helper()
	if cfg.Store == nil {
		cfg.Store = s.Store
	}
	if cfg.Logger == nil {
		cfg.Logger = Quiet()
	}
	if cfg.MaxPoll == 0 {
		cfg.MaxPoll = 10 * time.Millisecond
	}
	if cfg.Loops == 0 {
		cfg.Loops = 2
	}
	d, err := dispatcher.New(cfg)
	require.NoError(tb, err)
	require.NoError(tb, d.Start(context.Background()))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Stop(ctx)
	})
	return d
}
