package crdb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

// zombieWindow is how many of a tenant's oldest visible messages a fetch
// that found no work looks among for messages of instances that are gone.
const zombieWindow = 32

// StartOrchestration creates the instance, execution 1 and the start message
// in one statement.
func (s *Store) StartOrchestration(ctx context.Context, p *store.StartOrchestrationParams) (*store.StartOrchestrationResult, error) {
	if p.TenantID == "" || p.InstanceID == "" || p.Name == "" {
		return nil, invalid("tenant id, instance id and name are required")
	}
	if p.Start.Kind == "" {
		return nil, invalid("the start message has no kind")
	}
	if p.Retention != nil {
		if err := p.Retention.Validate(); err != nil {
			return nil, err
		}
	}
	now := s.now()
	var created bool
	err := s.retry(ctx, func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, `
WITH i AS (
	INSERT INTO instances (tenant_id, instance_id, name, version, current_execution_id, status,
		root_instance_id, created_at, updated_at, input, tags, retention, execution_count, event_count)
	VALUES ($1, $2, $3, $4, 1, 'Running', $2, $5, $5, $6, $7, $10, 1, 0)
	ON CONFLICT (tenant_id, instance_id) DO NOTHING
	RETURNING instance_id
), e AS (
	INSERT INTO executions (tenant_id, instance_id, execution_id, status, input, started_at)
	SELECT $1, instance_id, 1, 'Running', $6, $5 FROM i
	RETURNING instance_id
), l AS (
	INSERT INTO instance_locks (tenant_id, instance_id, lock_token, locked_until, due_at)
	SELECT $1, instance_id, gen_random_uuid(), 0, $5 FROM i
	ON CONFLICT (tenant_id, instance_id) DO UPDATE SET lock_token = excluded.lock_token, locked_until = 0, due_at = excluded.due_at, claims = 0
	RETURNING 1
), counted AS (
	INSERT INTO instance_counts (tenant_id, status, shard, n)
	SELECT $1, 'Running', $11, 1 FROM i
	ON CONFLICT (tenant_id, status, shard) DO UPDATE SET n = instance_counts.n + excluded.n
	RETURNING 1
), tagged AS (
	INSERT INTO instance_tags (tenant_id, instance_id, tag_key, tag_value, created_at)
	SELECT $1, i.instance_id, t.key, t.value, $5 FROM i, jsonb_each_text($7::JSONB) AS t (key, value)
	ON CONFLICT (tenant_id, instance_id, tag_key) DO UPDATE SET tag_value = excluded.tag_value, created_at = excluded.created_at
	RETURNING 1
)
INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at)
SELECT $1, instance_id, 1, $8, $9, $5, $5 FROM i`,
			p.TenantID, p.InstanceID, p.Name, p.Version, now, p.Input, tagsOf(p.Tags), p.Start.Kind, p.Start.Payload, p.Retention,
			countShard())
		created = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return nil, err
	}
	if !created {
		return nil, fmt.Errorf("instance %q: %w", p.InstanceID, store.ErrAlreadyExists)
	}
	return &store.StartOrchestrationResult{ExecutionID: 1, CreatedAt: fromMillis(now)}, nil
}

func tagsOf(tags map[string]string) map[string]string {
	if tags == nil {
		return map[string]string{}
	}
	return tags
}

// enqueueMessage adds a message (execution $3, kind $4, payload $5,
// visible at $6, now $7) to instance $2 of tenant $1 unless it is gone or
// being deleted, and makes the instance due by then; it returns the
// message's id.
var enqueueMessage = `
WITH m AS (
	INSERT INTO orchestrator_queue (tenant_id, instance_id, execution_id, kind, payload, visible_at, created_at)
	SELECT tenant_id, instance_id, $3, $4, $5, $6, $7 FROM instances
	WHERE tenant_id = $1 AND instance_id = $2 AND NOT deleting
	RETURNING id, instance_id
), ` + wakeOne("(SELECT instance_id FROM m)", "$6") + `
SELECT id::TEXT FROM m`

// Enqueue adds a message to an existing instance's queue.
func (s *Store) Enqueue(ctx context.Context, p *store.EnqueueParams) (*store.EnqueueResult, error) {
	if p.TenantID == "" || p.InstanceID == "" || p.Message.Kind == "" {
		return nil, invalid("tenant id, instance id and message kind are required")
	}
	if p.Delay < 0 {
		return nil, invalid("negative delay %s", p.Delay)
	}
	now := s.now()
	var id string
	// READ COMMITTED: under SERIALIZABLE, the write to the lease row would
	// fail whenever a claim or a turn of the instance updated the row since
	// the enqueue began. The statement is atomic at any level.
	err := s.inBatchTx(ctx, pgx.ReadCommitted, func(b *pgx.Batch) {
		b.Queue(enqueueMessage,
			p.TenantID, p.InstanceID, p.ExecutionID, p.Message.Kind, p.Message.Payload, now+p.Delay.Milliseconds(), now)
	}, func(br pgx.BatchResults) error {
		id = ""
		err := br.QueryRow().Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, fmt.Errorf("instance %q: %w", p.InstanceID, store.ErrNotFound)
	}
	return &store.EnqueueResult{MessageID: id}, nil
}

const selectInstance = `
SELECT i.instance_id, i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count, i.retention
FROM instances i
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
WHERE i.tenant_id = $1 AND i.instance_id = $2 AND NOT i.deleting`

// scanInstance reads the columns of selectInstance (instanceColumns in
// listings) into an instance, then any extra columns the query appends into
// extra.
func scanInstance(tenantID string, row pgx.Row, extra ...any) (*store.Instance, error) {
	in := store.Instance{TenantID: tenantID}
	var status string
	var createdAt, updatedAt int64
	var completedAt *int64
	err := row.Scan(append([]any{&in.InstanceID, &in.Name, &in.Version, &status, &in.CurrentExecutionID,
		&in.ParentInstanceID, &in.RootInstanceID, &in.Input, &in.Output, &in.Error,
		&in.Tags, &createdAt, &updatedAt, &completedAt, &in.ExecutionCount, &in.EventCount}, extra...)...)
	if err != nil {
		return nil, err
	}
	in.Status = store.Status(status)
	in.CreatedAt, in.UpdatedAt, in.CompletedAt = fromMillis(createdAt), fromMillis(updatedAt), fromNullMillis(completedAt)
	return &in, nil
}

// GetInstance reads an instance with its current execution's state.
func (s *Store) GetInstance(ctx context.Context, p *store.GetInstanceParams) (*store.Instance, error) {
	var in *store.Instance
	err := s.retry(ctx, func(ctx context.Context) error {
		var retention *store.Retention
		var err error
		in, err = scanInstance(p.TenantID, s.pool.QueryRow(ctx, selectInstance, p.TenantID, p.InstanceID), &retention)
		if in != nil {
			in.Retention = retention
		}
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("instance %q: %w", p.InstanceID, store.ErrNotFound)
	}
	return in, err
}

// GetHistory reads a page of an execution's history in event id order.
func (s *Store) GetHistory(ctx context.Context, p *store.GetHistoryParams) ([]store.HistoryEvent, error) {
	if p.Limit < 0 || p.AfterEventID < 0 || p.ExecutionID < 0 {
		return nil, invalid("negative execution id, event id or limit")
	}
	var events []store.HistoryEvent
	var found bool
	limit := int64(math.MaxInt64)
	if p.Limit > 0 {
		limit = int64(p.Limit)
	}
	err := s.retry(ctx, func(ctx context.Context) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT e.execution_id FROM instances i
			JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
				AND e.execution_id = CASE WHEN $3::INT8 = 0 THEN i.current_execution_id ELSE $3::INT8 END
			WHERE i.tenant_id = $1 AND i.instance_id = $2 AND NOT i.deleting AND NOT e.deleting`,
			p.TenantID, p.InstanceID, p.ExecutionID)
		b.Queue(selectHistory, p.TenantID, p.InstanceID, p.ExecutionID, p.AfterEventID, limit)
		br := s.pool.SendBatch(ctx, b)
		defer br.Close()
		var execID int64
		err := br.QueryRow().Scan(&execID)
		found = err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if events, err = scanHistory(br); err != nil {
			return err
		}
		return br.Close()
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("instance %q, execution %d: %w", p.InstanceID, p.ExecutionID, store.ErrNotFound)
	}
	return events, nil
}

// selectHistory reads a page of an execution's history; execution 0 means
// the current one.
const selectHistory = `
SELECT h.event_id, h.kind, h.payload, h.created_at
FROM history h
WHERE h.tenant_id = $1 AND h.instance_id = $2 AND h.execution_id = (
	SELECT CASE WHEN $3::INT8 = 0 THEN current_execution_id ELSE $3::INT8 END
	FROM instances WHERE tenant_id = $1 AND instance_id = $2)
	AND h.event_id > $4
ORDER BY h.event_id
LIMIT $5`

func scanHistory(br pgx.BatchResults) ([]store.HistoryEvent, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	var events []store.HistoryEvent
	for rows.Next() {
		var ev store.HistoryEvent
		var createdAt int64
		if err := rows.Scan(&ev.EventID, &ev.Kind, &ev.Payload, &createdAt); err != nil {
			rows.Close()
			return nil, err
		}
		ev.CreatedAt = fromMillis(createdAt)
		events = append(events, ev)
	}
	return events, rows.Err()
}

// Every lease row carries due_at, the time its instance next needs a turn
// (migration 0014): the earliest visible_at of its messages, noneDue when
// it has none, the lease's end while a dispatcher holds it. A claim reads
// due instances in that order from (tenant_id, due_at); leased instances
// are out of its way, due only when their lease ends.
//
// The writers keep one rule: an instance with a message visible at v is due
// at v or earlier, or is leased. An enqueue lowers due_at to its message's
// visible_at (wakeDue), in the transaction that adds the message. A
// release (ack, abandon) sets it to the earliest message left, read in its
// own statement (releaseDue); a message enqueued meanwhile may be missing
// from that read, so an enqueue onto a row with a lease also lowers due_at
// below locked_until, which a claim, a renewal and a release never do: the
// release sees it (after waiting for the enqueue's row lock, it reads the
// row anew) and keeps the lower value. The price of a wrong guess is one
// claim that finds nothing visible and abandons, which sets due_at exactly.

// noneDue is the due_at of an instance with no message.
const noneDue = "9223372036854775807"

// wakeDue is the due_at of lease row l after an enqueue of a message
// visible at v (an SQL expression).
func wakeDue(v string) string {
	return fmt.Sprintf("LEAST(l.due_at, %[1]s, CASE WHEN l.locked_until > 0 THEN l.locked_until - 1 ELSE %[1]s END)", v)
}

// wakeOne is a CTE, woken, that makes instance (an SQL expression) of
// tenant $1 due by v (wakeDue) in an enqueue's statement. It writes the
// row even when due_at stays as it is: an update that finds the row changed
// since the statement began reads it again (READ COMMITTED) and works from
// what it finds, where a condition on due_at in the same statement would
// be judged on the row as it was, and could skip a row that a claim has
// just leased.
func wakeOne(instance, v string) string {
	return `woken AS (
	UPDATE instance_locks l SET due_at = ` + wakeDue(v) + `
	WHERE l.tenant_id = $1 AND l.instance_id = ` + instance + `
	RETURNING 1
)`
}

// releaseDue is the due_at of lease row l when its lease is released and
// next (an SQL expression) is the earliest visible_at of the messages left,
// as the release read them.
func releaseDue(next string) string {
	return fmt.Sprintf("CASE WHEN l.due_at < l.locked_until THEN LEAST(l.due_at, %[1]s) ELSE %[1]s END", next)
}

// nextDue is the earliest visible_at of the messages of lease row l's
// instance, noneDue when it has none, leaving out the messages whose ids
// are in the SQL array except (none when empty).
func nextDue(except string) string {
	cond := ""
	if except != "" {
		cond = " AND NOT (q.id = ANY(" + except + "))"
	}
	return `COALESCE((SELECT min(q.visible_at) FROM orchestrator_queue q
		WHERE q.tenant_id = l.tenant_id AND q.instance_id = l.instance_id` + cond + `), ` + noneDue + `)`
}

// The claim statements lease up to $5 due instances with a free lease, in
// one statement, and return their ids (leasedInputs then reads them). It
// locks the first due rows of the tenant in order, skipping rows another
// claim is taking (SKIP LOCKED: claims never queue behind each other), and
// takes them by compare-and-set (locked_until <= now), which alone makes
// it correct. A claimed row is due when its lease ends. (The index holds
// only rows with something due; "due_at < noneDue" says so to a plan made
// without knowing $1.)
const claimDue = `due AS (
	SELECT l.instance_id FROM instance_locks l
	WHERE l.tenant_id = %[1]s AND l.due_at <= $1 AND l.due_at < ` + noneDue + ` AND l.locked_until <= $1
	ORDER BY l.due_at
	LIMIT $5
	FOR UPDATE SKIP LOCKED
), claimed AS (
	-- By key, from an array: joined with due, the update would be planned
	-- as a hash join over a scan of every lease row of the table.
	UPDATE instance_locks l SET lock_token = $2, locked_until = $3, due_at = $3, claims = l.claims + 1
	WHERE l.tenant_id = %[1]s AND l.instance_id = ANY(ARRAY(SELECT instance_id FROM due)) AND l.locked_until <= $1
	RETURNING l.tenant_id, l.instance_id
)
SELECT c.tenant_id, c.instance_id FROM claimed c`

var (
	// claimForTenant is the claim for tenant $4.
	claimForTenant = "WITH " + fmt.Sprintf(claimDue, "$4")

	// claimForAnyTenant serves tenants in turn: the first registered tenant
	// after $4 (wrapping around) that has claimable work.
	claimForAnyTenant = claimPickTenant + fmt.Sprintf(claimDue, "(SELECT tenant_id FROM pick)")

	// The tenants after $4, then from the first, walked in key order and
	// stopping at the first with claimable work: among its first due
	// instances (a bounded head, so the probe costs the same whatever the
	// backlog; leased rows are in it only when a message came during their
	// lease), one without a live lease.
	claimPickTenant = `WITH pick AS (
	SELECT tenant_id FROM (
		(SELECT t.tenant_id FROM tenants t WHERE t.tenant_id > $4 AND ` + claimableWork + ` ORDER BY t.tenant_id LIMIT 1)
		UNION ALL
		(SELECT t.tenant_id FROM tenants t WHERE t.tenant_id <= $4 AND ` + claimableWork + ` ORDER BY t.tenant_id LIMIT 1)
	) rr
	LIMIT 1
), `

	claimableWork = `EXISTS (
		SELECT 1 FROM (
			SELECT l.locked_until FROM instance_locks l
			WHERE l.tenant_id = t.tenant_id AND l.due_at <= $1 AND l.due_at < ` + noneDue + `
			ORDER BY l.due_at
			LIMIT 512) w
		WHERE w.locked_until <= $1)`

	// claimZombie leases, for tenant $4, one instance among the oldest
	// visible messages ($5 entries) that has no lease row: its messages
	// outlived it (it was deleted). The fetch then consumes them.
	claimZombie = `
INSERT INTO instance_locks (tenant_id, instance_id, lock_token, locked_until, due_at)
SELECT $4, w.instance_id, $2, $3, $3 FROM (
	SELECT q.instance_id, q.visible_at FROM orchestrator_queue q
	WHERE q.tenant_id = $4
	ORDER BY q.visible_at
	LIMIT $5
) w
WHERE w.visible_at <= $1
	AND NOT EXISTS (SELECT 1 FROM instance_locks l WHERE l.tenant_id = $4 AND l.instance_id = w.instance_id)
LIMIT 1
ON CONFLICT (tenant_id, instance_id) DO NOTHING
RETURNING tenant_id, instance_id`
)

// MaxFetchBatch bounds the instances one fetch leases.
const MaxFetchBatch = 100

// FetchOrchestrationItem leases one instance and reads what its turn needs.
func (s *Store) FetchOrchestrationItem(ctx context.Context, p *store.FetchOrchestrationItemParams) (*store.OrchestrationItem, error) {
	items, err := s.FetchOrchestrationItems(ctx, &store.FetchOrchestrationItemsParams{FetchOrchestrationItemParams: *p, Max: 1})
	if err != nil || len(items) == 0 {
		return nil, err
	}
	return items[0], nil
}

// FetchOrchestrationItems leases up to Max instances of one tenant and reads
// what their turns need, in one round trip.
func (s *Store) FetchOrchestrationItems(ctx context.Context, p *store.FetchOrchestrationItemsParams) ([]*store.OrchestrationItem, error) {
	if p.LeaseDuration <= 0 {
		return nil, invalid("lease duration must be positive")
	}
	max := p.Max
	switch {
	case max == 0:
		max = 1
	case max < 0 || max > MaxFetchBatch:
		return nil, invalid("max must be between 1 and %d, got %d", MaxFetchBatch, max)
	}
	// A few rounds: a round ends early when the claim finds only zombie
	// messages, or messages consumed under its nose.
	for range 8 {
		items, again, err := s.fetchOnce(ctx, &p.FetchOrchestrationItemParams, max)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			// No work: consume the messages of instances that are gone,
			// which no claim takes (they have no lease row).
			consumed, err := s.consumeZombieMessages(ctx, p.TenantID, p.LeaseDuration)
			if err != nil {
				return items, err
			}
			again = again || consumed
		}
		if len(items) > 0 || !again {
			return items, nil
		}
	}
	return nil, nil
}

// consumeZombieMessages consumes the visible messages of one instance that
// no longer exists, for a tenant (any tenant when empty), and reports
// whether it found one.
func (s *Store) consumeZombieMessages(ctx context.Context, tenantID string, leaseDuration time.Duration) (bool, error) {
	now := s.now()
	if tenantID == "" {
		err := s.retry(ctx, func(ctx context.Context) error {
			err := s.pool.QueryRow(ctx, `SELECT q.tenant_id FROM orchestrator_queue q
				WHERE q.visible_at <= $1 AND NOT EXISTS (SELECT 1 FROM instance_locks l
					WHERE l.tenant_id = q.tenant_id AND l.instance_id = q.instance_id)
				LIMIT 1`, now).Scan(&tenantID)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return err
		})
		if err != nil || tenantID == "" {
			return false, err
		}
	}
	token := uuid.NewString()
	var instanceID string
	var messages []store.QueuedMessage
	err := s.inBatchTx(ctx, pgx.ReadCommitted, func(b *pgx.Batch) {
		b.Queue(claimZombie, now, token, now+leaseDuration.Milliseconds(), tenantID, zombieWindow)
		b.Queue(`SELECT q.instance_id, q.id::TEXT, q.kind FROM instance_locks l
			JOIN orchestrator_queue q ON q.tenant_id = l.tenant_id AND q.instance_id = l.instance_id
			WHERE l.tenant_id = $1 AND l.lock_token = $2 AND q.visible_at <= $3
			LIMIT $4`, tenantID, token, now, s.opts.MaxMessagesPerTurn)
	}, func(br pgx.BatchResults) error {
		instanceID, messages = "", nil
		var tenant string
		if err := br.QueryRow().Scan(&tenant, &instanceID); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		messages, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.QueuedMessage, error) {
			var m store.QueuedMessage
			return m, r.Scan(&m.InstanceID, &m.ID, &m.Kind)
		})
		return err
	})
	if err != nil || instanceID == "" {
		return false, err
	}
	lease := store.OrchestrationLease{TenantID: tenantID, InstanceID: instanceID, Token: token}
	return true, s.consumeZombies(ctx, lease, messages)
}

// leasedInputs follows a claim in the same round trip, so that it reads
// what the turns before committed (in READ COMMITTED, a statement sees what
// committed before it started; the claim may have waited for one of those
// turns to release its lease): the instances leased under token $1, each
// with its current execution, that execution's history and its visible
// messages (at most $3, the oldest) as columns of arrays. The elements of
// one lateral's arrays line up (its aggregates read the same rows in the
// same order); the fetch sorts them. A NULL name is an instance that is
// gone or being deleted.
const leasedInputs = `
SELECT l.tenant_id, l.instance_id, l.claims, i.instance_id IS NOT NULL,
	i.name, i.version, i.status, i.current_execution_id,
	COALESCE(i.parent_instance_id, ''), i.root_instance_id, e.input, e.output, COALESCE(e.error, ''),
	i.tags, i.created_at, i.updated_at, i.completed_at, i.execution_count, i.event_count,
	h.ids, h.kinds, h.payloads, h.created,
	m.ids, m.executions, m.kinds, m.payloads, m.visible, m.created
FROM instance_locks l
LEFT JOIN instances i ON i.tenant_id = l.tenant_id AND i.instance_id = l.instance_id AND NOT i.deleting
LEFT JOIN executions e ON e.tenant_id = i.tenant_id AND e.instance_id = i.instance_id
	AND e.execution_id = i.current_execution_id
LEFT JOIN LATERAL (
	SELECT array_agg(h.event_id) AS ids, array_agg(h.kind) AS kinds, array_agg(h.payload) AS payloads,
		array_agg(h.created_at) AS created
	FROM history h
	WHERE h.tenant_id = i.tenant_id AND h.instance_id = i.instance_id AND h.execution_id = i.current_execution_id
) h ON true
LEFT JOIN LATERAL (
	SELECT array_agg(q.id::TEXT) AS ids, array_agg(q.execution_id) AS executions, array_agg(q.kind) AS kinds,
		array_agg(q.payload) AS payloads, array_agg(q.visible_at) AS visible, array_agg(q.created_at) AS created
	FROM (
		SELECT q.id, q.execution_id, q.kind, q.payload, q.visible_at, q.created_at FROM orchestrator_queue q
		WHERE q.tenant_id = l.tenant_id AND q.instance_id = l.instance_id AND q.visible_at <= $2
		ORDER BY q.visible_at, q.created_at, q.id
		LIMIT $3) q
) m ON true
WHERE l.lock_token = $1`

// fetchOnce claims instances and reads their turns' inputs in one round
// trip, as one READ COMMITTED transaction. The claim is a compare-and-set on
// instance_locks, correct at any isolation level; under SERIALIZABLE on
// PostgreSQL, claims and acks would abort each other on predicate locks of
// the queue's index pages for no gain. (CockroachDB runs it SERIALIZABLE
// unless read committed is enabled on the cluster, and is just as correct.)
// The leases of one fetch share a token; each names its instance.
func (s *Store) fetchOnce(ctx context.Context, p *store.FetchOrchestrationItemParams, max int) (items []*store.OrchestrationItem, again bool, err error) {
	now := s.now()
	token := uuid.NewString()
	until := now + p.LeaseDuration.Milliseconds()
	var (
		claimed  []store.Instance // InstanceID and TenantID always set; Name empty for a zombie
		history  map[string][]store.HistoryEvent
		messages map[string][]store.QueuedMessage
		// claimCounts: the claims column of each lease row after the claim.
		claimCounts map[string]int64
	)
	err = s.inBatchTx(ctx, pgx.ReadCommitted, func(b *pgx.Batch) {
		if p.TenantID != "" {
			b.Queue(claimForTenant, now, token, until, p.TenantID, max)
		} else {
			s.mu.Lock()
			after := s.orchestratorTurn
			s.mu.Unlock()
			b.Queue(claimForAnyTenant, now, token, until, after, max)
		}
		b.Queue(leasedInputs, token, now, s.opts.MaxMessagesPerTurn)
	}, func(br pgx.BatchResults) error {
		claimed, history, messages = nil, map[string][]store.HistoryEvent{}, map[string][]store.QueuedMessage{}
		claimCounts = map[string]int64{}
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var in store.Instance
			var exists bool
			var claims int64
			var status, name, version, root *string
			var execID, createdAt, updatedAt, execCount, eventCount, completedAt *int64
			var h struct {
				ids, created []int64
				kinds        []string
				payloads     [][]byte
			}
			var m struct {
				ids, kinds                   []string
				executions, visible, created []int64
				payloads                     [][]byte
			}
			if err := rows.Scan(&in.TenantID, &in.InstanceID, &claims, &exists, &name, &version, &status, &execID,
				&in.ParentInstanceID, &root, &in.Input, &in.Output, &in.Error,
				&in.Tags, &createdAt, &updatedAt, &completedAt, &execCount, &eventCount,
				&h.ids, &h.kinds, &h.payloads, &h.created,
				&m.ids, &m.executions, &m.kinds, &m.payloads, &m.visible, &m.created); err != nil {
				return err
			}
			if exists {
				in.Name, in.Version, in.Status = *name, *version, store.Status(*status)
				in.CurrentExecutionID, in.RootInstanceID = *execID, *root
				in.CreatedAt, in.UpdatedAt = fromMillis(*createdAt), fromMillis(*updatedAt)
				in.CompletedAt = fromNullMillis(completedAt)
				in.ExecutionCount, in.EventCount = *execCount, *eventCount
			}
			claimed = append(claimed, in)
			claimCounts[in.InstanceID] = claims
			for i, id := range h.ids {
				history[in.InstanceID] = append(history[in.InstanceID], store.HistoryEvent{
					EventID: id, Kind: h.kinds[i], Payload: h.payloads[i], CreatedAt: fromMillis(h.created[i])})
			}
			for i, id := range m.ids {
				messages[in.InstanceID] = append(messages[in.InstanceID], store.QueuedMessage{
					ID: id, InstanceID: in.InstanceID, ExecutionID: m.executions[i],
					Message:   store.Message{Kind: m.kinds[i], Payload: m.payloads[i]},
					VisibleAt: fromMillis(m.visible[i]), CreatedAt: fromMillis(m.created[i])})
			}
		}
		return rows.Err()
	})
	if err != nil {
		// COMMIT travels with the statements: a failure while reading the
		// results (a cancelled context, a row that will not scan) may come
		// after the claim committed. Let go of the leases we may hold, so
		// the instances are not blocked until they expire.
		// Due now: whoever claims them next sorts out what they hold.
		_, _ = s.pool.Exec(context.WithoutCancel(ctx), `UPDATE instance_locks SET locked_until = 0, due_at = 0 WHERE lock_token = $1`, token)
		return nil, false, err
	}
	if len(claimed) > 0 && p.TenantID == "" {
		s.mu.Lock()
		s.orchestratorTurn = claimed[0].TenantID
		s.mu.Unlock()
	}
	for _, in := range claimed {
		lease := store.OrchestrationLease{TenantID: in.TenantID, InstanceID: in.InstanceID, Token: token, ExpiresAt: fromMillis(until)}
		msgs := messages[in.InstanceID]
		switch {
		case in.Name == "":
			if err := s.consumeZombies(ctx, lease, msgs); err != nil {
				return items, false, err
			}
			again = true
		case len(msgs) == 0:
			// Another dispatcher consumed them between our candidate scan
			// and our claim: let go.
			err := s.AbandonOrchestrationItem(ctx, &store.AbandonOrchestrationItemParams{Lease: lease})
			if err != nil && !errors.Is(err, store.ErrLeaseLost) {
				return items, false, err
			}
			again = true
		default:
			h := history[in.InstanceID]
			slices.SortFunc(h, func(a, b store.HistoryEvent) int { return cmp.Compare(a.EventID, b.EventID) })
			slices.SortStableFunc(msgs, func(a, b store.QueuedMessage) int {
				return cmp.Or(a.VisibleAt.Compare(b.VisibleAt), a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
			})
			items = append(items, &store.OrchestrationItem{Lease: lease, Instance: in, History: h, Messages: msgs, Claims: claimCounts[in.InstanceID]})
		}
	}
	return items, again, nil
}

// consumeZombies deletes the messages of an instance that does not exist
// (it was deleted, or never was) and releases the lease taken on it.
func (s *Store) consumeZombies(ctx context.Context, lease store.OrchestrationLease, messages []store.QueuedMessage) error {
	ids := make([]string, len(messages))
	for i, m := range messages {
		ids[i] = m.ID
		s.log.WarnContext(ctx, "consumed a message for an instance that does not exist",
			"tenant_id", lease.TenantID, "instance_id", lease.InstanceID, "message_id", m.ID, "kind", m.Kind)
	}
	return s.retry(ctx, func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, `
WITH consumed AS (
	DELETE FROM orchestrator_queue
	WHERE tenant_id = $1 AND instance_id = $2 AND id = ANY($3::UUID[])
		AND NOT EXISTS (SELECT 1 FROM instances WHERE tenant_id = $1 AND instance_id = $2 AND NOT deleting)
	RETURNING id
)
DELETE FROM instance_locks WHERE tenant_id = $1 AND instance_id = $2 AND lock_token = $4`,
			lease.TenantID, lease.InstanceID, ids, lease.Token)
		return err
	})
}

// RenewOrchestrationLease extends a live lease by compare-and-set.
func (s *Store) RenewOrchestrationLease(ctx context.Context, p *store.RenewOrchestrationLeaseParams) (time.Time, error) {
	if p.Duration <= 0 {
		return time.Time{}, invalid("lease duration must be positive")
	}
	if !validToken(p.Lease.Token) {
		return time.Time{}, leaseLost(p.Lease)
	}
	now := s.now()
	until := now + p.Duration.Milliseconds()
	var renewed bool
	err := s.retry(ctx, func(ctx context.Context) error {
		// Due when the lease ends, unless a message came during it.
		tag, err := s.pool.Exec(ctx, `UPDATE instance_locks l SET locked_until = $5,
				due_at = CASE WHEN l.due_at < l.locked_until THEN l.due_at ELSE $5 END
			WHERE tenant_id = $1 AND instance_id = $2 AND lock_token = $3 AND locked_until > $4`,
			p.Lease.TenantID, p.Lease.InstanceID, p.Lease.Token, now, until)
		renewed = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	if !renewed {
		return time.Time{}, leaseLost(p.Lease)
	}
	return fromMillis(until), nil
}

func leaseLost(l store.OrchestrationLease) error {
	return fmt.Errorf("instance %q: %w", l.InstanceID, store.ErrLeaseLost)
}

// AbandonOrchestrationItem releases the lease. With a delay, the lease row
// stays, under a token nobody holds, until the delay has passed.
func (s *Store) AbandonOrchestrationItem(ctx context.Context, p *store.AbandonOrchestrationItemParams) error {
	if p.Delay < 0 {
		return invalid("negative delay %s", p.Delay)
	}
	if !validToken(p.Lease.Token) {
		return leaseLost(p.Lease)
	}
	now := s.now()
	var released bool
	err := s.retry(ctx, func(ctx context.Context) error {
		var err error
		var n int64
		if p.Delay == 0 {
			tag, e := s.pool.Exec(ctx, `UPDATE instance_locks l SET locked_until = 0, claims = 0, due_at = `+releaseDue(nextDue(""))+`
				WHERE tenant_id = $1 AND instance_id = $2 AND lock_token = $3 AND locked_until > $4`,
				p.Lease.TenantID, p.Lease.InstanceID, p.Lease.Token, now)
			n, err = tag.RowsAffected(), e
		} else {
			// Not due before the delay ends.
			tag, e := s.pool.Exec(ctx, `UPDATE instance_locks l SET lock_token = $5, locked_until = $6, claims = 0,
					due_at = GREATEST(`+releaseDue(nextDue(""))+`, $6)
				WHERE tenant_id = $1 AND instance_id = $2 AND lock_token = $3 AND locked_until > $4`,
				p.Lease.TenantID, p.Lease.InstanceID, p.Lease.Token, now, uuid.NewString(), now+p.Delay.Milliseconds())
			n, err = tag.RowsAffected(), e
		}
		released = n == 1
		return err
	})
	if err != nil {
		return err
	}
	if !released {
		return leaseLost(p.Lease)
	}
	return nil
}
