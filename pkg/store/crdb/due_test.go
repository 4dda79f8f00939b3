package crdb

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/store"
)

// waitForLockWait waits until a statement of the store waits for a row
// lock that the test holds, so that a test can stage an interleaving: the
// statement contains fragment (within its first 1024 bytes, which is all
// pg_stat_activity shows of it) and the row is in table. PostgreSQL shows
// the waiting statement in pg_stat_activity; CockroachDB shows the waiting
// request in crdb_internal.cluster_locks (not run here: no CockroachDB on
// this machine).
func waitForLockWait(t *testing.T, s *Store, fragment, table string) {
	t.Helper()
	query, arg := `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND strpos(query, $1) > 0`, fragment
	if testdb.SharedServer(t).Cockroach {
		query, arg = `SELECT count(DISTINCT txn_id) FROM crdb_internal.cluster_locks
			WHERE database_name = current_database() AND table_name = $1 AND NOT granted`, table
	}
	testwait.Until(t, 10*time.Second, "a statement with "+fragment+" to wait for a lock on "+table, func() bool {
		var n int
		require.NoError(t, s.pool.QueryRow(t.Context(), query, arg).Scan(&n))
		return n == 1
	})
}

// A message enqueued while a release is under way, which the release's
// read cannot see, still makes the instance due: on PostgreSQL the release
// waits for the enqueue's lock on the lease row, reads the row anew (READ
// COMMITTED) and keeps the lower due_at it finds there; CockroachDB runs
// the statement again.
func TestReleaseKeepsMessageEnqueuedDuringIt(t *testing.T) {
	t.Parallel()
	s := New(testdb.Pool(t, 8), Options{})
	ctx := t.Context()
	_, err := s.StartOrchestration(ctx, &store.StartOrchestrationParams{
		TenantID: "t", InstanceID: "x", Name: "n", Start: store.Message{Kind: "start"}})
	require.NoError(t, err)
	item, err := s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: "t", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.NotNil(t, item)

	// An enqueue that has written its message and the lease row, and not
	// yet committed.
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	now := s.now()
	var status, late string
	require.NoError(t, tx.QueryRow(ctx, sqlEnqueue, namedArgs{"tenant_id": "t", "instance_id": "x",
		"execution_id": 1, "kind": "late", "payload": []byte(nil), "visible_at": now, "now": now, "trace_context": ""}).Scan(&status, &late))

	// The ack reads the queue (without the message) and waits for the row.
	acked := make(chan error, 1)
	go func() {
		acked <- s.AckOrchestrationItem(context.WithoutCancel(ctx), &store.AckOrchestrationItemParams{
			Lease: item.Lease, ExecutionID: 1, MessageIDs: []string{item.Messages[0].ID}, Status: store.StatusRunning})
	}()
	waitForLockWait(t, s, "The last statement but AckDropEnded", "instance_leases")
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-acked)

	requireInvariants(t, s)
	next, err := s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: "t", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.NotNil(t, next, "the message enqueued during the ack was not fetched")
	require.Len(t, next.Messages, 1)
	require.Equal(t, late, next.Messages[0].ID)
}

// A turn that messages another instance holds that instance's lease row
// from its first statement to its commit. Were it to look and pass on
// (the instance already due), a claim could take the instance in between,
// consume its other messages and release it without the message still
// uncommitted: due never, the message stranded.
func TestWakeHoldsTargetUntilCommit(t *testing.T) {
	t.Parallel()
	s := New(testdb.Pool(t, 8), Options{})
	ctx := t.Context()
	for _, id := range []string{"sender", "target"} {
		_, err := s.StartOrchestration(ctx, &store.StartOrchestrationParams{
			TenantID: "t", InstanceID: id, Name: "n", Start: store.Message{Kind: "start"}})
		require.NoError(t, err)
	}
	fetch := func() *store.OrchestrationItem {
		item, err := s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: "t", LeaseDuration: time.Minute})
		require.NoError(t, err)
		return item
	}
	sender := fetch()
	require.Equal(t, "sender", sender.Lease.InstanceID)

	// Hold the sender's instance row, so that its ack stops at its pin,
	// after the wake of the target.
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM instances WHERE tenant_id = 't' AND instance_id = 'sender' FOR UPDATE`)
	require.NoError(t, err)
	acked := make(chan error, 1)
	go func() {
		acked <- s.AckOrchestrationItem(context.WithoutCancel(ctx), &store.AckOrchestrationItemParams{
			Lease: sender.Lease, ExecutionID: 1, MessageIDs: []string{sender.Messages[0].ID}, Status: store.StatusRunning,
			Messages: []store.OutgoingMessage{{InstanceID: "target", Message: store.Message{Kind: "hello"}}}})
	}()
	waitForLockWait(t, s, "pinned_lease AS (", "instances")

	// Meanwhile the target is not to be had: a claim that took it now
	// would not see the message.
	require.Nil(t, fetch())
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-acked)

	requireInvariants(t, s)
	target := fetch()
	require.NotNil(t, target)
	require.Equal(t, "target", target.Lease.InstanceID)
	var kinds []string
	for _, m := range target.Messages {
		kinds = append(kinds, m.Kind)
	}
	require.Equal(t, []string{"start", "hello"}, kinds)
}

// Dispatchers pass messages among instances (to themselves, to instances of
// their own batch, to instances another dispatcher holds, some with a
// delay) while clients enqueue from outside. Every message is consumed
// exactly once, no instance is left due later than its messages at any
// quiet moment, and acks that message each other's instances do not
// deadlock.
func TestDueUnderConcurrentSends(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := New(testdb.Pool(t, 16), Options{})
	var deadlocks atomic.Int64
	s.onRetry = func(_ int, err error) {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "40P01" {
			deadlocks.Add(1)
		}
	}
	const instances, dispatchers, clients, hops = 24, 6, 2, 6
	for i := range instances {
		_, err := s.StartOrchestration(ctx, &store.StartOrchestrationParams{
			TenantID: "t", InstanceID: fmt.Sprintf("i%02d", i), Name: "n", Start: store.Message{Kind: "start", Payload: []byte("0")}})
		require.NoError(t, err)
	}
	// A message with payload n > 0 makes its turn send one with n-1.
	var sent, consumed atomic.Int64
	sent.Add(instances)
	seen := sync.Map{}
	var clientsDone atomic.Bool
	var running sync.WaitGroup
	g, gctx := errgroup.WithContext(ctx)
	running.Add(clients)
	go func() {
		running.Wait()
		clientsDone.Store(true)
	}()
	for range clients {
		g.Go(func() error {
			defer running.Done()
			for range 40 {
				_, err := s.Enqueue(gctx, &store.EnqueueParams{TenantID: "t", InstanceID: fmt.Sprintf("i%02d", rand.IntN(instances)),
					Message: store.Message{Kind: "event", Payload: []byte(strconv.Itoa(hops))}})
				if err != nil {
					return err
				}
				sent.Add(1)
			}
			return nil
		})
	}
	for range dispatchers {
		g.Go(func() error {
			for {
				items, err := s.FetchOrchestrationItems(gctx, &store.FetchOrchestrationItemsParams{
					FetchOrchestrationItemParams: store.FetchOrchestrationItemParams{TenantID: "t", LeaseDuration: time.Minute},
					Max:                          4})
				if err != nil {
					return err
				}
				if len(items) == 0 {
					if clientsDone.Load() && consumed.Load() == sent.Load() {
						return nil
					}
					testwait.Tick()
					continue
				}
				turns := make([]*store.AckOrchestrationItemParams, len(items))
				var out int64
				for i, item := range items {
					turn := &store.AckOrchestrationItemParams{Lease: item.Lease, ExecutionID: 1, Status: store.StatusRunning}
					for _, m := range item.Messages {
						turn.MessageIDs = append(turn.MessageIDs, m.ID)
						if _, dup := seen.LoadOrStore(m.ID, true); dup {
							return fmt.Errorf("message %s delivered twice", m.ID)
						}
						n, _ := strconv.Atoi(string(m.Payload))
						if n == 0 {
							continue
						}
						target := item.Lease.InstanceID
						switch rand.IntN(3) {
						case 1:
							target = items[rand.IntN(len(items))].Lease.InstanceID
						case 2:
							target = fmt.Sprintf("i%02d", rand.IntN(instances))
						}
						turn.Messages = append(turn.Messages, store.OutgoingMessage{InstanceID: target,
							Delay:   time.Duration(rand.IntN(2)*rand.IntN(20)) * time.Millisecond,
							Message: store.Message{Kind: "hop", Payload: []byte(strconv.Itoa(n - 1))}})
						out++
					}
					turns[i] = turn
				}
				errs, err := s.AckOrchestrationItems(gctx, &store.AckOrchestrationItemsParams{Turns: turns})
				if err != nil {
					return err
				}
				if err := errors.Join(errs...); err != nil {
					return err
				}
				sent.Add(out)
				for _, turn := range turns {
					consumed.Add(int64(len(turn.MessageIDs)))
				}
			}
		})
	}
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		requireInvariants(t, s)
		t.Fatalf("messages left: %d sent, %d consumed", sent.Load(), consumed.Load())
	}
	require.Equal(t, int64(instances+clients*40*(hops+1)), sent.Load())
	require.Equal(t, sent.Load(), consumed.Load())
	require.Zero(t, count(t, s, `SELECT count(*) FROM orchestrator_queue`))
	requireInvariants(t, s)
	require.Zero(t, deadlocks.Load(), "transactions retried after a deadlock")
}
