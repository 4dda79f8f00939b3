package schema

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MigrationStatus is one migration that applies to a server, and when it was
// applied (zero while it is pending).
type MigrationStatus struct {
	Version   string
	AppliedAt time.Time
}

// Pending reports a migration not applied yet.
func (m MigrationStatus) Pending() bool { return m.AppliedAt.IsZero() }

// Status lists the migrations that apply to the server behind conn, in order,
// with when each was applied. It only reads: it takes no lease and creates
// nothing, so it is safe beside a running migrator (a database never
// migrated has every migration pending).
func Status(ctx context.Context, conn Conn) ([]MigrationStatus, error) {
	cockroach, err := IsCockroach(ctx, conn)
	if err != nil {
		return nil, err
	}
	migrations, err := Migrations(cockroach)
	if err != nil {
		return nil, err
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_name = 'schema_migrations')`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("look for schema_migrations: %w", err)
	}
	applied := map[string]time.Time{}
	if exists {
		rows, err := conn.Query(ctx, "SELECT version, applied_at FROM schema_migrations")
		if err != nil {
			return nil, fmt.Errorf("read schema_migrations: %w", err)
		}
		var version string
		var at int64
		if _, err := pgx.ForEachRow(rows, []any{&version, &at}, func() error {
			applied[version] = time.UnixMilli(at).UTC()
			return nil
		}); err != nil {
			return nil, fmt.Errorf("read schema_migrations: %w", err)
		}
	}
	out := make([]MigrationStatus, len(migrations))
	for i, m := range migrations {
		out[i] = MigrationStatus{Version: m.Version, AppliedAt: applied[m.Version]}
	}
	return out, nil
}
