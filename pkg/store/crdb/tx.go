package crdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/orchardhq/orchard/pkg/store"
)

// inTx runs fn in a SERIALIZABLE transaction and commits it. On a
// serialization failure or deadlock (40001, 40P01), raised by a statement or
// by the COMMIT itself, the whole transaction is rolled back and run again
// from a fresh BEGIN, within the retry budget.
//
// fn must be retry-safe: no effects outside the transaction, no state carried
// from one attempt to the next; callers publish results only after inTx
// returns nil. cockroach-go's ExecuteTx is deliberately not used: it ignores
// the error of the final COMMIT, which on PostgreSQL loses a serialization
// failure raised at COMMIT.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return s.retry(ctx, func(ctx context.Context) error {
		tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return &commitError{err: err}
		}
		return nil
	})
}

// inBatchTx runs a transaction whose statements all travel to the server in
// one round trip: the batch begins the transaction (pgx's Batch.BeginTx,
// at isolation iso), carries the statements build queues, and ends with
// COMMIT. read consumes the results of the queued statements, in order. A
// failing statement aborts the transaction (the server skips the rest of
// the batch, COMMIT included; the transaction is rolled back) and a failure
// at COMMIT is reported as such; serialization failures and deadlocks run
// the whole transaction again, like inTx. COMMIT is queued rather than sent
// by Tx.Commit, which would cost a round trip of its own.
//
// Because COMMIT is already on its way, the statements must be written so
// that committing them is always right: a statement whose precondition may
// not hold (a lease) carries that precondition in its WHERE clause, and read
// reports what happened. build and read run once per attempt and must not
// carry state between attempts.
func (s *Store) inBatchTx(ctx context.Context, iso pgx.TxIsoLevel, build func(b *pgx.Batch), read func(br pgx.BatchResults) error) error {
	return s.retry(ctx, func(ctx context.Context) error {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		b := &pgx.Batch{}
		b.BeginTx(pgx.TxOptions{IsoLevel: iso})
		build(b)
		b.Queue("COMMIT")
		br := conn.SendBatch(ctx, b)
		err = func() error {
			if _, err := br.Exec(); err != nil {
				return err
			}
			if err := read(br); err != nil {
				return err
			}
			if _, err := br.Exec(); err != nil {
				return &commitError{err: err}
			}
			return nil
		}()
		if closeErr := br.Close(); err == nil && closeErr != nil {
			err = closeErr
		}
		if err != nil {
			// Open (aborted) when a statement failed; already closed
			// (ErrTxClosed) when the batch ended it, committed or not.
			_ = br.Tx().Rollback(context.WithoutCancel(ctx))
		}
		return err
	})
}

// retry runs op until it succeeds, fails for a reason that retrying cannot
// fix, or the budget is spent. It is the one retry loop of the package: inTx
// uses it, and so do single statements, which PostgreSQL (with
// default_transaction_isolation = serializable) and CockroachDB run as
// implicit serializable transactions that can fail the same way.
func (s *Store) retry(ctx context.Context, op func(ctx context.Context) error) error {
	attempt := 0
	var last error
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		attempt++
		last = op(ctx)
		if last != nil && !retryable(last) {
			return struct{}{}, backoff.Permanent(last)
		}
		if last != nil {
			s.countFailed(ctx, last)
			if s.onRetry != nil {
				s.onRetry(attempt, last)
			}
		}
		return struct{}{}, last
	},
		backoff.WithBackOff(&backoff.ExponentialBackOff{
			InitialInterval: s.opts.RetryBackoff,
			// Wide jitter: conflicting transactions should not wake together.
			RandomizationFactor: 1,
			Multiplier:          2,
			MaxInterval:         s.opts.MaxRetryBackoff,
		}),
		backoff.WithMaxTries(uint(s.opts.MaxAttempts)),
		backoff.WithMaxElapsedTime(0),
	)
	switch {
	case err == nil:
		return nil
	case ctx.Err() == nil && unavailable(last):
		return fmt.Errorf("%w: after %d attempts: %w", store.ErrUnavailable, attempt, unwrapCommit(last))
	case !retryable(last):
		return unwrapCommit(last)
	case ctx.Err() != nil:
		return fmt.Errorf("%w (while retrying: %w)", ctx.Err(), unwrapCommit(last))
	default:
		return fmt.Errorf("%w: gave up after %d attempts: %w", store.ErrConflict, attempt, unwrapCommit(last))
	}
}

// countFailed counts an attempt that failed with an error retry retries
// (orchard.store.transaction.failed_attempts).
func (s *Store) countFailed(ctx context.Context, err error) {
	if err != nil && retryable(err) {
		s.failedAttempts.Add(ctx, 1, attemptFailure(err))
	}
}

// commitError marks an error returned by COMMIT, so that tests can tell a
// failure at COMMIT from one raised by a statement.
type commitError struct{ err error }

func (e *commitError) Error() string { return "commit: " + e.err.Error() }
func (e *commitError) Unwrap() error { return e.err }

func unwrapCommit(err error) error {
	var ce *commitError
	if errors.As(err, &ce) {
		return ce.err
	}
	return err
}

// The reasons of orchard.store.transaction.failed_attempts.
var (
	failedConflict   = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", "conflict")))
	failedDeadlock   = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", "deadlock")))
	failedConnection = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", "connection")))
)

// attemptFailure is the reason of a retryable error.
func attemptFailure(err error) metric.AddOption {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001":
			return failedConflict
		case "40P01":
			return failedDeadlock
		}
	}
	return failedConnection
}

// retryable classifies database errors once: serialization failures and
// deadlocks restart the transaction; so does a connection error raised before
// anything was sent.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "40001" || pgErr.Code == "40P01"
	}
	return pgconn.SafeToRetry(err)
}

// unavailable classifies the errors of a database that cannot be reached,
// or that went away or refused work (store.ErrUnavailable): failures to
// connect or of the network, connection exceptions (SQLSTATE class 08),
// an administrator's or a crash's shutdown (57P01-57P03), too many
// connections or too few resources (class 53), a statement whose outcome
// is unknown (CockroachDB's 40003), and a connection that broke mid-call
// (reset, refused, or closed by the server: pgx then says only that the
// connection is closed). A cancelled or expired context is not one.
func unavailable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "40003":
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "53")
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connErr), errors.As(err, &netErr):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE):
		return true
	}
	return strings.Contains(err.Error(), "conn closed")
}
