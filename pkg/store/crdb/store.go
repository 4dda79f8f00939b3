// Package crdb implements Orchard's store contract (pkg/store) on CockroachDB
// with pgx v5. The same SQL runs on PostgreSQL, which the tests use: only the
// common subset of both dialects is written here (DESIGN §3); the
// CockroachDB-only tuning lives in schema/crdb_only.
//
// Every write that spans statements goes through inTx, the one retried
// SERIALIZABLE transaction helper; single statements go through the same
// retry loop. Leases are compare-and-set columns, never row locks. Every
// query binds its tenant. Times come from the injected clock.
//
// This package must never decide what a message means: kinds and payloads
// are opaque to it.
package crdb

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orchardhq/orchard/internal/traceparent"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/orchardhq/orchard/pkg/store"
)

// Options configures a Store. The zero value is usable.
type Options struct {
	// Clock supplies every time the store writes; the wall clock by default.
	Clock store.Clock
	// Logger receives warnings (zombie messages); slog.Default() by default.
	Logger *slog.Logger
	// MaxAttempts bounds the attempts of a transaction (default 10).
	MaxAttempts int
	// RetryBackoff is the first backoff between attempts (default 2ms); it
	// doubles per attempt up to MaxRetryBackoff (default 250ms).
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// MaxMessagesPerTurn bounds the messages one fetch hands a turn (default 1000).
	MaxMessagesPerTurn int
	// MaxRowsPerTransaction bounds the rows one delete or prune transaction
	// removes (default 5000); bigger trees and chains take several.
	MaxRowsPerTransaction int64
	// MeterProvider receives the store's instruments; none by default.
	MeterProvider metric.MeterProvider
}

// Store is the CockroachDB (and PostgreSQL) implementation of store.Store.
type Store struct {
	pool *pgxpool.Pool
	opts Options
	log  *slog.Logger

	// Round-robin position of the all-tenant fetches, per process.
	mu               sync.Mutex
	orchestratorTurn string
	workerTurn       map[string]string // task queue -> last tenant served

	// starts and completions batch the writes that find no idle loop,
	// acks the turns of the dispatchers' loops (groupcommit.go).
	starts      *groupCommit[startKey, *batchedStart]
	completions *groupCommit[string, *batchedCompletion]
	acks        *groupCommit[string, *batchedAck]

	// failedAttempts counts the transaction attempts that failed with an
	// error that retry retries, by reason (see attemptFailure).
	failedAttempts metric.Int64Counter
	// batchWrites records how many writes each batched statement carries
	// (groupcommit.go), by kind.
	batchWrites metric.Int64Histogram

	// onRetry, when set (by tests), sees every retried attempt.
	onRetry func(attempt int, err error)
	// onStartBatch, when set (by tests), sees each batch of starts before
	// its statement is sent.
	onStartBatch func(starts []*store.StartOrchestrationParams)
	// onCompletionBatch, when set (by tests), sees each batch of task
	// completions before its statement is sent.
	onCompletionBatch func(completions []*store.AckWorkItemParams)
	// onAckBatch, when set (by tests), sees the turns of each batch of acks
	// before they are sent.
	onAckBatch func(turns []*store.AckOrchestrationItemParams)
	// onPurge, when set (by tests), sees the rows each committed delete or
	// prune transaction removed.
	onPurge func(rows int64)
}

var _ store.Store = (*Store)(nil)

// New returns a Store over pool. The schema must be migrated (schema.Migrate).
func New(pool *pgxpool.Pool, opts Options) *Store {
	if opts.Clock == nil {
		opts.Clock = store.SystemClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 10
	}
	if opts.RetryBackoff <= 0 {
		opts.RetryBackoff = 2 * time.Millisecond
	}
	if opts.MaxRetryBackoff <= 0 {
		opts.MaxRetryBackoff = 250 * time.Millisecond
	}
	if opts.MaxMessagesPerTurn <= 0 {
		opts.MaxMessagesPerTurn = 1000
	}
	if opts.MaxRowsPerTransaction <= 0 {
		opts.MaxRowsPerTransaction = 5000
	}
	if opts.MeterProvider == nil {
		opts.MeterProvider = noop.NewMeterProvider()
	}
	failed, err := opts.MeterProvider.Meter("github.com/orchardhq/orchard/pkg/store/crdb").Int64Counter(
		"orchard.store.transaction.failed_attempts",
		metric.WithDescription("Attempts of a store transaction that failed with an error the store retries, by reason: "+
			"conflict (a serialization failure), deadlock, or connection (a connection that failed before the statement was sent)."))
	if err != nil {
		// Only a malformed instrument name fails.
		panic(err)
	}
	batchWrites, err := opts.MeterProvider.Meter("github.com/orchardhq/orchard/pkg/store/crdb").Int64Histogram(
		"orchard.store.batch.writes",
		metric.WithDescription("Writes one batched statement carried (group commit of the writes no idle loop waits for), by kind: start, completion or ack (turns)."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64))
	if err != nil {
		panic(err)
	}
	s := &Store{pool: pool, opts: opts, log: opts.Logger, workerTurn: map[string]string{}, failedAttempts: failed,
		batchWrites: batchWrites}
	s.starts, s.completions, s.acks = newStartBatches(s), newCompletionBatches(s), newAckBatches(s)
	return s
}

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }

func (s *Store) now() int64 { return s.opts.Clock.Now().UnixMilli() }

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func fromNullMillis(ms *int64) time.Time {
	if ms == nil {
		return time.Time{}
	}
	return fromMillis(*ms)
}

// validToken reports whether a lease's token (and task id) can be ours at
// all; one that cannot is simply not held.
func validToken(tokens ...string) bool {
	for _, t := range tokens {
		if uuid.Validate(t) != nil {
			return false
		}
	}
	return true
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", store.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// checkTraceContext bounds the trace context stored on a queue row; what
// it says is read only when the row is consumed, and text that names no
// span is then ignored.
func checkTraceContext(tp string) error {
	if len(tp) > traceparent.MaxLen {
		return invalid("trace context of %d bytes, more than %d", len(tp), traceparent.MaxLen)
	}
	return nil
}
