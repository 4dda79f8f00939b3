package crdb

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// groupCommit sends writes that one statement can carry many of (starts,
// task completions, turns' acks) in batches, one transaction and one commit
// per batch, by key (a tenant): group commit, with no wait of its own. A
// write that finds its key idle is sent at once, with whatever joined it
// meanwhile; one that comes while its key's statement runs waits for that
// statement and goes in the next, with every write that came in between. So a write alone costs
// what it would unbatched, and under load (an ack ends or schedules several
// orchestrations' work at once, and their clients and workers answer
// together) a statement carries several.
type groupCommit[K comparable, T any] struct {
	// ids names what a write writes: a batch holds writes of distinct ids
	// (a write that names an id taken goes in the next batch), so that one
	// statement never writes a row twice and each write's outcome is its
	// own.
	ids func(T) []string
	// send writes a batch and sets each write's outcome in it; an error
	// is every write's.
	send func(ctx context.Context, key K, batch []T) error

	mu     sync.Mutex
	groups map[K]*commitGroup[T]
}

type commitGroup[T any] struct {
	pending []*commitCall[T]
	busy    bool // a batch of the group is being sent
}

type commitCall[T any] struct {
	ctx   context.Context
	write T
	err   error
	done  chan struct{}
}

// maxCommitBatch bounds the writes of one statement.
const maxCommitBatch = 64

// commitBatchTimeout bounds a batch, which runs apart from the contexts of
// the calls it serves: one caller that goes away must not fail the others'
// writes.
const commitBatchTimeout = 30 * time.Second

// do sends w in its key's next batch and returns the batch's error. A call
// whose ctx ends while it waits returns at once, and its write is not sent
// if its batch has not gone yet.
func (c *groupCommit[K, T]) do(ctx context.Context, key K, w T) error {
	call := &commitCall[T]{ctx: ctx, write: w, done: make(chan struct{})}
	c.mu.Lock()
	if c.groups == nil {
		c.groups = map[K]*commitGroup[T]{}
	}
	g := c.groups[key]
	if g == nil {
		g = &commitGroup[T]{}
		c.groups[key] = g
	}
	g.pending = append(g.pending, call)
	lead := !g.busy
	g.busy = true
	c.mu.Unlock()
	if lead {
		// The group was idle: its own write is first in the batch it sends.
		c.run(ctx, key, g)
		return call.err
	}
	select {
	case <-call.done:
		return call.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run sends one batch of g, then hands the group on: to a goroutine of its
// own when more writes came meanwhile, so that the caller who led returns
// with its own outcome.
func (c *groupCommit[K, T]) run(ctx context.Context, key K, g *commitGroup[T]) {
	c.mu.Lock()
	batch, rest := c.take(g.pending)
	g.pending = rest
	c.mu.Unlock()

	if len(batch) > 0 {
		writes := make([]T, len(batch))
		for i, call := range batch {
			writes[i] = call.write
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitBatchTimeout)
		err := c.send(sctx, key, writes)
		cancel()
		for _, call := range batch {
			call.err = err
			close(call.done)
		}
	}

	c.mu.Lock()
	more := len(g.pending) > 0
	if !more {
		g.busy = false
		delete(c.groups, key)
	}
	c.mu.Unlock()
	if more {
		go c.run(context.Background(), key, g)
	}
}

// take takes up to maxCommitBatch writes of distinct ids from pending, in
// order; the others stay for the next batch. A write whose caller has gone
// is dropped, not sent.
func (c *groupCommit[K, T]) take(pending []*commitCall[T]) (batch, rest []*commitCall[T]) {
	taken := make(map[string]bool, len(pending))
	for _, call := range pending {
		ids := c.ids(call.write)
		switch {
		case call.ctx.Err() != nil:
			call.err = call.ctx.Err()
			close(call.done)
		case len(batch) < maxCommitBatch && !slices.ContainsFunc(ids, func(id string) bool { return taken[id] }):
			for _, id := range ids {
				taken[id] = true
			}
			batch = append(batch, call)
		default:
			rest = append(rest, call)
		}
	}
	return batch, rest
}

// sendBatch runs one batched statement (sql, bound by args) of n writes of
// kind (start, completion) in a transaction of its own, and returns the ids
// of the writes it reports done (the instances it created, the tasks it
// completed).
func (s *Store) sendBatch(ctx context.Context, kind string, n int, sql string, args namedArgs) (map[string]bool, error) {
	s.batchWrites.Record(ctx, int64(n), metric.WithAttributes(attribute.String("kind", kind)))
	var done map[string]bool
	err := s.inBatchTx(ctx, pgx.ReadCommitted, func(b *pgx.Batch) {
		b.Queue(sql, args)
	}, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		done = make(map[string]bool, len(ids))
		for _, id := range ids {
			done[id] = true
		}
		return err
	})
	return done, err
}
