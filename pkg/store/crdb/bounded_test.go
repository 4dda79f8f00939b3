package crdb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
)

// boundedStore is a store whose delete and prune transactions may touch at
// most budget rows, recording what each committed one removed.
func boundedStore(t *testing.T, budget int64) (*Store, *[]int64) {
	t.Helper()
	s := New(testdb.Pool(t, 8), Options{MaxRowsPerTransaction: budget})
	var mu sync.Mutex
	var txs []int64
	s.onPurge = func(rows int64) {
		mu.Lock()
		defer mu.Unlock()
		txs = append(txs, rows)
	}
	return s, &txs
}

func exec(t *testing.T, s *Store, sql string, args ...any) {
	t.Helper()
	_, err := s.pool.Exec(t.Context(), sql, args...)
	require.NoError(t, err)
}

// fabricateTree writes a completed root with n completed children, each
// with one execution of events history events, straight into the tables.
func fabricateTree(t *testing.T, s *Store, root string, n, events int) {
	exec(t, s, `INSERT INTO instances (tenant_id, instance_id, name, version, current_execution_id, status,
		parent_instance_id, root_instance_id, created_at, updated_at, completed_at, execution_count, event_count)
		SELECT 'acme', $1 || CASE WHEN g = 0 THEN '' ELSE ':' || g::TEXT END, 'n', '1', 1, 'Completed',
			CASE WHEN g = 0 THEN NULL ELSE $1 END, $1, 1, 1, 1, 1, $3
		FROM generate_series(0, $2::INT8) AS g`, root, n, events)
	exec(t, s, `INSERT INTO executions (tenant_id, instance_id, execution_id, status, started_at, completed_at, event_count)
		SELECT 'acme', instance_id, 1, 'Completed', 1, 1, event_count FROM instances WHERE root_instance_id = $1`, root)
	exec(t, s, `INSERT INTO history (tenant_id, instance_id, execution_id, event_id, kind, created_at)
		SELECT 'acme', i.instance_id, 1, g, 'e', 1 FROM instances i, generate_series(1, $2::INT8) AS g
		WHERE i.root_instance_id = $1`, root, events)
	fabricated(t, s)
}

func count(t *testing.T, s *Store, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, s.pool.QueryRow(t.Context(), sql, args...).Scan(&n))
	return n
}

// requireInvariants fails t when a rule of the derived state is broken
// (sql/invariants.sql): counters, prunable instances, due times, tags,
// owners of every row.
func requireInvariants(t *testing.T, s *Store) {
	t.Helper()
	require.NoError(t, s.CheckInvariants(t.Context()))
}

// fabricated gives the instances written straight into the tables what the
// store writes beside each one: the lease row of one not ended (free,
// nothing due) and its place in the status counters.
func fabricated(t *testing.T, s *Store) {
	t.Helper()
	exec(t, s, `INSERT INTO instance_leases (tenant_id, instance_id, lease_token, leased_until, due_at)
		SELECT tenant_id, instance_id, gen_random_uuid(), 0, `+noneDue+` FROM instances
		WHERE status NOT IN ('Completed', 'Failed', 'Cancelled')
		ON CONFLICT (tenant_id, instance_id) DO NOTHING`)
	require.NoError(t, s.RecountInstances(t.Context(), "acme"))
}

func requireWithin(t *testing.T, txs []int64, budget int64) {
	t.Helper()
	require.NotEmpty(t, txs)
	for i, rows := range txs {
		require.LessOrEqual(t, rows, budget, "transaction %d removed %d rows", i, rows)
	}
}

func TestDeleteWideTreeInBoundedTransactions(t *testing.T) {
	t.Parallel()
	const budget = 2000
	s, txs := boundedStore(t, budget)
	fabricateTree(t, s, "wide", 10_000, 2)

	tree, err := s.GetInstanceTree(t.Context(), &store.GetInstanceTreeParams{TenantID: "acme", InstanceID: "wide"})
	require.NoError(t, err)
	require.Len(t, tree.IDs, 10_001)
	require.Equal(t, "wide", tree.IDs[len(tree.IDs)-1], "the root comes last")

	res, err := s.DeleteInstance(t.Context(), &store.DeleteInstanceParams{TenantID: "acme", InstanceID: "wide"})
	require.NoError(t, err)
	require.Equal(t, store.DeleteResult{InstancesDeleted: 10_001, ExecutionsDeleted: 10_001, EventsDeleted: 20_002}, *res)
	requireWithin(t, *txs, budget)
	require.Greater(t, len(*txs), 10, "a 40,000-row tree in one transaction")
	require.Zero(t, count(t, s, `SELECT count(*) FROM instances`))
	requireInvariants(t, s)
}

func TestDeleteDeepTree(t *testing.T) {
	t.Parallel()
	s, txs := boundedStore(t, 10)
	// A chain of 50: root <- d1 <- d2 ... <- d49.
	exec(t, s, `INSERT INTO instances (tenant_id, instance_id, name, version, current_execution_id, status,
		parent_instance_id, root_instance_id, created_at, updated_at, completed_at, execution_count, event_count)
		SELECT 'acme', 'd' || g::TEXT, 'n', '1', 1, 'Completed', CASE WHEN g = 0 THEN NULL ELSE 'd' || (g - 1)::TEXT END,
			'd0', 1, 1, 1, 1, 0
		FROM generate_series(0, 49) AS g`)
	exec(t, s, `INSERT INTO executions (tenant_id, instance_id, execution_id, status, started_at, completed_at)
		SELECT 'acme', instance_id, 1, 'Completed', 1, 1 FROM instances`)
	fabricated(t, s)
	tree, err := s.GetInstanceTree(t.Context(), &store.GetInstanceTreeParams{TenantID: "acme", InstanceID: "d0"})
	require.NoError(t, err)
	require.Len(t, tree.IDs, 50)
	require.Equal(t, "d49", tree.IDs[0])
	res, err := s.DeleteInstance(t.Context(), &store.DeleteInstanceParams{TenantID: "acme", InstanceID: "d0"})
	require.NoError(t, err)
	require.Equal(t, int64(50), res.InstancesDeleted)
	requireWithin(t, *txs, 10)
	requireInvariants(t, s)
}

// A delete interrupted half-way leaves no orphan and nothing half-deleted
// in sight; calling it again finishes.
func TestDeleteInterruptedThenResumed(t *testing.T) {
	t.Parallel()
	const budget = 500
	s, txs := boundedStore(t, budget)
	fabricateTree(t, s, "big", 300, 4)
	// One child too big for a transaction of its own: it goes in pieces.
	exec(t, s, `INSERT INTO history (tenant_id, instance_id, execution_id, event_id, kind, created_at)
		SELECT 'acme', 'big:7', 1, g, 'e', 1 FROM generate_series(5, 2000) AS g`)
	exec(t, s, `UPDATE instances SET event_count = 2000 WHERE instance_id = 'big:7'`)
	exec(t, s, `UPDATE executions SET event_count = 2000 WHERE instance_id = 'big:7'`)
	requireInvariants(t, s)

	ctx, cancel := context.WithCancel(t.Context())
	s.onPurge = func(rows int64) {
		*txs = append(*txs, rows)
		if len(*txs) == 3 {
			cancel()
		}
	}
	_, err := s.DeleteInstance(ctx, &store.DeleteInstanceParams{TenantID: "acme", InstanceID: "big"})
	require.ErrorIs(t, err, context.Canceled)
	remaining := count(t, s, `SELECT count(*) FROM instances`)
	require.Greater(t, remaining, int64(0))
	require.Less(t, remaining, int64(301))
	requireInvariants(t, s)
	// What is visible is whole: each visible instance has all its history.
	require.Zero(t, count(t, s, `SELECT count(*) FROM instances i WHERE NOT i.deleting AND i.event_count <>
		(SELECT count(*) FROM history h WHERE h.tenant_id = i.tenant_id AND h.instance_id = i.instance_id)`))
	requireInvariants(t, s)

	s.onPurge = func(rows int64) { *txs = append(*txs, rows) }
	_, err = s.DeleteInstance(t.Context(), &store.DeleteInstanceParams{TenantID: "acme", InstanceID: "big"})
	require.NoError(t, err)
	requireWithin(t, *txs, budget)
	for _, table := range []string{"instances", "executions", "history"} {
		require.Zero(t, count(t, s, "SELECT count(*) FROM "+table), table)
	}
	requireInvariants(t, s)
}

func TestPruneLongChainInBoundedTransactions(t *testing.T) {
	t.Parallel()
	const budget = 1500
	s, txs := boundedStore(t, budget)
	const chain = 10_000
	exec(t, s, `INSERT INTO instances (tenant_id, instance_id, name, version, current_execution_id, status,
		root_instance_id, created_at, updated_at, execution_count, event_count)
		VALUES ('acme', 'chain', 'n', '1', $1::INT8, 'Running', 'chain', 1, 1, $1::INT8, $1::INT8 * 2)`, chain)
	exec(t, s, `INSERT INTO executions (tenant_id, instance_id, execution_id, status, started_at, completed_at, event_count)
		SELECT 'acme', 'chain', g, CASE WHEN g = $1::INT8 THEN 'Running' ELSE 'ContinuedAsNew' END, g, CASE WHEN g = $1::INT8 THEN NULL ELSE g END, 2
		FROM generate_series(1, $1::INT8) AS g`, chain)
	exec(t, s, `INSERT INTO history (tenant_id, instance_id, execution_id, event_id, kind, created_at)
		SELECT 'acme', 'chain', e, g, 'e', 1 FROM generate_series(1, $1::INT8) AS e, generate_series(1, 2) AS g`, chain)
	// One execution too big for a transaction.
	exec(t, s, `INSERT INTO history (tenant_id, instance_id, execution_id, event_id, kind, created_at)
		SELECT 'acme', 'chain', 42, g, 'e', 1 FROM generate_series(3, 4000) AS g`)
	exec(t, s, `UPDATE executions SET event_count = 4000 WHERE instance_id = 'chain' AND execution_id = 42`)
	exec(t, s, `UPDATE instances SET event_count = event_count + 3998 WHERE instance_id = 'chain'`)
	exec(t, s, `INSERT INTO instance_prunable (tenant_id, instance_id, status) VALUES ('acme', 'chain', 'Running')`)
	fabricated(t, s)

	res, err := s.PruneExecutions(t.Context(), &store.PruneExecutionsParams{TenantID: "acme", InstanceID: "chain",
		Options: store.PruneOptions{KeepLast: 10}})
	require.NoError(t, err)
	require.Equal(t, int64(chain-10), res.ExecutionsDeleted)
	require.Equal(t, int64((chain-10)*2+3998), res.EventsDeleted)
	requireWithin(t, *txs, budget)
	in, err := s.GetInstance(t.Context(), &store.GetInstanceParams{TenantID: "acme", InstanceID: "chain"})
	require.NoError(t, err)
	require.Equal(t, int64(10), in.ExecutionCount)
	require.Equal(t, int64(20), in.EventCount)
	require.Equal(t, int64(20), count(t, s, `SELECT count(*) FROM history`))
	requireInvariants(t, s)
}

// Deletes racing with turns: whichever commits first wins, the other fails
// cleanly, and nothing of a deleted instance is ever left or recreated.
func TestDeleteRacesWithTurns(t *testing.T) {
	t.Parallel()
	s := New(testdb.Pool(t, 8), Options{})
	ctx := t.Context()
	require.NoError(t, s.CreateTenant(ctx, &store.CreateTenantParams{TenantID: "acme"}))
	for round := range 30 {
		id := "racer"
		_, err := s.StartOrchestration(ctx, &store.StartOrchestrationParams{TenantID: "acme", InstanceID: id, Name: "r", Start: store.Message{Kind: "start"}})
		require.NoError(t, err, "round %d", round)
		item, err := s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: "acme", LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.NotNil(t, item)

		var wg sync.WaitGroup
		var ackErr, delErr error
		wg.Go(func() {
			ackErr = s.AckOrchestrationItem(ctx, &store.AckOrchestrationItemParams{
				Lease: item.Lease, ExecutionID: 1, MessageIDs: []string{item.Messages[0].ID}, Status: store.StatusRunning,
				History:    []store.HistoryEvent{{EventID: 1, Kind: "started"}},
				Activities: []store.ActivityTask{{ActivityID: 2, Name: "a", TaskQueue: "q"}},
				Messages:   []store.OutgoingMessage{{InstanceID: id, Message: store.Message{Kind: "timer"}, Delay: time.Hour}},
				Children:   []store.ChildStart{{InstanceID: id + ":c", Name: "c", Start: store.Message{Kind: "start"}, IfTaken: store.Message{Kind: "x"}}},
			})
		})
		wg.Go(func() {
			_, delErr = s.DeleteInstance(ctx, &store.DeleteInstanceParams{TenantID: "acme", InstanceID: id, Force: true})
		})
		wg.Wait()
		require.NoError(t, delErr)
		if ackErr != nil {
			require.True(t, errors.Is(ackErr, store.ErrLeaseLost), "round %d: %v", round, ackErr)
		}
		if count(t, s, `SELECT count(*) FROM instances WHERE instance_id = $1`, id) > 0 {
			// The ack won and created the child: the root's tree is still whole.
			_, err := s.DeleteInstance(ctx, &store.DeleteInstanceParams{TenantID: "acme", InstanceID: id, Force: true})
			require.NoError(t, err)
		}
		for _, table := range []string{"instances", "executions", "history", "worker_queue", "instance_leases"} {
			require.Zero(t, count(t, s, "SELECT count(*) FROM "+table), "round %d: %s left behind", round, table)
		}
		exec(t, s, `DELETE FROM orchestrator_queue`) // zombie messages, if any, are the fetch's business
		requireInvariants(t, s)
	}
}

func TestPruneBulkInBoundedTransactions(t *testing.T) {
	t.Parallel()
	const budget = 100
	s, txs := boundedStore(t, budget)
	fabricateChains(t, s, 300, 5, 2)
	// One chain whose oldest execution is too big for a transaction.
	exec(t, s, `INSERT INTO history (tenant_id, instance_id, execution_id, event_id, kind, created_at)
		SELECT 'acme', 'c150', 1, g, 'e', 1 FROM generate_series(3, 250) AS g`)
	exec(t, s, `UPDATE executions SET event_count = 250 WHERE instance_id = 'c150' AND execution_id = 1`)
	exec(t, s, `UPDATE instances SET event_count = 258 WHERE instance_id = 'c150'`)

	res, err := s.PruneExecutionsBulk(t.Context(), &store.PruneExecutionsBulkParams{TenantID: "acme",
		Options: store.PruneOptions{KeepLast: 1}})
	require.NoError(t, err)
	require.True(t, res.Complete)
	require.Equal(t, int64(300), res.InstancesProcessed)
	require.Equal(t, int64(1200), res.ExecutionsDeleted)
	require.Equal(t, int64(1200*2+248), res.EventsDeleted)
	requireWithin(t, *txs, budget)
	require.Greater(t, len(*txs), 30, "small instances share transactions, but not all in one")
	require.Less(t, len(*txs), 300, "small instances share transactions")
	requirePrunedToOne(t, s, 300)
}

// fabricateChains writes n running instances (c1 to cn) of execs
// executions each, the last current, with events history events per
// execution, straight into the tables.
func fabricateChains(t *testing.T, s *Store, n, execs, events int) {
	t.Helper()
	exec(t, s, `INSERT INTO instances (tenant_id, instance_id, name, version, current_execution_id, status,
		root_instance_id, created_at, updated_at, execution_count, event_count)
		SELECT 'acme', 'c' || g::TEXT, 'n', '1', $2::INT8, 'Running', 'c' || g::TEXT, 1, 1, $2::INT8, $2::INT8 * $3::INT8
		FROM generate_series(1, $1::INT8) AS g`, n, execs, events)
	exec(t, s, `INSERT INTO executions (tenant_id, instance_id, execution_id, status, started_at, completed_at, event_count)
		SELECT 'acme', i.instance_id, e, CASE WHEN e = $1 THEN 'Running' ELSE 'ContinuedAsNew' END, e,
			CASE WHEN e = $1 THEN NULL ELSE e END, $2
		FROM instances i, generate_series(1, $1::INT8) AS e`, execs, events)
	exec(t, s, `INSERT INTO history (tenant_id, instance_id, execution_id, event_id, kind, created_at)
		SELECT 'acme', e.instance_id, e.execution_id, g, 'e', 1 FROM executions e, generate_series(1, $1::INT8) AS g`, events)
	exec(t, s, `INSERT INTO instance_prunable (tenant_id, instance_id, status) SELECT tenant_id, instance_id, status FROM instances`)
	fabricated(t, s)
}

// requirePrunedToOne checks that each of the n instances has one
// execution left and counters that agree with its rows.
func requirePrunedToOne(t *testing.T, s *Store, n int64) {
	t.Helper()
	requireInvariants(t, s)
	require.Zero(t, count(t, s, `SELECT count(*) FROM instances i WHERE i.execution_count <> 1 OR i.event_count <>
		(SELECT count(*) FROM history h WHERE h.tenant_id = i.tenant_id AND h.instance_id = i.instance_id)`),
		"counters disagree with the rows")
	require.Equal(t, n, count(t, s, `SELECT count(*) FROM executions`))
}

// Bulk prunes plan their transactions from a read made before them. Two of
// them racing over the same instances, with single prunes among them,
// delete each execution once: what one removed the other neither deletes
// nor counts, and no transaction goes over the bound.
func TestPruneBulkRaces(t *testing.T) {
	t.Parallel()
	const budget = 60
	s, txs := boundedStore(t, budget)
	fabricateChains(t, s, 200, 3, 2)

	var wg sync.WaitGroup
	results := make([]store.PruneResult, 3)
	errs := make([]error, 3)
	for i := range 2 {
		wg.Go(func() {
			r, err := s.PruneExecutionsBulk(t.Context(), &store.PruneExecutionsBulkParams{TenantID: "acme",
				Options: store.PruneOptions{KeepLast: 1}})
			if err == nil {
				require.True(t, r.Complete)
				results[i] = store.PruneResult{ExecutionsDeleted: r.ExecutionsDeleted, EventsDeleted: r.EventsDeleted}
			}
			errs[i] = err
		})
	}
	wg.Go(func() {
		for g := 200; g > 0; g -= 7 {
			r, err := s.PruneExecutions(t.Context(), &store.PruneExecutionsParams{TenantID: "acme",
				InstanceID: fmt.Sprintf("c%d", g), Options: store.PruneOptions{KeepLast: 1}})
			if err != nil {
				errs[2] = err
				return
			}
			results[2].ExecutionsDeleted += r.ExecutionsDeleted
			results[2].EventsDeleted += r.EventsDeleted
		}
	})
	wg.Wait()
	var total store.PruneResult
	for i, r := range results {
		require.NoError(t, errs[i])
		total.ExecutionsDeleted += r.ExecutionsDeleted
		total.EventsDeleted += r.EventsDeleted
	}
	require.Equal(t, store.PruneResult{ExecutionsDeleted: 400, EventsDeleted: 800}, total)
	requireWithin(t, *txs, budget)
	requirePrunedToOne(t, s, 200)
}

// instance_prunable follows the turns: a continue-as-new lists the
// instance, a change of status moves it, a bulk prune by status finds it
// there and takes it off once one execution is left.
func TestPrunableFollowsTurns(t *testing.T) {
	t.Parallel()
	s, _ := boundedStore(t, 1000)
	ctx := t.Context()
	require.NoError(t, s.CreateTenant(ctx, &store.CreateTenantParams{TenantID: "acme"}))
	_, err := s.StartOrchestration(ctx, &store.StartOrchestrationParams{TenantID: "acme", InstanceID: "chain", Name: "n", Start: store.Message{Kind: "start"}})
	require.NoError(t, err)
	turn := func(exec int64, status store.Status, next *store.ContinueAsNew) {
		t.Helper()
		item, err := s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: "acme", LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.NotNil(t, item)
		ids := make([]string, len(item.Messages))
		for i, m := range item.Messages {
			ids[i] = m.ID
		}
		var wake []store.OutgoingMessage
		if status == store.StatusRunning {
			wake = []store.OutgoingMessage{{InstanceID: "chain", Message: store.Message{Kind: "next"}}}
		}
		require.NoError(t, s.AckOrchestrationItem(ctx, &store.AckOrchestrationItemParams{
			Lease: item.Lease, ExecutionID: exec, MessageIDs: ids, Status: status, ContinueAsNew: next, Messages: wake,
			History: []store.HistoryEvent{{EventID: int64(len(item.History)) + 1, Kind: "e"}},
		}))
	}
	listed := func() string {
		t.Helper()
		var status string
		err := s.pool.QueryRow(ctx, `SELECT status FROM instance_prunable WHERE tenant_id = 'acme' AND instance_id = 'chain'`).Scan(&status)
		if errors.Is(err, pgx.ErrNoRows) {
			return ""
		}
		require.NoError(t, err)
		return status
	}

	turn(1, store.StatusRunning, nil)
	require.Empty(t, listed(), "one execution: nothing to prune")
	turn(1, store.StatusContinuedAsNew, &store.ContinueAsNew{Start: store.Message{Kind: "start"}})
	require.Equal(t, "Running", listed())
	turn(2, store.StatusCompleted, nil)
	require.Equal(t, "Completed", listed())
	requireInvariants(t, s)

	res, err := s.PruneExecutionsBulk(ctx, &store.PruneExecutionsBulkParams{TenantID: "acme",
		Filter: store.InstanceFilter{Statuses: []store.Status{store.StatusRunning}}, Options: store.PruneOptions{KeepLast: 1}})
	require.NoError(t, err)
	require.Zero(t, res.ExecutionsDeleted, "not running any more")
	res, err = s.PruneExecutionsBulk(ctx, &store.PruneExecutionsBulkParams{TenantID: "acme",
		Filter: store.InstanceFilter{Statuses: []store.Status{store.StatusCompleted}}, Options: store.PruneOptions{KeepLast: 1}})
	require.NoError(t, err)
	require.True(t, res.Complete)
	require.Equal(t, int64(1), res.ExecutionsDeleted)
	require.Empty(t, listed(), "one execution left")
	requireInvariants(t, s)
}
