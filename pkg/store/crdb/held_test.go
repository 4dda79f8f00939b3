package crdb

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
)

// deadlockedTurn is a held turn whose ack deadlocks with another
// transaction: before it returns the ack, the other transaction inserts
// the history event the ack will insert; once the ack waits for it, the
// other inserts the instance the held write inserted, and waits in turn.
type deadlockedTurn struct {
	t      *testing.T
	s      *Store
	other  chan error // the other transaction's end
	dones  int
	acked  bool
	tenant string
	// cockroach: the database is CockroachDB.
	cockroach bool
}

func (d *deadlockedTurn) Turn(ctx context.Context, it *store.OrchestrationItem) *store.AckOrchestrationItemParams {
	octx := context.WithoutCancel(ctx)
	tx, err := d.s.pool.BeginTx(octx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	require.NoError(d.t, err)
	// The held transaction must be the one broken. On PostgreSQL the
	// backend that looks for a deadlock (after deadlock_timeout of waiting)
	// is the one that fails, and on a loaded machine the other could look
	// first; CockroachDB aborts the transaction of lower priority (not run
	// here: no CockroachDB on this machine).
	setup := "SET LOCAL deadlock_timeout = '1min'"
	if d.cockroach {
		setup = "SET TRANSACTION PRIORITY HIGH"
	}
	_, err = tx.Exec(octx, setup)
	require.NoError(d.t, err)
	_, err = tx.Exec(octx, `INSERT INTO history (tenant_id, instance_id, execution_id, event_id, kind, created_at)
		VALUES ($1, $2, 1, 1, 'other', 0)`, d.tenant, it.Lease.InstanceID)
	require.NoError(d.t, err)
	go func() {
		// Deferred: a failed wait (which ends this goroutine) still ends
		// the other transaction, and with it the held one's wait.
		err := errors.New("the other transaction did not get to wait")
		defer func() {
			_ = tx.Rollback(octx)
			d.other <- err
		}()
		// The ack's statement that writes the history (pg_stat_activity
		// keeps the first kilobyte of a statement's text).
		waitForLockWait(d.t, d.s, "The last statement but AckDropEnded", "history")
		_, err = tx.Exec(octx, `INSERT INTO instances (tenant_id, instance_id, name, version, current_execution_id,
			status, root_instance_id, created_at, updated_at) VALUES ($1, $2, 'other', '1', 1, 'Running', $2, 0, 0)`,
			d.tenant, it.Lease.InstanceID)
	}()
	// It cancels an activity, so that the start cannot write it in its own
	// statement (folds): the held write acks it.
	ack := &store.AckOrchestrationItemParams{Lease: it.Lease, ExecutionID: 1, Status: store.StatusRunning, CancelActivities: []int64{1}}
	for _, m := range it.Messages {
		ack.MessageIDs = append(ack.MessageIDs, m.ID)
	}
	ack.History = []store.HistoryEvent{{EventID: 1, Kind: "received_start"}}
	return ack
}

func (*deadlockedTurn) Ahead(string, string, int64) *store.OrchestrationItem { return nil }

func (d *deadlockedTurn) Done(_ context.Context, acked bool, _ error) {
	d.dones++
	d.acked = acked
}

// A held attempt that fails with an error the store retries counts in
// orchard.store.transaction.failed_attempts, as an attempt of any other
// transaction does, before its write is made again without the turn.
// PostgreSQL fails the held transaction as a deadlock, CockroachDB as a
// conflict.
func TestFailedHeldAttemptCounts(t *testing.T) {
	t.Parallel()
	cockroach := testdb.SharedServer(t).Cockroach
	reader := sdkmetric.NewManualReader()
	s := New(testdb.Pool(t, 8), Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	ctx := t.Context()
	const tenant = "held-metric"
	require.NoError(t, s.CreateTenant(ctx, &store.CreateTenantParams{TenantID: tenant}))

	d := &deadlockedTurn{t: t, s: s, other: make(chan error, 1), tenant: tenant, cockroach: cockroach}
	e := &store.EagerLease{Token: uuid.NewString(), Duration: time.Minute, Hold: d}
	_, err := s.StartOrchestration(ctx, &store.StartOrchestrationParams{TenantID: tenant, InstanceID: "i", Name: "n",
		Start: store.Message{Kind: "start"}, Eager: e})
	require.NoError(t, err, "the start made again without the turn")
	// The other transaction went on once the held one was broken: its
	// insert took the instance's id, or found it taken by the start made
	// again.
	if err := <-d.other; err != nil {
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr) && pgErr.Code == "23505", "the other transaction: %v", err)
	}
	require.Equal(t, 1, d.dones)
	require.False(t, d.acked)
	require.False(t, e.Held)
	reason := "deadlock"
	if cockroach {
		reason = "conflict"
	}
	require.Equal(t, map[string]int64{reason: 1}, failedAttempts(t, reader))
	in, err := s.GetInstance(ctx, &store.GetInstanceParams{TenantID: tenant, InstanceID: "i"})
	require.NoError(t, err)
	require.Equal(t, "n", in.Name, "the start's instance, not the other transaction's")
}
