package crdb

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
)

// A completion that writes its instance's next turn updates the turn's
// execution by its whole key, in the generic plan PostgreSQL keeps for the
// batch of completions, and keeps whatever statistics the tables have:
// executions has none until ten thousand rows changed (pg_only/0003). A
// constant in the statement, on a column after the instance id in the key,
// looked selective to a plan made without statistics, which then read every
// execution of the tenant at each batch: at 450 orchestrations a second the
// first 15 s of a fresh database stalled, the batches taking 20-60 ms each.
// On CockroachDB, whose plans this does not concern, the statement is only
// prepared.
func TestFoldedCompletionFindsItsExecutionByKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, testdb.URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	sql, args, err := pgx.NamedArgs{}.RewriteQuery(ctx, conn, sqlAckWorkWithResults, nil)
	require.NoError(t, err)
	if testdb.SharedServer(t).Cockroach {
		_, err := conn.Prepare(ctx, "completions", sql)
		require.NoError(t, err)
		return
	}
	_, err = conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "PREPARE completions AS "+sql)
	require.NoError(t, err)
	nulls := strings.TrimSuffix(strings.Repeat("NULL, ", len(args)), ", ")
	var plan []string
	rows, err := conn.Query(ctx, "EXPLAIN (COSTS off) EXECUTE completions("+nulls+")")
	require.NoError(t, err)
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, strings.TrimSpace(line))
	}
	require.NoError(t, rows.Err())
	found := false
	for i, line := range plan {
		if !strings.Contains(line, " on executions ") || !strings.Contains(line, "Scan") {
			continue
		}
		found = true
		require.Contains(t, line, "executions_pkey", "the execution is found by its key:\n%s", strings.Join(plan, "\n"))
		require.Less(t, i+1, len(plan))
		require.Contains(t, plan[i+1], "instance_id", "the scan of executions is bounded by the instance ids:\n%s", strings.Join(plan, "\n"))
	}
	require.True(t, found, "the plan reads executions:\n%s", strings.Join(plan, "\n"))
}
