package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/orchardhq/orchard/internal/dbserver"
	"github.com/orchardhq/orchard/loadtest"
)

// database is the campaign's PostgreSQL: a cluster in a directory of its
// own, on a port that stays the same across restarts (the proxy points there).
type database struct {
	opts dbserver.PostgresOptions

	mu  sync.Mutex
	srv *dbserver.Server
	// downtimes are the restarts' durations, stop to accepting connections.
	downtimes []time.Duration
}

func startDatabase(ctx context.Context, dir string) (*database, error) {
	port, err := dbserver.FreePort()
	if err != nil {
		return nil, err
	}
	d := &database{opts: dbserver.PostgresOptions{Dir: dir, Port: port}}
	if d.srv, err = dbserver.StartPostgres(ctx, d.opts); err != nil {
		return nil, err
	}
	return d, nil
}

// url reaches the database directly (not through the proxy).
func (d *database) url() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.srv.URL
}

func (d *database) addr() string { return fmt.Sprintf("127.0.0.1:%d", d.opts.Port) }

// restart stops the server (a fast shutdown: sessions are ended) and
// starts it again on the same data and port.
func (d *database) restart(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	began := time.Now()
	if err := d.srv.Stop(); err != nil {
		return fmt.Errorf("stop the database: %w", err)
	}
	var err error
	// The port was ours a moment ago; another process may take it in
	// between, rarely: try a few times.
	for range 5 {
		if d.srv, err = dbserver.StartPostgres(ctx, d.opts); err == nil {
			d.downtimes = append(d.downtimes, time.Since(began))
			return nil
		}
		if !loadtest.Sleep(ctx, 500*time.Millisecond) {
			break
		}
	}
	d.srv = dbserver.External("", false) // nothing to stop
	return fmt.Errorf("start the database again: %w", err)
}

func (d *database) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	_ = d.srv.Stop()
}
