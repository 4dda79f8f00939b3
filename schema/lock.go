package schema

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Two migrators may run at once (two `helm upgrade`s racing, a Job retried
// while its first pod still runs). Advisory locks are no-ops on CockroachDB,
// so the migrator takes a lease in a table instead: one row, claimed by
// compare-and-set (an INSERT, or an UPDATE of an expired lease), renewed
// before every statement and deleted at the end. A migrator that died
// leaves a lease that expires after LockTTL. The lease is what keeps two
// migrators from running the same migration at once; every statement being
// idempotent is what makes a migrator that lost its lease mid-statement (one
// statement longer than LockTTL) harmless, if slow; a rename, which is not,
// runs in one transaction with its record, so the second migrator to run it
// fails instead of renaming twice.

// LockTTL is how long the migration lease lasts without a renewal.
const LockTTL = 5 * time.Minute

// lockPoll is how often a migrator waiting for the lease tries again.
const lockPoll = 250 * time.Millisecond

// createTables creates the version table and the lock table. Concurrent
// CREATE TABLE IF NOT EXISTS can fail on PostgreSQL (a unique violation in
// its catalog) when another session creates the same table at that moment:
// the statement is then run again.
func createTables(ctx context.Context, conn Conn) error {
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS schema_migrations (
			version    TEXT NOT NULL PRIMARY KEY,
			applied_at INT8 NOT NULL
		)`,
		`CREATE TABLE IF NOT EXISTS schema_migration_lock (
			id         INT8 NOT NULL PRIMARY KEY,
			holder     TEXT NOT NULL,
			expires_at INT8 NOT NULL
		)`,
	} {
		var err error
		for attempt := 0; attempt < 10; attempt++ {
			if _, err = conn.Exec(ctx, stmt); err == nil || !IsConcurrentDDL(err) || pause(ctx, 10*time.Millisecond) != nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("create the migration tables: %w", err)
		}
	}
	return nil
}

// IsConcurrentDDL reports the errors of a statement that raced another
// session's: a catalog unique violation, a duplicate table or type (PostgreSQL's
// concurrent CREATE TABLE IF NOT EXISTS), a serialization failure (either
// database, under SERIALIZABLE).
func IsConcurrentDDL(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P07" || pgErr.Code == "42710" || pgErr.Code == "40001")
}

// lease is a migrator's hold of the migration lock.
type lease struct {
	conn   Conn
	holder string
}

// newHolder names a migrator: host and process, to read in the table, and
// random bytes, so two migrators never share a name.
func newHolder() string {
	host, _ := os.Hostname()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}

// acquireLock waits until it holds the migration lease, or ctx ends.
func acquireLock(ctx context.Context, conn Conn) (*lease, error) {
	l := &lease{conn: conn, holder: newHolder()}
	waitingFor := "" // who held the lease when we last looked
	for {
		held, by, err := l.claim(ctx)
		if err != nil && waitingFor != "" {
			// ctx may end during a claim as well as during a pause: the
			// error names who we were waiting for either way.
			return nil, fmt.Errorf("waiting for the migration lock held by %s: %w", waitingFor, err)
		}
		if err != nil {
			return nil, err
		}
		if held {
			return l, nil
		}
		if waitingFor == "" {
			slog.InfoContext(ctx, "schema: waiting for the migration lock", "held_by", by)
		}
		waitingFor = by
		if err := pause(ctx, lockPoll); err != nil {
			return nil, fmt.Errorf("waiting for the migration lock held by %s: %w", by, err)
		}
	}
}

// claim takes the lease when it is free, expired or ours (a renewal), and
// otherwise reports who holds it. Claims race each other (and, under
// SERIALIZABLE, fail with 40001 when they do): a failed claim is tried
// again after a short pause, until ctx ends.
func (l *lease) claim(ctx context.Context) (held bool, by string, err error) {
	for {
		held, by, err = l.tryClaim(ctx)
		if err == nil || !IsConcurrentDDL(err) {
			return held, by, err
		}
		if err := pause(ctx, 10*time.Millisecond+time.Duration(mrand.Int64N(int64(20*time.Millisecond)))); err != nil {
			return false, "", fmt.Errorf("take the migration lock: %w", err)
		}
	}
}

func (l *lease) tryClaim(ctx context.Context) (held bool, by string, err error) {
	now := time.Now().UnixMilli()
	err = l.conn.QueryRow(ctx, `
INSERT INTO schema_migration_lock (id, holder, expires_at) VALUES (1, $1, $2)
ON CONFLICT (id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE schema_migration_lock.holder = $1 OR schema_migration_lock.expires_at < $3
RETURNING holder`, l.holder, now+LockTTL.Milliseconds(), now).Scan(&by)
	if err == nil {
		return true, by, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return false, "", fmt.Errorf("take the migration lock: %w", err)
	}
	err = l.conn.QueryRow(ctx, "SELECT holder FROM schema_migration_lock WHERE id = 1").Scan(&by)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, "(released)", nil // released in between: claim again
	}
	if err != nil {
		return false, "", fmt.Errorf("read the migration lock: %w", err)
	}
	return false, by, nil
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// renew extends the lease; it fails when another migrator took it (ours
// expired).
func (l *lease) renew(ctx context.Context) error {
	held, by, err := l.claim(ctx)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("lost the migration lock to %s (held longer than %v without a renewal)", by, LockTTL)
	}
	return nil
}

// release deletes the lease if it is still ours.
func (l *lease) release(ctx context.Context) error {
	for {
		_, err := l.conn.Exec(ctx, "DELETE FROM schema_migration_lock WHERE id = 1 AND holder = $1", l.holder)
		if err == nil {
			return nil
		}
		if !IsConcurrentDDL(err) || pause(ctx, 10*time.Millisecond) != nil {
			return fmt.Errorf("release the migration lock: %w", err)
		}
	}
}
