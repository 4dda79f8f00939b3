package sqlcapture_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/sqlcapture"
	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/schema"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The capture records what our code sends, with the isolation level of its
// transaction, once per statement and caller; it leaves out what test files
// send themselves.
func TestCapture(t *testing.T) {
	dir := t.TempDir()
	cfg, err := pgxpool.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	sqlcapture.New(dir).Install(cfg.ConnConfig)
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	defer pool.Close()

	// Implicit transaction, twice: recorded once.
	for range 2 {
		_, err = schema.IsCockroach(t.Context(), pool)
		require.NoError(t, err)
	}
	// Inside a READ COMMITTED transaction that the test opens: the BEGIN
	// comes from the test, the statement from schema.
	tx, err := pool.BeginTx(t.Context(), pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	require.NoError(t, err)
	_, err = schema.IsCockroach(t.Context(), tx)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(t.Context()))
	// A pipelined READ COMMITTED transaction of the store.
	_, err = crdb.New(pool, crdb.Options{}).FetchWorkItems(t.Context(),
		&store.FetchWorkItemsParams{TenantID: "t1", TaskQueue: "q", LeaseDuration: time.Minute})
	require.NoError(t, err)
	// Sent by this test file: left out.
	_, err = pool.Exec(t.Context(), "SELECT 42")
	require.NoError(t, err)

	got, err := read(dir)
	require.NoError(t, err)
	seen := map[string][]string{}
	for _, s := range got {
		seen[s.SQL] = append(seen[s.SQL], s.Isolation)
		require.NotEmpty(t, s.Caller, s.SQL)
		require.True(t, strings.HasPrefix(s.Caller[0], "github.com/orchardhq/orchard/"), s.Caller[0])
	}
	require.Equal(t, []string{"", "read committed"}, seen["SELECT version()"])
	require.NotContains(t, seen, "SELECT 42")
	// pgx words the store's BEGIN as it words the test's own: one record,
	// the store's.
	require.Equal(t, []string{"read committed"}, seen["begin isolation level read committed"], "the store's BEGIN, and not the test's own")
	require.Equal(t, []string{"read committed"}, seen["COMMIT"])
	claims := 0
	for sql, isos := range seen {
		if strings.Contains(sql, "FROM worker_queue") {
			claims++
			require.Equal(t, []string{"read committed"}, isos, sql)
		}
	}
	require.Equal(t, 1, claims, "the work claim")
}

// read returns the statements of every capture file in dir.
func read(dir string) ([]sqlcapture.Statement, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	var out []sqlcapture.Statement
	for _, name := range names {
		body, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		for line := range strings.SplitSeq(strings.TrimSpace(string(body)), "\n") {
			var s sqlcapture.Statement
			if err := json.Unmarshal([]byte(line), &s); err != nil {
				return nil, err
			}
			out = append(out, s)
		}
	}
	return out, nil
}
