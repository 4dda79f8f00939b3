package crdb

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

var (
	sqlStartOrchestration                = stmt("StartOrchestration")
	sqlStartRefusal                      = stmt("StartRefusal")
	sqlEnqueue                           = stmt("Enqueue")
	sqlGetInstance                       = stmt("GetInstance")
	sqlGetHistoryExecution               = stmt("GetHistoryExecution")
	sqlGetHistory                        = stmt("GetHistory")
	sqlClaimForTenant                    = stmt("ClaimForTenant")
	sqlClaimForAnyTenant                 = stmt("ClaimForAnyTenant")
	sqlLeasedInputs                      = stmt("LeasedInputs")
	sqlReleaseFailedClaim                = stmt("ReleaseFailedClaim")
	sqlFindZombieTenant                  = stmt("FindZombieTenant")
	sqlClaimZombie                       = stmt("ClaimZombie")
	sqlZombieMessages                    = stmt("ZombieMessages")
	sqlConsumeZombies                    = stmt("ConsumeZombies")
	sqlRenewOrchestrationLease           = stmt("RenewOrchestrationLease")
	sqlStrikeOrchestrationLease          = stmt("StrikeOrchestrationLease")
	sqlAbandonOrchestrationItem          = stmt("AbandonOrchestrationItem")
	sqlAbandonOrchestrationItemWithDelay = stmt("AbandonOrchestrationItemWithDelay")
)

// zombieWindow is how many of a tenant's oldest visible messages a fetch
// that found no work looks among for messages of instances that are gone.
const zombieWindow = 32

// StartOrchestration creates the instance, execution 1 and the start message
// in one statement (with the tenant's other starts that came meanwhile:
// startBatched), at READ COMMITTED: the statement is atomic at any level,
// and starts of distinct instances share only a status counter shard,
// whose increment (ON CONFLICT DO UPDATE) then waits for a concurrent one
// and adds to what it committed, where under SERIALIZABLE it would end in
// a serialization failure (docs/decisions/store-read-committed-runtime.md).
//
// A start with a turn to hold (Eager, First) runs its first turn before
// the statement. A turn that folds (folds) goes in the statement, which
// then creates the instance as the turn's ack leaves it, in place of the
// start message. An eager start's other turns lease the instance and
// commit with it on their own (heldBefore); a First's other turns are
// void, and a loop claims the instance.
func (s *Store) StartOrchestration(ctx context.Context, p *store.StartOrchestrationParams) (*store.StartOrchestrationResult, error) {
	if p.TenantID == "" || p.InstanceID == "" || p.Name == "" {
		return nil, invalid("tenant id, instance id and name are required")
	}
	if p.Start.Kind == "" {
		return nil, invalid("the start message has no kind")
	}
	if err := checkTraceContext(p.TraceContext); err != nil {
		return nil, err
	}
	if p.Retention != nil {
		if err := p.Retention.Validate(); err != nil {
			return nil, err
		}
	}
	now := s.now()
	e := p.Eager
	if e == nil {
		e = p.First
	}
	until, err := eagerLease(e, now)
	if err != nil {
		return nil, err
	}
	if e != nil {
		item := firstItem(p, e, uuid.NewString(), now, until)
		ack := e.Hold.Turn(ctx, item)
		switch {
		case folds(ack, item):
			created, folded, err := s.startBatched(ctx, p, now, ack)
			written(ctx, e, folded)
			if err != nil {
				return nil, err
			}
			return s.started(ctx, p, now, created)
		case p.Eager != nil:
			created, again, err := s.heldBefore(ctx, e, ack, func(b *pgx.Batch) {
				b.Queue(sqlStartOrchestration, namedArgs{
					"tenant_id": p.TenantID, "instance_id": p.InstanceID, "name": p.Name, "version": p.Version, "now": now,
					"input": p.Input, "tags": tagsOf(p.Tags), "kind": p.Start.Kind, "payload": p.Start.Payload,
					"message_id": item.Messages[0].ID, "trace_context": p.TraceContext, "retention": p.Retention,
					"shard": countShard(), "max_running": p.MaxRunning, "lease_token": e.Token, "leased_until": until})
			}, func(br pgx.BatchResults) (bool, bool, error) {
				tag, err := br.Exec()
				return tag.RowsAffected() == 1, tag.RowsAffected() == 1, err
			})
			if err != nil {
				return nil, err
			}
			if !again {
				return s.started(ctx, p, now, created)
			}
		default:
			written(ctx, e, false)
		}
	}
	created, _, err := s.startBatched(ctx, p, now, nil)
	if err != nil {
		return nil, err
	}
	return s.started(ctx, p, now, created)
}

// started answers a start made at now: created, or refused (startRefusal).
func (s *Store) started(ctx context.Context, p *store.StartOrchestrationParams, now int64, created bool) (*store.StartOrchestrationResult, error) {
	if !created {
		return nil, s.startRefusal(ctx, p)
	}
	return &store.StartOrchestrationResult{ExecutionID: 1, CreatedAt: fromMillis(now)}, nil
}

// firstItem is what LeasedInputs would read of the instance an eager start
// creates, leased under e's token until until, with its start message of
// id messageID: the item of its first turn, with no
// retention read (store.OrchestrationItem.RetentionUnread).
func firstItem(p *store.StartOrchestrationParams, e *store.EagerLease, messageID string, now, until int64) *store.OrchestrationItem {
	at := fromMillis(now)
	return &store.OrchestrationItem{
		Lease: store.OrchestrationLease{TenantID: p.TenantID, InstanceID: p.InstanceID, Token: e.Token, ExpiresAt: fromMillis(until)},
		Instance: store.Instance{TenantID: p.TenantID, InstanceID: p.InstanceID, Name: p.Name, Version: p.Version,
			Status: store.StatusRunning, CurrentExecutionID: 1, RootInstanceID: p.InstanceID, Input: p.Input,
			Tags: tagsOf(p.Tags), Retention: p.Retention, CreatedAt: at, UpdatedAt: at, ExecutionCount: 1},
		Messages: []store.QueuedMessage{{ID: messageID, InstanceID: p.InstanceID, ExecutionID: 1, Message: p.Start,
			VisibleAt: at, CreatedAt: at, TraceContext: p.TraceContext}},
		Claims: 1, RetentionUnread: true,
	}
}

// startRefusal says why a start created nothing: its id is taken, else the
// tenant had MaxRunning running instances.
func (s *Store) startRefusal(ctx context.Context, p *store.StartOrchestrationParams) error {
	var taken bool
	err := s.retry(ctx, func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, sqlStartRefusal, namedArgs{"tenant_id": p.TenantID, "instance_id": p.InstanceID}).Scan(&taken)
	})
	switch {
	case err != nil:
		return err
	case taken || p.MaxRunning == nil:
		return fmt.Errorf("instance %q: %w", p.InstanceID, store.ErrAlreadyExists)
	default:
		return fmt.Errorf("%w (the limit is %d)", store.ErrTooManyRunning, *p.MaxRunning)
	}
}

func tagsOf(tags map[string]string) map[string]string {
	if tags == nil {
		return map[string]string{}
	}
	return tags
}

// Enqueue adds a message to an existing instance's queue.
func (s *Store) Enqueue(ctx context.Context, p *store.EnqueueParams) (*store.EnqueueResult, error) {
	if p.TenantID == "" || p.InstanceID == "" || p.Message.Kind == "" {
		return nil, invalid("tenant id, instance id and message kind are required")
	}
	if p.Delay < 0 {
		return nil, invalid("negative delay %s", p.Delay)
	}
	if err := checkTraceContext(p.TraceContext); err != nil {
		return nil, err
	}
	now := s.now()
	var id, status string
	// READ COMMITTED: under SERIALIZABLE, the write to the lease row would
	// fail whenever a claim or a turn of the instance updated the row since
	// the enqueue began. The statement is atomic at any level.
	err := s.inBatchTx(ctx, pgx.ReadCommitted, func(b *pgx.Batch) {
		b.Queue(sqlEnqueue, namedArgs{"tenant_id": p.TenantID, "instance_id": p.InstanceID,
			"execution_id": p.ExecutionID, "kind": p.Message.Kind, "payload": p.Message.Payload, "trace_context": p.TraceContext,
			"visible_at": now + p.Delay.Milliseconds(), "now": now})
	}, func(br pgx.BatchResults) error {
		id, status = "", ""
		var msgID *string
		err := br.QueryRow().Scan(&status, &msgID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if msgID != nil {
			id = *msgID
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	switch {
	case status == "":
		return nil, fmt.Errorf("instance %q: %w", p.InstanceID, store.ErrNotFound)
	case id == "":
		return nil, fmt.Errorf("instance %q is %s: %w", p.InstanceID, status, store.ErrInstanceTerminal)
	}
	return &store.EnqueueResult{MessageID: id}, nil
}

// scanInstance reads the columns of GetInstance (instanceColumns in
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
		in, err = scanInstance(p.TenantID, s.pool.QueryRow(ctx, sqlGetInstance,
			namedArgs{"tenant_id": p.TenantID, "instance_id": p.InstanceID}), &retention)
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
		b.Queue(sqlGetHistoryExecution, namedArgs{
			"tenant_id": p.TenantID, "instance_id": p.InstanceID, "execution_id": p.ExecutionID})
		b.Queue(sqlGetHistory, namedArgs{"tenant_id": p.TenantID, "instance_id": p.InstanceID,
			"execution_id": p.ExecutionID, "after_event_id": p.AfterEventID, "limit": limit})
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

// noneDue is the due_at of an instance with no message (the due_at rules
// are in sql/runtime.sql and sql/ack.sql).
const noneDue = "9223372036854775807"

// MaxFetchBatch bounds what one fetch leases: instances, or activity tasks.
const MaxFetchBatch = 100

// fetchMax is the number of items a fetch asking for max leases at most:
// 1 when 0, and within MaxFetchBatch.
func fetchMax(max int) (int, error) {
	switch {
	case max == 0:
		return 1, nil
	case max < 0 || max > MaxFetchBatch:
		return 0, invalid("max must be between 1 and %d, got %d", MaxFetchBatch, max)
	}
	return max, nil
}

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
	max, err := fetchMax(p.Max)
	if err != nil {
		return nil, err
	}
	// A few rounds: a round ends early when the claim finds only zombie
	// messages, or messages consumed under its nose. A look for zombie
	// messages (those of instances that are gone or ended, which no claim
	// takes: they have no lease row) comes before the claim, so that they
	// go under sustained load too, when every claim finds work; while it
	// finds some and the claim finds no work, the next round looks again.
	look := !p.SkipZombies
	for range 8 {
		if look {
			consumed, err := s.consumeZombieMessages(ctx, p.TenantID, p.LeaseDuration)
			if err != nil {
				return nil, err
			}
			look = consumed
		}
		items, again, err := s.fetchOnce(ctx, &p.FetchOrchestrationItemParams, max)
		if err != nil {
			return nil, err
		}
		if len(items) > 0 || !(again || look) {
			return items, nil
		}
	}
	return nil, nil
}

// consumeZombieMessages consumes the visible messages of one instance that
// has no lease row (it no longer exists, or has ended), for a tenant (any
// tenant when empty), and reports whether it found one.
func (s *Store) consumeZombieMessages(ctx context.Context, tenantID string, leaseDuration time.Duration) (bool, error) {
	now := s.now()
	if tenantID == "" {
		err := s.retry(ctx, func(ctx context.Context) error {
			err := s.pool.QueryRow(ctx, sqlFindZombieTenant, namedArgs{"now": now}).Scan(&tenantID)
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
		b.Queue(sqlClaimZombie, namedArgs{"tenant_id": tenantID, "token": token,
			"until": now + leaseDuration.Milliseconds(), "now": now, "window": zombieWindow})
		b.Queue(sqlZombieMessages, namedArgs{"tenant_id": tenantID, "token": token, "now": now,
			"max_messages": s.opts.MaxMessagesPerTurn})
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

// fetchOnce claims instances and reads their turns' inputs in one round
// trip, as one READ COMMITTED transaction. The claim is a compare-and-set on
// instance_leases, correct at any isolation level; under SERIALIZABLE on
// PostgreSQL, claims and acks would abort each other on predicate locks of
// the queue's index pages for no gain. (CockroachDB runs it SERIALIZABLE
// unless read committed is enabled on the cluster, and is just as correct.)
// The leases of one fetch share a token; each names its instance.
func (s *Store) fetchOnce(ctx context.Context, p *store.FetchOrchestrationItemParams, max int) (items []*store.OrchestrationItem, again bool, err error) {
	now := s.now()
	token := uuid.NewString()
	until := now + p.LeaseDuration.Milliseconds()
	var leased leasedInputs
	err = s.inBatchTx(ctx, pgx.ReadCommitted, func(b *pgx.Batch) {
		claim := namedArgs{"now": now, "token": token, "until": until, "max": max}
		if p.TenantID != "" {
			claim["tenant_id"] = p.TenantID
			b.Queue(sqlClaimForTenant, claim)
		} else {
			s.mu.Lock()
			claim["after"] = s.orchestratorTurn
			s.mu.Unlock()
			b.Queue(sqlClaimForAnyTenant, claim)
		}
		s.queueLeasedInputs(b, token, now)
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		return leased.read(br)
	})
	if err != nil {
		s.releaseFailedClaim(ctx, token)
		return nil, false, err
	}
	if len(leased.claimed) > 0 && p.TenantID == "" {
		s.mu.Lock()
		s.orchestratorTurn = leased.claimed[0].TenantID
		s.mu.Unlock()
	}
	return s.leasedItems(ctx, &leased, token, until)
}

// releaseFailedClaim lets go of the leases a transaction that leased
// instances (a fetch, an eager start or completion) may hold when it
// failed: COMMIT travels with the statements, so a failure while reading
// the results (a cancelled context, a row that will not scan) may come
// after the leases committed, and the instances would be blocked until
// they expire. Due now: whoever claims them next sorts out what they hold.
func (s *Store) releaseFailedClaim(ctx context.Context, token string) {
	_, _ = s.pool.Exec(context.WithoutCancel(ctx), sqlReleaseFailedClaim, namedArgs{"token": token})
}

// queueLeasedInputs queues the read of what the turns of the instances
// leased under token need, after the statement that leased them.
func (s *Store) queueLeasedInputs(b *pgx.Batch, token string, now int64) {
	b.Queue(sqlLeasedInputs, namedArgs{"token": token, "now": now, "max_messages": s.opts.MaxMessagesPerTurn})
}

// leasedInputs is what LeasedInputs read of the instances leased under one
// token.
type leasedInputs struct {
	claimed  []store.Instance // InstanceID and TenantID always set; Name empty for a zombie
	history  map[string][]store.HistoryEvent
	messages map[string][]store.QueuedMessage
	// claimCounts and strikes: the claims and strikes columns of each
	// lease row after the claim.
	claimCounts, strikes map[string]int64
	// retention: what governs each instance, from its tenant's policy
	// (decoded from policyJSON) and its own override.
	retention    map[string]store.Retention
	policyJSON   []byte
	tenantPolicy store.RetentionPolicy
}

// read reads LeasedInputs' rows; it starts afresh, for a retried batch.
func (r *leasedInputs) read(br pgx.BatchResults) error {
	*r = leasedInputs{history: map[string][]store.HistoryEvent{}, messages: map[string][]store.QueuedMessage{},
		claimCounts: map[string]int64{}, strikes: map[string]int64{}, retention: map[string]store.Retention{}}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var in store.Instance
		var exists bool
		var claims, struck int64
		var status, name, version, root *string
		var execID, createdAt, updatedAt, execCount, eventCount, completedAt *int64
		var policy []byte
		var h struct {
			ids, created []int64
			kinds        []string
			payloads     [][]byte
		}
		var m struct {
			ids, kinds, traces           []string
			executions, visible, created []int64
			payloads                     [][]byte
		}
		if err := rows.Scan(&in.TenantID, &in.InstanceID, &claims, &struck, &exists, &name, &version, &status, &execID,
			&in.ParentInstanceID, &root, &in.Input, &in.Output, &in.Error,
			&in.Tags, &createdAt, &updatedAt, &completedAt, &execCount, &eventCount, &in.Retention, &policy,
			&h.ids, &h.kinds, &h.payloads, &h.created,
			&m.ids, &m.executions, &m.kinds, &m.payloads, &m.visible, &m.created, &m.traces); err != nil {
			return err
		}
		if exists {
			in.Name, in.Version, in.Status = *name, *version, store.Status(*status)
			in.CurrentExecutionID, in.RootInstanceID = *execID, *root
			in.CreatedAt, in.UpdatedAt = fromMillis(*createdAt), fromMillis(*updatedAt)
			in.CompletedAt = fromNullMillis(completedAt)
			in.ExecutionCount, in.EventCount = *execCount, *eventCount
			if !bytes.Equal(policy, r.policyJSON) {
				// The leases of one fetch are one tenant's: decoded once.
				r.policyJSON, r.tenantPolicy = policy, store.RetentionPolicy{}
				if err := json.Unmarshal(policy, &r.tenantPolicy); err != nil {
					return fmt.Errorf("tenant %q: stored retention policy: %w", in.TenantID, err)
				}
			}
			r.retention[in.InstanceID] = r.tenantPolicy.For(in.Name, in.Retention)
		}
		r.claimed = append(r.claimed, in)
		r.claimCounts[in.InstanceID], r.strikes[in.InstanceID] = claims, struck
		for i, id := range h.ids {
			r.history[in.InstanceID] = append(r.history[in.InstanceID], store.HistoryEvent{
				EventID: id, Kind: h.kinds[i], Payload: h.payloads[i], CreatedAt: fromMillis(h.created[i])})
		}
		for i, id := range m.ids {
			r.messages[in.InstanceID] = append(r.messages[in.InstanceID], store.QueuedMessage{
				ID: id, InstanceID: in.InstanceID, ExecutionID: m.executions[i],
				Message:   store.Message{Kind: m.kinds[i], Payload: m.payloads[i]},
				VisibleAt: fromMillis(m.visible[i]), CreatedAt: fromMillis(m.created[i]), TraceContext: m.traces[i]})
		}
	}
	return rows.Err()
}

// leasedItems makes the items of the instances leased under token until
// until, after their commit. It consumes the messages of instances that
// are gone and lets go of instances whose messages another dispatcher
// consumed meanwhile, and then reports again: the caller may look for
// other work.
func (s *Store) leasedItems(ctx context.Context, r *leasedInputs, token string, until int64) (items []*store.OrchestrationItem, again bool, err error) {
	for _, in := range r.claimed {
		lease := store.OrchestrationLease{TenantID: in.TenantID, InstanceID: in.InstanceID, Token: token, ExpiresAt: fromMillis(until)}
		msgs := r.messages[in.InstanceID]
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
			h := r.history[in.InstanceID]
			slices.SortFunc(h, func(a, b store.HistoryEvent) int { return cmp.Compare(a.EventID, b.EventID) })
			slices.SortStableFunc(msgs, func(a, b store.QueuedMessage) int {
				return cmp.Or(a.VisibleAt.Compare(b.VisibleAt), a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
			})
			items = append(items, &store.OrchestrationItem{Lease: lease, Instance: in, History: h, Messages: msgs,
				Claims: r.claimCounts[in.InstanceID], Strikes: r.strikes[in.InstanceID], Retention: r.retention[in.InstanceID]})
		}
	}
	return items, again, nil
}

// eagerLease checks an EagerLease and returns its end (milliseconds; 0
// for none).
func eagerLease(e *store.EagerLease, now int64) (int64, error) {
	if e == nil {
		return 0, nil
	}
	e.Held = false
	if e.Duration <= 0 || !validToken(e.Token) || e.Hold == nil {
		return 0, invalid("an eager lease needs a positive duration, a token that is a UUID, and a turn to hold")
	}
	return now + e.Duration.Milliseconds(), nil
}

// consumeZombies deletes the messages of an instance that does not exist
// (it was deleted, or never was) or has ended, and releases the lease taken
// on it.
func (s *Store) consumeZombies(ctx context.Context, lease store.OrchestrationLease, messages []store.QueuedMessage) error {
	ids := make([]string, len(messages))
	for i, m := range messages {
		ids[i] = m.ID
		s.log.InfoContext(ctx, "consumed a message for an instance that does not exist or has ended",
			"tenant_id", lease.TenantID, "instance_id", lease.InstanceID, "message_id", m.ID, "kind", m.Kind)
	}
	return s.retry(ctx, func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, sqlConsumeZombies, namedArgs{
			"tenant_id": lease.TenantID, "instance_id": lease.InstanceID, "ids": uuidArray(ids), "token": lease.Token})
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
		tag, err := s.pool.Exec(ctx, sqlRenewOrchestrationLease, namedArgs{
			"tenant_id": p.Lease.TenantID, "instance_id": p.Lease.InstanceID, "token": p.Lease.Token, "now": now, "until": until})
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

// StrikeOrchestrationLease counts, under a live lease, a turn about to run
// alone after the instance's lease lapsed.
func (s *Store) StrikeOrchestrationLease(ctx context.Context, lease store.OrchestrationLease) (int64, error) {
	if !validToken(lease.Token) {
		return 0, leaseLost(lease)
	}
	now := s.now()
	var strikes int64
	err := s.retry(ctx, func(ctx context.Context) error {
		err := s.pool.QueryRow(ctx, sqlStrikeOrchestrationLease, namedArgs{
			"tenant_id": lease.TenantID, "instance_id": lease.InstanceID, "token": lease.Token, "now": now}).Scan(&strikes)
		if errors.Is(err, pgx.ErrNoRows) {
			strikes = -1
			return nil
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	if strikes < 0 {
		return 0, leaseLost(lease)
	}
	return strikes, nil
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
		lease := namedArgs{"tenant_id": p.Lease.TenantID, "instance_id": p.Lease.InstanceID, "token": p.Lease.Token, "now": now}
		q := sqlAbandonOrchestrationItem
		if p.Delay > 0 {
			q = sqlAbandonOrchestrationItemWithDelay
			lease["new_token"], lease["until"] = uuid.NewString(), now+p.Delay.Milliseconds()
		}
		tag, err := s.pool.Exec(ctx, q, lease)
		released = tag.RowsAffected() == 1
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
