package crdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/orchardhq/orchard/pkg/store"
)

func validatePrune(o *store.PruneOptions) error {
	if o.KeepLast < 0 {
		return invalid("keep_last must not be negative, got %d", o.KeepLast)
	}
	return nil
}

var (
	sqlPruneInstanceExists  = stmt("PruneInstanceExists")
	sqlPruneCandidates      = stmt("PruneCandidates")
	sqlPruneWholeExecutions = stmt("PruneWholeExecutions")
	sqlPruneExecutionPiece  = stmt("PruneExecutionPiece")
	sqlPruneExecutionRow    = stmt("PruneExecutionRow")
	sqlFinishPrune          = stmt("FinishPrune")
)

// prunableExecution is the condition on an execution e that a prune takes
// it, given the SQL of the current execution's id, KeepLast and the
// completed-before cutoff in epoch milliseconds (0: none): one hidden by an
// interrupted prune (deleting), or one neither current nor running, old
// enough and finished early enough.
func prunableExecution(current, keep, before string) string {
	return fmt.Sprintf(`(e.deleting OR (
		e.execution_id <> %[1]s AND e.status <> 'Running'
		AND (%[2]s::INT8 = 0 OR e.execution_id <= %[1]s - %[2]s::INT8)
		AND (%[3]s::INT8 IS NULL OR e.completed_at < %[3]s::INT8)))`, current, keep, before)
}

// PruneExecutions deletes an instance's old executions in transactions of at
// most MaxRowsPerTransaction rows: whole executions while they fit; an
// execution too big for one transaction is hidden first (ListExecutions and
// GetHistory no longer see it) and removed piece by piece. Calling it again
// after an interruption finishes the job.
func (s *Store) PruneExecutions(ctx context.Context, p *store.PruneExecutionsParams) (*store.PruneResult, error) {
	if p.TenantID == "" || p.InstanceID == "" {
		return nil, invalid("tenant id and instance id are required")
	}
	if err := validatePrune(&p.Options); err != nil {
		return nil, err
	}
	total := store.PruneResult{InstancesProcessed: 1}
	for {
		var step store.PruneResult
		var done, found bool
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			var err error
			step, done, found, err = s.pruneStep(ctx, tx, p.TenantID, p.InstanceID, &p.Options)
			if err != nil {
				return err
			}
			return addTally(ctx, tx, p.TenantID, p.Audit, nil, store.AuditResult{Executions: step.ExecutionsDeleted, Events: step.EventsDeleted})
		})
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("instance %q: %w", p.InstanceID, store.ErrNotFound)
		}
		s.purged(step.ExecutionsDeleted + step.EventsDeleted)
		total.ExecutionsDeleted += step.ExecutionsDeleted
		total.EventsDeleted += step.EventsDeleted
		if done {
			if total.ExecutionsDeleted > 0 {
				total.InstancesPruned = 1
			}
			return &total, nil
		}
	}
}

// pruneStep does one transaction's worth of pruning one instance.
func (s *Store) pruneStep(ctx context.Context, tx pgx.Tx, tenantID, instanceID string, o *store.PruneOptions) (r store.PruneResult, done, found bool, err error) {
	before := millisOrNull(o.CompletedBefore)
	instance := namedArgs{"tenant_id": tenantID, "instance_id": instanceID}
	if err := tx.QueryRow(ctx, sqlPruneInstanceExists, instance).Scan(&found); errors.Is(err, pgx.ErrNoRows) {
		return r, true, false, nil
	} else if err != nil {
		return r, false, false, err
	}
	budget := s.opts.MaxRowsPerTransaction
	rows, err := tx.Query(ctx, sqlPruneCandidates, namedArgs{"tenant_id": tenantID, "instance_id": instanceID,
		"limit": budget + 1, "keep_last": o.KeepLast, "completed_before": before})
	if err != nil {
		return r, false, true, err
	}
	type candidate struct {
		id, events int64
		deleting   bool
	}
	cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (candidate, error) {
		var c candidate
		return c, row.Scan(&c.id, &c.events, &c.deleting)
	})
	if err != nil || len(cands) == 0 {
		return r, true, true, err
	}
	var whole []int64
	var events int64
	for _, c := range cands {
		if c.deleting || 1+c.events > budget {
			break
		}
		whole = append(whole, c.id)
		events += c.events
		budget -= 1 + c.events
	}
	if len(whole) == 0 {
		// The first one is too big, or hidden by an interrupted prune.
		r, err = s.pruneExecutionPiece(ctx, tx, tenantID, instanceID, cands[0].id)
		return r, false, true, err
	}
	err = tx.QueryRow(ctx, sqlPruneWholeExecutions, namedArgs{"tenant_id": tenantID, "instance_id": instanceID,
		"execution_ids": whole}).Scan(&r.ExecutionsDeleted, &r.EventsDeleted)
	return r, len(cands) == len(whole), true, err
}

// pruneExecutionPiece removes up to MaxRowsPerTransaction rows of one
// execution too big to prune at once, hiding it first.
func (s *Store) pruneExecutionPiece(ctx context.Context, tx pgx.Tx, tenantID, instanceID string, executionID int64) (store.PruneResult, error) {
	var r store.PruneResult
	err := tx.QueryRow(ctx, sqlPruneExecutionPiece, namedArgs{"tenant_id": tenantID, "instance_id": instanceID,
		"execution_id": executionID, "limit": s.opts.MaxRowsPerTransaction - 1}).Scan(&r.EventsDeleted)
	if err != nil || r.EventsDeleted > 0 {
		return r, err
	}
	// No history left: the execution row goes too.
	err = tx.QueryRow(ctx, sqlPruneExecutionRow, namedArgs{"tenant_id": tenantID, "instance_id": instanceID,
		"execution_id": executionID}).Scan(&r.ExecutionsDeleted)
	return r, err
}

// PruneExecutionsBulk prunes the instances matching a filter, in (status,
// instance id) order, up to Limit instances.
//
// Each page of candidates is read with the executions it may prune, outside
// any transaction, and then pruned in transactions that each delete
// exactly the executions chosen for them. That is safe without reading them
// again: an execution that is not current and not running never becomes
// either, and its history no longer grows, so a transaction deletes at most
// the rows it was planned for; what vanished meanwhile (pruned or deleted by
// someone else) is simply not counted. While a page is being pruned, the
// next one is read on another connection.
func (s *Store) PruneExecutionsBulk(ctx context.Context, p *store.PruneExecutionsBulkParams) (*store.BulkPruneResult, error) {
	if p.TenantID == "" {
		return nil, invalid("tenant id is required")
	}
	if err := validateFilter(&p.Filter); err != nil {
		return nil, err
	}
	if err := validatePrune(&p.Options); err != nil {
		return nil, err
	}
	limit, err := bulkLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	res := &store.BulkPruneResult{}
	type page struct {
		cands []pruneCandidate
		more  bool // something is left after it
		err   error
	}
	read := func(after pruneKey, left int) page {
		// One more than the page: whether anything is left after it.
		want := min(bulkPage, left)
		cands, err := s.pruneBulkCandidates(ctx, p.TenantID, &p.Filter, &p.Options, after, want+1)
		return page{cands: cands[:min(len(cands), want)], more: len(cands) > want, err: err}
	}
	cur := read(pruneKey{}, limit)
	for {
		if cur.err != nil {
			return res, cur.err
		}
		if len(cur.cands) == 0 {
			res.Complete = true
			return res, nil
		}
		var next chan page
		left := limit - int(res.InstancesProcessed) - len(cur.cands)
		if cur.more && left > 0 {
			next = make(chan page, 1)
			after := cur.cands[len(cur.cands)-1].key
			go func() { next <- read(after, left) }()
		}
		err := s.prunePage(ctx, p.TenantID, cur.cands, &p.Options, p.Audit, res)
		if next == nil {
			if err == nil {
				res.Complete = !cur.more
			}
			return res, err
		}
		nextPage := <-next
		if err != nil {
			return res, err
		}
		cur = nextPage
	}
}

// pruneKey is a position in the order of bulk prune candidates: status,
// then instance id, the order of instance_prunable_status.
type pruneKey struct{ status, id string }

// pruneCandidate is an instance a bulk prune takes, with the executions
// the options let it prune (oldest first) and their history sizes.
type pruneCandidate struct {
	key    pruneKey
	execs  []int64
	events []int64
	// hidden says an interrupted prune left one of them half deleted: the
	// instance is then pruned on its own, in pieces.
	hidden bool
}

// cost is the rows pruning the candidate deletes.
func (c *pruneCandidate) cost() int64 {
	n := int64(len(c.execs))
	for _, e := range c.events {
		n += e
	}
	return n
}

// pruneBulkCandidates reads the next matching instances after the given
// position that have more than one execution stored (nothing else can be
// pruned), each with the executions the options let it prune. They come
// from instance_prunable, which holds only those, by status: an instance
// pruned down to one execution leaves it, so a call does not wade through
// what earlier calls did, nor through the instances of other statuses than
// the filter's.
func (s *Store) pruneBulkCandidates(ctx context.Context, tenantID string, f *store.InstanceFilter, o *store.PruneOptions, after pruneKey, n int) ([]pruneCandidate, error) {
	sql, args := pruneBulkCandidatesQuery(tenantID, f, o, after, n)
	var cands []pruneCandidate
	err := s.retry(ctx, func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, sql, customPlan(args)...)
		if err != nil {
			return err
		}
		cands, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (pruneCandidate, error) {
			var c pruneCandidate
			return c, r.Scan(&c.key.status, &c.key.id, &c.execs, &c.events, &c.hidden)
		})
		return err
	})
	return cands, err
}

// pruneBulkCandidatesQuery builds the statement of pruneBulkCandidates.
// instance_prunable knows the status; any other condition is checked on
// the instance, looked up by its key (OFFSET 0 keeps the lookup apart, so
// that the candidates drive). The current execution is the newest:
// executions are numbered from 1 up, and a new one becomes current in the
// transaction that adds it.
func pruneBulkCandidatesQuery(tenantID string, f *store.InstanceFilter, o *store.PruneOptions, after pruneKey, n int) (sql string, args namedArgs) {
	q := &query{}
	var where string
	switch len(f.Statuses) {
	case 1:
		// Equality: the index range is that status's, from the position on.
		where = fmt.Sprintf("p.tenant_id = %s AND p.status = %s AND p.instance_id > %s",
			q.arg("tenant_id", tenantID), q.arg("status", string(f.Statuses[0])), q.arg("after_id", after.id))
	default:
		where = fmt.Sprintf("p.tenant_id = %s AND (p.status, p.instance_id) > (%s, %s)",
			q.arg("tenant_id", tenantID), q.arg("after_status", after.status), q.arg("after_id", after.id))
		if len(f.Statuses) > 1 {
			where += fmt.Sprintf(" AND p.status = ANY(%s::TEXT[])", q.arg("statuses", statusStrings(f.Statuses)))
		}
	}
	prunable := prunableExecution("e.current_execution_id", q.arg("keep_last", o.KeepLast), q.arg("prune_completed_before", millisOrNull(o.CompletedBefore)))
	match := ""
	if !statusesOnly(f) {
		filterInstances(q, tenantID, f, false)
		match = `
CROSS JOIN LATERAL (
	SELECT 1 FROM instances i
	WHERE i.instance_id = p.instance_id
	AND ` + q.whereSQL() + `
	OFFSET 0
) m`
	}
	return `SELECT p.status, p.instance_id,
	coalesce(x.execs, '{}'), coalesce(x.events, '{}'), coalesce(x.hidden, false)
FROM instance_prunable p` + match + `
CROSS JOIN LATERAL (
	SELECT array_agg(e.execution_id ORDER BY e.execution_id) AS execs,
		array_agg(e.event_count ORDER BY e.execution_id) AS events,
		bool_or(e.deleting) AS hidden
	FROM (SELECT e.*, max(e.execution_id) OVER () AS current_execution_id FROM executions e
		WHERE e.tenant_id = p.tenant_id AND e.instance_id = p.instance_id) e
	WHERE ` + prunable + `
) x
WHERE ` + where + `
ORDER BY p.status, p.instance_id LIMIT ` + strconv.Itoa(n), q.args
}

// statusesOnly says the filter has no condition but statuses.
func statusesOnly(f *store.InstanceFilter) bool {
	g := *f
	g.Statuses = nil
	return g.Empty()
}

// pruneShares is how many transactions of a page of a bulk prune run at
// once. A transaction's time goes into the database's row work, which two
// connections do in parallel; its shares are disjoint sets of instances.
const pruneShares = 2

// pruneBatch is the work of one bulk prune transaction: the executions
// paired in inst and execs, of n instances.
type pruneBatch struct {
	inst  []string
	execs []int64
	n     int64
}

// prunePage prunes a page of candidates: whole instances, shared out in
// pruneShares transactions or more (a transaction holds at most
// MaxRowsPerTransaction rows), which run concurrently; then each instance
// too big for that, or left hidden by an interrupted prune, through
// PruneExecutions, in pieces. Each transaction tallies what it removed
// under the audit record.
func (s *Store) prunePage(ctx context.Context, tenantID string, cands []pruneCandidate, o *store.PruneOptions, audit string, res *store.BulkPruneResult) error {
	var batches []pruneBatch
	var big []string
	share := int64(len(cands)+pruneShares-1) / pruneShares
	var cur pruneBatch
	budget := s.opts.MaxRowsPerTransaction
	for i := range cands {
		c := &cands[i]
		cost := c.cost()
		if c.hidden || cost > s.opts.MaxRowsPerTransaction {
			big = append(big, c.key.id)
			continue
		}
		if cur.n > 0 && (cost > budget || cur.n >= share) {
			batches = append(batches, cur)
			cur, budget = pruneBatch{}, s.opts.MaxRowsPerTransaction
		}
		for _, e := range c.execs {
			cur.inst, cur.execs = append(cur.inst, c.key.id), append(cur.execs, e)
		}
		cur.n++
		budget -= cost
	}
	if cur.n > 0 {
		batches = append(batches, cur)
	}

	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(pruneShares)
	for _, b := range batches {
		g.Go(func() error {
			var r store.PruneResult
			if len(b.inst) > 0 {
				err := s.inBatchTx(gctx, pgx.Serializable, func(batch *pgx.Batch) {
					batch.Queue(sqlFinishPrune, namedArgs{"tenant_id": tenantID, "instance_ids": b.inst, "execution_ids": b.execs, "audit_record_id": audit})
				}, func(br pgx.BatchResults) error {
					return br.QueryRow().Scan(&r.InstancesPruned, &r.ExecutionsDeleted, &r.EventsDeleted)
				})
				if err != nil {
					return err
				}
				s.purged(r.ExecutionsDeleted + r.EventsDeleted)
			}
			mu.Lock()
			defer mu.Unlock()
			res.InstancesProcessed += b.n
			res.InstancesPruned += r.InstancesPruned
			res.ExecutionsDeleted += r.ExecutionsDeleted
			res.EventsDeleted += r.EventsDeleted
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, id := range big {
		r, err := s.PruneExecutions(ctx, &store.PruneExecutionsParams{TenantID: tenantID, InstanceID: id, Options: *o, Audit: audit})
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		res.InstancesProcessed++
		res.InstancesPruned += r.InstancesPruned
		res.ExecutionsDeleted += r.ExecutionsDeleted
		res.EventsDeleted += r.EventsDeleted
	}
	return nil
}
