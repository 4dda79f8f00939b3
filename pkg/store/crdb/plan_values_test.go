package crdb

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/storetest"
)

// A listing built from a filter is planned with its values even on
// connections that force generic plans, as the commands' do (customPlan):
// the plan PostgreSQL reports for it (auto_explain, sent back as a notice)
// compares with the values themselves, not with $1. Its ids, statuses and
// range still select what they name, on either database (CockroachDB has
// no auto_explain: there only the listing's result is checked).
func TestFilterStatementsPlanWithTheirValues(t *testing.T) {
	t.Parallel()
	postgres := !testdb.SharedServer(t).Cockroach
	var (
		mu      sync.Mutex
		notices []string
	)
	cfg, err := pgxpool.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = 1
	if postgres {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
		cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			mu.Lock()
			defer mu.Unlock()
			notices = append(notices, n.Message)
		}
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; SET auto_explain.log_level = notice")
			return err
		}
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	const tenant = "plan-values"
	clock := storetest.NewManualClock(time.UnixMilli(1_000))
	s := New(pool, Options{Clock: clock})
	ctx := t.Context()
	require.NoError(t, s.CreateTenant(ctx, &store.CreateTenantParams{TenantID: tenant}))
	for _, id := range []string{"a", "b", "c"} {
		_, err := s.StartOrchestration(ctx, &store.StartOrchestrationParams{TenantID: tenant, InstanceID: id, Name: "n",
			Start: store.Message{Kind: "start"}})
		require.NoError(t, err)
		clock.Advance(time.Millisecond)
	}

	mu.Lock()
	notices = nil
	mu.Unlock()
	after := time.UnixMilli(1_001) // inclusive
	res, err := s.ListInstances(ctx, &store.ListInstancesParams{TenantID: tenant, Filter: store.InstanceFilter{
		InstanceIDs: []string{"a", "b", "c"}, Statuses: []store.Status{store.StatusRunning}, CreatedAfter: &after}})
	require.NoError(t, err)
	var ids []string
	for _, in := range res.Instances {
		ids = append(ids, in.InstanceID)
	}
	require.Equal(t, []string{"c", "b"}, ids, "created at 1001 ms or after, newest first")

	if !postgres {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, notices, "auto_explain reported no plan")
	for _, plan := range notices {
		require.Contains(t, plan, "'"+tenant+"'", "a plan of the listing names the tenant's id:\n%s", plan)
		require.NotContains(t, plan, "$1", "a plan of the listing is generic:\n%s", plan)
	}
}
