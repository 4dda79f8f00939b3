// Package testdb gives tests a real database: one throwaway server per test
// binary and a fresh, migrated database per test. It never mocks anything and
// never skips: a test that cannot get a database fails and says how to get one.
//
// The server is chosen in this order:
//
//  1. ORCHARD_TEST_DATABASE_URL, a server someone else runs (PostgreSQL or
//     CockroachDB); each test gets its own database on it, dropped afterwards.
//  2. A cockroach binary on PATH, started as a single in-memory node.
//  3. The machine's PostgreSQL binaries (PATH, then /usr/lib/postgresql/*/bin):
//     initdb into a temporary directory, a free loopback port, fsync off,
//     default_transaction_isolation = serializable like CockroachDB.
//
// On PostgreSQL each test's database is a copy of a template migrated once;
// on CockroachDB, which has no templates, each test's database is migrated.
// A throwaway server stops and its files go away when the binary exits, also
// after a panic or os.Exit: call Main from TestMain to stop it promptly.
//
// Starting and stopping the server process is internal/dbserver's, which
// `orchard dev` uses too; this package is the test glue around it.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orchardhq/orchard/internal/dbserver"
	"github.com/orchardhq/orchard/internal/sqlcapture"
	"github.com/orchardhq/orchard/schema"
)

// EnvURL names the environment variable that points tests at a server.
const EnvURL = "ORCHARD_TEST_DATABASE_URL"

const howToGetOne = "set " + EnvURL + " to a PostgreSQL or CockroachDB URL, put a cockroach binary on PATH, " +
	"or install PostgreSQL's server binaries (apt-get install postgresql)"

var shared struct {
	once     sync.Once
	server   *dbserver.Server
	template string // PostgreSQL only: the migrated template database
	err      error
}

// Main runs the tests of a package and then stops the shared server.
// Use it as: func TestMain(m *testing.M) { testdb.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	if shared.server != nil {
		if shared.template != "" && os.Getenv(EnvURL) != "" {
			dropDatabase(shared.server.URL, shared.template)
		}
		_ = shared.server.Stop()
	}
	os.Exit(code)
}

// SharedServer returns the shared server of this test binary, starting it on first use.
func SharedServer(tb testing.TB) *dbserver.Server {
	tb.Helper()
	shared.once.Do(func() {
		shared.server, shared.err = startShared(context.Background())
		if shared.err == nil && !shared.server.Cockroach {
			shared.template, shared.err = makeTemplate(context.Background(), shared.server.URL)
		}
	})
	if shared.err != nil {
		tb.Fatalf("testdb: no database for this test: %v\nTo get one, %s.", shared.err, howToGetOne)
	}
	return shared.server
}

func startShared(ctx context.Context) (*dbserver.Server, error) {
	if raw := os.Getenv(EnvURL); raw != "" {
		conn, err := pgx.Connect(ctx, raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvURL, err)
		}
		defer conn.Close(ctx)
		cockroach, err := schema.IsCockroach(ctx, conn)
		if err != nil {
			return nil, err
		}
		return dbserver.External(raw, cockroach), nil
	}
	if path, err := exec.LookPath("cockroach"); err == nil {
		return dbserver.StartCockroach(ctx, path)
	}
	return dbserver.StartPostgres(ctx, dbserver.PostgresOptions{})
}

func makeTemplate(ctx context.Context, adminURL string) (string, error) {
	name := "orchard_template_" + randomHex(6)
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	tconn, err := connectTraced(ctx, withDatabase(adminURL, name))
	if err != nil {
		return "", err
	}
	defer tconn.Close(ctx)
	if _, err := schema.Migrate(ctx, tconn); err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	return name, nil
}

// URL creates a fresh, migrated database for the test and returns its URL.
// The database is dropped when the test ends.
func URL(tb testing.TB) string {
	tb.Helper()
	return newDatabase(tb, true)
}

// EmptyURL creates a fresh database with no tables, for tests of the
// migrator, and returns its URL. The database is dropped when the test ends.
func EmptyURL(tb testing.TB) string {
	tb.Helper()
	return newDatabase(tb, false)
}

// Clone returns a pool on a new database copied from the database of src,
// which it closes first (PostgreSQL copies only a database nobody is
// connected to), and which stays until the test ends, as does the copy:
// data made once and used afresh by each iteration of a benchmark. ok is
// false on CockroachDB, which has no database templates; src is left open
// then.
func Clone(tb testing.TB, src *pgxpool.Pool, maxConns int32) (pool *pgxpool.Pool, ok bool) {
	tb.Helper()
	if SharedServer(tb).Cockroach {
		return nil, false
	}
	src.Close()
	return poolOn(tb, newDatabaseFrom(tb, src.Config().ConnConfig.Database), maxConns), true
}

func newDatabase(tb testing.TB, migrated bool) string {
	tb.Helper()
	switch {
	case !migrated:
		return newDatabaseFrom(tb, "")
	case !SharedServer(tb).Cockroach:
		return newDatabaseFrom(tb, shared.template)
	}
	dbURL := newDatabaseFrom(tb, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mconn, err := connectTraced(ctx, dbURL)
	if err != nil {
		tb.Fatalf("testdb: connect: %v", err)
	}
	defer mconn.Close(ctx)
	if _, err := schema.Migrate(ctx, mconn); err != nil {
		tb.Fatalf("testdb: migrate: %v", err)
	}
	return dbURL
}

// newDatabaseFrom creates a database, dropped when the test ends: a copy of
// template when one is named (PostgreSQL only), else empty.
func newDatabaseFrom(tb testing.TB, template string) string {
	tb.Helper()
	srv := SharedServer(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := "test_" + randomHex(8)
	conn, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		tb.Fatalf("testdb: connect: %v", err)
	}
	defer conn.Close(ctx)
	create := "CREATE DATABASE " + name
	if template != "" {
		create += " TEMPLATE " + template + " STRATEGY FILE_COPY"
	}
	if _, err := conn.Exec(ctx, create); err != nil {
		tb.Fatalf("testdb: %s: %v", create, err)
	}
	tb.Cleanup(func() { dropDatabase(srv.URL, name) })
	return withDatabase(srv.URL, name)
}

// Pool returns a pool on a fresh, migrated database, closed when the test ends.
func Pool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	return poolOn(tb, URL(tb), maxConns)
}

// PoolFor returns another pool on the database of p, closed when the test
// ends: the connections another process would have.
func PoolFor(tb testing.TB, p *pgxpool.Pool, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	return poolOn(tb, p.Config().ConnString(), maxConns)
}

func poolOn(tb testing.TB, url string, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatalf("testdb: %v", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	sqlcapture.Install(cfg.ConnConfig)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("testdb: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// connectTraced opens a connection whose statements are captured when
// sqlcapture.EnvCapture is set, as are those of the pools Pool returns.
func connectTraced(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	sqlcapture.Install(cfg)
	return pgx.ConnectConfig(ctx, cfg)
}

func dropDatabase(adminURL, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		// CockroachDB has no WITH (FORCE).
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" CASCADE")
	}
}

func withDatabase(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = "/" + name
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
