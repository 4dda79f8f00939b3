package schema

import "context"

// MigrateOnly applies the migrations that keep accepts, as Migrate applies
// them all: for tests that bring a database to an older version, or one
// migration at a time.
func MigrateOnly(ctx context.Context, conn Conn, keep func(Migration) bool) ([]string, error) {
	return migrate(ctx, conn, keep)
}
