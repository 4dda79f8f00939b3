package crdb

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
)

func newTestStore(t *testing.T, opts Options) *Store {
	t.Helper()
	s := New(testdb.Pool(t, 8), opts)
	_, err := s.pool.Exec(t.Context(), `CREATE TABLE counters (k TEXT PRIMARY KEY, v INT8 NOT NULL)`)
	require.NoError(t, err)
	_, err = s.pool.Exec(t.Context(), `CREATE TABLE doctors (name TEXT PRIMARY KEY, on_call BOOL NOT NULL)`)
	require.NoError(t, err)
	_, err = s.pool.Exec(t.Context(), `INSERT INTO counters VALUES ('x', 0)`)
	require.NoError(t, err)
	return s
}

// otherTx runs a whole conflicting transaction on its own connection.
func otherTx(t *testing.T, s *Store, stmts ...string) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	require.NoError(t, err)
	for _, stmt := range stmts {
		_, err := tx.Exec(ctx, stmt)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))
}

type retryLog struct {
	attempts []int
	errs     []error
}

func (l *retryLog) hook(attempt int, err error) {
	l.attempts = append(l.attempts, attempt)
	l.errs = append(l.errs, err)
}

func is40001(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40001"
}

// A statement that conflicts with a transaction committed after ours began
// fails with 40001; the helper runs the whole transaction again.
func TestInTxRetriesStatementConflict(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	s := newTestStore(t, Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	var log retryLog
	s.onRetry = log.hook
	calls := 0
	err := s.inTx(t.Context(), func(tx pgx.Tx) error {
		calls++
		var v int64
		if err := tx.QueryRow(t.Context(), `SELECT v FROM counters WHERE k = 'x'`).Scan(&v); err != nil {
			return err
		}
		if calls == 1 {
			otherTx(t, s, `UPDATE counters SET v = v + 100 WHERE k = 'x'`)
		}
		_, err := tx.Exec(t.Context(), `UPDATE counters SET v = $1 WHERE k = 'x'`, v+1)
		return err
	})
	require.NoError(t, err)
	require.Equal(t, 2, calls)
	require.Equal(t, []int{1}, log.attempts)
	require.True(t, is40001(log.errs[0]), "retried for %v", log.errs[0])
	require.Equal(t, map[string]int64{"conflict": 1}, failedAttempts(t, reader))

	var v int64
	require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT v FROM counters WHERE k = 'x'`).Scan(&v))
	require.Equal(t, int64(101), v, "the write must be applied exactly once, on top of the other transaction's")
}

// failedAttempts reads orchard.store.transaction.failed_attempts by reason.
func failedAttempts(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	for _, data := range collectMetric(t, reader, "orchard.store.transaction.failed_attempts") {
		for _, dp := range data.(metricdata.Sum[int64]).DataPoints {
			reason, _ := dp.Attributes.Value("reason")
			got[reason.AsString()] += dp.Value
		}
	}
	return got
}

// collectMetric reads the data recorded under the metric named name.
func collectMetric(t *testing.T, reader *sdkmetric.ManualReader, name string) []metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	var out []metricdata.Aggregation
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				out = append(out, m.Data)
			}
		}
	}
	return out
}

// Write skew: both transactions read the on-call roster and each takes a
// doctor off call. The other commits first; ours learns of the conflict only
// at COMMIT, and the helper must notice that error and run again.
func TestInTxRetriesConflictAtCommit(t *testing.T) {
	t.Parallel()
	s := newTestStore(t, Options{})
	_, err := s.pool.Exec(t.Context(), `INSERT INTO doctors VALUES ('alice', true), ('bob', true)`)
	require.NoError(t, err)
	var log retryLog
	s.onRetry = log.hook
	calls := 0
	err = s.inTx(t.Context(), func(tx pgx.Tx) error {
		calls++
		var onCall int
		if err := tx.QueryRow(t.Context(), `SELECT count(*) FROM doctors WHERE on_call`).Scan(&onCall); err != nil {
			return err
		}
		if onCall < 2 {
			return nil // someone must stay on call: nothing to do
		}
		if _, err := tx.Exec(t.Context(), `UPDATE doctors SET on_call = false WHERE name = 'alice'`); err != nil {
			return err
		}
		if calls == 1 {
			otherTx(t, s,
				`SELECT count(*) FROM doctors WHERE on_call`,
				`UPDATE doctors SET on_call = false WHERE name = 'bob'`)
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 2, calls)
	require.Len(t, log.errs, 1)
	var ce *commitError
	require.True(t, errors.As(log.errs[0], &ce), "the conflict was not raised at COMMIT: %v", log.errs[0])
	require.True(t, is40001(log.errs[0]))

	// The retry saw bob off call and did nothing: one doctor stays on call.
	var onCall []string
	rows, err := s.pool.Query(t.Context(), `SELECT name FROM doctors WHERE on_call ORDER BY name`)
	require.NoError(t, err)
	onCall, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"alice"}, onCall)
}

func TestInTxGivesUpWhenBudgetIsSpent(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	s := newTestStore(t, Options{MaxAttempts: 3, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	var log retryLog
	s.onRetry = log.hook
	calls := 0
	err := s.inTx(t.Context(), func(tx pgx.Tx) error {
		calls++
		var v int64
		if err := tx.QueryRow(t.Context(), `SELECT v FROM counters WHERE k = 'x'`).Scan(&v); err != nil {
			return err
		}
		otherTx(t, s, `UPDATE counters SET v = v + 100 WHERE k = 'x'`)
		_, err := tx.Exec(t.Context(), `UPDATE counters SET v = $1 WHERE k = 'x'`, v+1)
		return err
	})
	require.ErrorIs(t, err, store.ErrConflict)
	require.True(t, is40001(err), "the last database error is kept: %v", err)
	require.Equal(t, 3, calls)
	require.Equal(t, []int{1, 2, 3}, log.attempts)
	require.Equal(t, map[string]int64{"conflict": 3}, failedAttempts(t, reader), "every failed attempt counts, the last too")

	var v int64
	require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT v FROM counters WHERE k = 'x'`).Scan(&v))
	require.Equal(t, int64(300), v, "none of our attempts may have written")
}

func TestInTxDoesNotRetryOtherErrors(t *testing.T) {
	t.Parallel()
	s := newTestStore(t, Options{})
	calls := 0
	err := s.inTx(t.Context(), func(tx pgx.Tx) error {
		calls++
		_, err := tx.Exec(t.Context(), `INSERT INTO counters VALUES ('x', 1)`)
		return err
	})
	require.Error(t, err)
	require.NotErrorIs(t, err, store.ErrConflict)
	require.Equal(t, 1, calls)

	sentinel := errors.New("lease lost in the closure")
	err = s.inTx(t.Context(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), `UPDATE counters SET v = 7 WHERE k = 'x'`); err != nil {
			return err
		}
		return sentinel
	})
	require.ErrorIs(t, err, sentinel)
	var v int64
	require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT v FROM counters WHERE k = 'x'`).Scan(&v))
	require.Zero(t, v, "a closure's error must roll its writes back")
}

// A batch transaction is all or nothing: a statement that fails leaves
// none of the batch's writes; a batch that succeeds commits them all.
func TestInBatchTxIsAllOrNothing(t *testing.T) {
	t.Parallel()
	s := newTestStore(t, Options{})
	err := s.inBatchTx(t.Context(), pgx.ReadCommitted, func(b *pgx.Batch) {
		b.Queue(`UPDATE counters SET v = 7 WHERE k = 'x'`)
		b.Queue(`INSERT INTO counters VALUES ('x', 1)`)
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		_, err := br.Exec()
		return err
	})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23505", pgErr.Code, "the duplicate key")
	var ce *commitError
	require.False(t, errors.As(err, &ce), "a statement failed, not the COMMIT")

	var v int64
	err = s.inBatchTx(t.Context(), pgx.ReadCommitted, func(b *pgx.Batch) {
		b.Queue(`SELECT v FROM counters WHERE k = 'x'`)
		b.Queue(`UPDATE counters SET v = v + 1 WHERE k = 'x'`)
	}, func(br pgx.BatchResults) error {
		if err := br.QueryRow().Scan(&v); err != nil {
			return err
		}
		_, err := br.Exec()
		return err
	})
	require.NoError(t, err)
	require.Zero(t, v, "the failed batch's update was rolled back")
	require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT v FROM counters WHERE k = 'x'`).Scan(&v))
	require.Equal(t, int64(1), v, "the second batch committed")
}

// A database that cannot be reached is store.ErrUnavailable, for the API to
// answer Unavailable without knowing the driver; a cancelled call is not.
func TestUnreachableIsUnavailable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())
	pool, err := pgxpool.New(t.Context(), "postgres://postgres@"+dead+"/orchard?connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	reader := sdkmetric.NewManualReader()
	s := New(pool, Options{MaxAttempts: 2, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	_, err = s.GetInstance(t.Context(), &store.GetInstanceParams{TenantID: "t", InstanceID: "i"})
	require.ErrorIs(t, err, store.ErrUnavailable)
	// A database that cannot be reached fails the call at once: no
	// attempt was retried, so none is counted.
	require.Empty(t, failedAttempts(t, reader))

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = s.GetInstance(ctx, &store.GetInstanceParams{TenantID: "t", InstanceID: "i"})
	require.Error(t, err)
	require.NotErrorIs(t, err, store.ErrUnavailable)
}
