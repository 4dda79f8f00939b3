package testdb

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orchardhq/orchard/internal/dbserver"
)

// Restartable is a PostgreSQL server of the test's own, holding one
// migrated database, that the test can stop and start again on the same
// port and files: for tests of what clients see while the database goes
// away (a fast shutdown: sessions are ended with 57P01) and comes back.
// It needs the machine's PostgreSQL binaries, whatever server the other
// tests use.
type Restartable struct {
	tb   testing.TB
	dir  string
	port int
	srv  *dbserver.Server
	// URL reaches the migrated database; it stays the same across restarts.
	URL string
}

// NewRestartable starts the test's own server and migrates a database on
// it; both go when the test ends.
func NewRestartable(tb testing.TB) *Restartable {
	tb.Helper()
	// Not t.TempDir: when the tests run as root the server runs as another
	// account, which must be able to traverse the path.
	dir, err := os.MkdirTemp("", "orchard-pg-")
	if err != nil {
		tb.Fatalf("testdb: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatalf("testdb: %v", err)
	}
	r := &Restartable{tb: tb, dir: dir}
	tb.Cleanup(func() {
		if r.srv != nil {
			_ = r.srv.Stop()
		}
		_ = os.RemoveAll(dir)
	})
	r.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name, err := makeTemplate(ctx, r.srv.URL)
	if err != nil {
		tb.Fatalf("testdb: %v", err)
	}
	r.URL = withDatabase(r.srv.URL, name)
	return r
}

// Start starts the server (again), on the port it had.
func (r *Restartable) Start() {
	r.tb.Helper()
	if r.srv != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := dbserver.StartPostgres(ctx, dbserver.PostgresOptions{Dir: r.dir, Port: r.port})
	if err != nil {
		r.tb.Fatalf("testdb: start the restartable server: %v\nTo get one, %s.", err, howToGetOne)
	}
	r.srv = srv
	if r.port == 0 {
		cfg, err := pgxpool.ParseConfig(srv.URL)
		if err != nil {
			r.tb.Fatalf("testdb: %v", err)
		}
		r.port = int(cfg.ConnConfig.Port)
	}
}

// Stop shuts the server down fast: open sessions end with 57P01 (admin
// shutdown), new connections are refused until Start.
func (r *Restartable) Stop() {
	r.tb.Helper()
	if r.srv == nil {
		return
	}
	if err := r.srv.Stop(); err != nil {
		r.tb.Fatalf("testdb: stop the restartable server: %v", err)
	}
	r.srv = nil
}

// Pool returns a pool on the database, closed when the test ends. It
// reconnects by itself after a restart.
func (r *Restartable) Pool(maxConns int32) *pgxpool.Pool {
	r.tb.Helper()
	return poolOn(r.tb, r.URL, maxConns)
}
