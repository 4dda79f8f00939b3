package crdb

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/orchardhq/orchard/pkg/store"
)

// AckOrchestrationItem commits one turn; see AckOrchestrationItems.
func (s *Store) AckOrchestrationItem(ctx context.Context, p *store.AckOrchestrationItemParams) error {
	errs, err := s.AckOrchestrationItems(ctx, &store.AckOrchestrationItemsParams{Turns: []*store.AckOrchestrationItemParams{p}})
	if err != nil {
		return err
	}
	return errs[0]
}

// AckOrchestrationItems commits turns in one transaction that travels in one
// round trip, with a handful of statements whatever the number of turns
// (each statement carries every turn's rows in arrays; sql/ack.sql). A
// turn's correctness rests on its lease and its instance row, not on the
// isolation level: the first statement pins both with writes, every
// statement writes only the rows of turns that held, and the last one
// releases the leases, updates the instances, consumes the messages, appends
// history, updates the executions, and reports which turns held. A turn
// whose lease was lost writes nothing.
//
// It runs READ COMMITTED: under SERIALIZABLE, PostgreSQL's predicate locks
// (taken on whole index pages) make concurrent turns of neighbouring
// instances abort each other constantly, though they share no row. A
// concurrent delete, which is SERIALIZABLE, conflicts with a turn's writes
// to its lease and instance rows, so one of the two waits and retries.
//
// Calls for the same tenants that come while one of theirs commits wait
// for it and go together in the next transaction (groupCommit): the loops
// of a busy dispatcher ack in turn, each commit carrying what came during
// the last.
func (s *Store) AckOrchestrationItems(ctx context.Context, p *store.AckOrchestrationItemsParams) ([]error, error) {
	results := make([]error, len(p.Turns))
	w := &batchedAck{}
	var tenants []string
	for i, t := range p.Turns {
		if err := validateAck(t); err != nil {
			return nil, err
		}
		if !validToken(t.Lease.Token) || !validToken(t.MessageIDs...) {
			results[i] = leaseLost(t.Lease)
			continue
		}
		w.turns = append(w.turns, t)
		w.at = append(w.at, i)
		tenants = append(tenants, t.Lease.TenantID)
	}
	if len(w.turns) == 0 {
		return results, nil
	}
	slices.Sort(tenants)
	if err := s.acks.do(ctx, strings.Join(slices.Compact(tenants), "\x00"), w); err != nil {
		return nil, err
	}
	if w.err != nil {
		return nil, w.err
	}
	for j, i := range w.at {
		results[i] = w.results[j]
	}
	return results, nil
}

// batchedAck is one AckOrchestrationItems call's valid turns (at: their
// places in the call) and their outcomes: each turn's, or err, the call's
// when its turns went on their own and failed (sendAcks).
type batchedAck struct {
	turns   []*store.AckOrchestrationItemParams
	at      []int
	results []error
	err     error
}

func newAckBatches(s *Store) *groupCommit[string, *batchedAck] {
	return &groupCommit[string, *batchedAck]{
		ids: func(w *batchedAck) []string {
			ids := make([]string, len(w.turns))
			for i, t := range w.turns {
				ids[i] = t.Lease.TenantID + "\x00" + t.Lease.InstanceID
			}
			return ids
		},
		send: s.sendAcks,
	}
}

// sendAcks commits the turns of a batch of calls in one transaction. When
// it fails and the batch joined several calls, each call's turns go again
// in a transaction of their own: a turn whose ack cannot commit fails its
// own call, not the others that came with it.
func (s *Store) sendAcks(ctx context.Context, _ string, batch []*batchedAck) error {
	var turns []*store.AckOrchestrationItemParams
	for _, w := range batch {
		turns = append(turns, w.turns...)
	}
	results, err := s.ackTurns(ctx, turns)
	switch {
	case err == nil:
		for _, w := range batch {
			w.results, results = results[:len(w.turns)], results[len(w.turns):]
		}
		return nil
	case len(batch) == 1:
		return err
	}
	for _, w := range batch {
		w.results, w.err = s.ackTurns(ctx, w.turns)
	}
	return nil
}

// ackTurns commits valid turns in one transaction; a turn that did not
// hold gets ErrLeaseLost.
func (s *Store) ackTurns(ctx context.Context, turns []*store.AckOrchestrationItemParams) ([]error, error) {
	if s.onAckBatch != nil {
		s.onAckBatch(turns)
	}
	s.batchWrites.Record(ctx, int64(len(turns)), metric.WithAttributes(attribute.String("kind", "ack")))
	byTenant := map[string][]int{}
	var tenants []string
	for i, t := range turns {
		if byTenant[t.Lease.TenantID] == nil {
			tenants = append(tenants, t.Lease.TenantID)
		}
		byTenant[t.Lease.TenantID] = append(byTenant[t.Lease.TenantID], i)
	}
	// Lease rows are locked in key order (see sql/ack.sql).
	slices.Sort(tenants)
	for _, idx := range byTenant {
		slices.SortStableFunc(idx, func(a, b int) int {
			return cmp.Compare(turns[a].Lease.InstanceID, turns[b].Lease.InstanceID)
		})
	}
	now := s.now()
	held := map[int]*store.AckedInstance{}
	// Statements each tenant's ack queues before its AckRelease, and after.
	before, after := make([]int, len(tenants)), make([]int, len(tenants))
	err := s.inBatchTx(ctx, pgx.ReadCommitted, func(b *pgx.Batch) {
		for n, tenant := range tenants {
			ts := make([]*store.AckOrchestrationItemParams, 0, len(byTenant[tenant]))
			for _, i := range byTenant[tenant] {
				ts = append(ts, turns[i])
			}
			before[n], after[n] = queueAck(b, tenant, ts, now)
		}
	}, func(br pgx.BatchResults) error {
		clear(held)
		for n, tenant := range tenants {
			ok, err := readAck(br, before[n], after[n])
			if err != nil {
				return err
			}
			for _, i := range byTenant[tenant] {
				held[i] = ok[turns[i].Lease.InstanceID]
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	results := make([]error, len(turns))
	for i, t := range turns {
		if t.Acked = held[i]; t.Acked == nil {
			results[i] = leaseLost(t.Lease)
		}
	}
	return results, nil
}

// readAck reads the results of what queueAck queued for one tenant: the
// instances whose turns held, with what their acks wrote.
func readAck(br pgx.BatchResults, before, after int) (map[string]*store.AckedInstance, error) {
	for range before {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	ok := map[string]*store.AckedInstance{}
	var id string
	var updatedAt int64
	var completedAt *int64
	var executions, events int64
	_, err = pgx.ForEachRow(rows, []any{&id, &updatedAt, &completedAt, &executions, &events}, func() error {
		ok[id] = &store.AckedInstance{UpdatedAt: fromMillis(updatedAt), CompletedAt: fromNullMillis(completedAt),
			ExecutionCount: executions, EventCount: events}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for range after {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	return ok, nil
}

func validateAck(p *store.AckOrchestrationItemParams) error {
	if p.Lease.TenantID == "" || p.Lease.InstanceID == "" || p.Lease.Token == "" {
		return invalid("the lease is incomplete")
	}
	if p.ExecutionID <= 0 {
		return invalid("execution id must be positive")
	}
	if !p.Status.Valid() {
		return invalid("unknown status %q", p.Status)
	}
	if (p.Status == store.StatusContinuedAsNew) != (p.ContinueAsNew != nil) {
		return invalid("continue-as-new needs status ContinuedAsNew and a next execution, together")
	}
	if p.ContinueAsNew != nil && p.ContinueAsNew.Start.Kind == "" {
		return invalid("the next execution's start message has no kind")
	}
	for _, ev := range p.History {
		if ev.EventID <= 0 || ev.Kind == "" {
			return invalid("history event %d has no id or no kind", ev.EventID)
		}
	}
	for _, m := range p.Messages {
		if m.InstanceID == "" || m.Message.Kind == "" || m.Delay < 0 {
			return invalid("outgoing message without instance id or kind, or with a negative delay")
		}
	}
	for _, m := range p.WithdrawMessages {
		if m.Kind == "" {
			return invalid("a withdrawn message has no kind")
		}
	}
	for _, c := range p.Children {
		if c.InstanceID == "" || c.Name == "" || c.Start.Kind == "" || c.IfTaken.Kind == "" {
			return invalid("child start needs an instance id, a name, a start message and an if-taken message")
		}
	}
	for _, a := range p.Activities {
		if a.Name == "" || a.TaskQueue == "" || a.ActivityID <= 0 || a.Delay < 0 {
			return invalid("activity task needs an id, a name and a task queue")
		}
		if err := checkTraceContext(a.TraceContext); err != nil {
			return err
		}
		if l := a.Lease; l != nil && (a.Delay != 0 || l.ExpiresAt.IsZero() || !validToken(l.ID, l.Token)) {
			return invalid("a task inserted leased needs no delay, an expiry, and a lease id and token that are UUIDs")
		}
	}
	return nil
}

var (
	sqlAckWake           = stmt("AckWake")
	sqlAckPin            = stmt("AckPin")
	sqlAckCancel         = stmt("AckCancel")
	sqlAckEnqueuePinning = stmt("AckEnqueuePinning")
	sqlAckEnqueue        = stmt("AckEnqueue")
	sqlAckChildren       = stmt("AckChildren")
	sqlAckRelease        = stmt("AckRelease")
	sqlAckDropEnded      = stmt("AckDropEnded")
)

// queueAck queues the statements of one tenant's turns (sql/ack.sql) and
// returns how many come before AckRelease, and after it: AckWake when the
// turns send to other instances; then, in this order, AckCancel, the
// enqueue and AckChildren for what the turns do, the first of them pinning
// the turns (AckPin goes first when only children are started); then
// AckRelease, and AckDropEnded when turns end their instances.
func queueAck(b *pgx.Batch, tenant string, turns []*store.AckOrchestrationItemParams, now int64) (before, after int) {
	type (
		cancelRow struct {
			instanceID              string
			executionID, activityID int64
		}
		withdrawRow struct {
			instanceID, kind string
			payload          []byte
		}
		nextRow struct {
			instanceID, kind string
			executionID      int64
			input, payload   []byte
		}
		childRow struct {
			parent                            string
			parentExecution                   int64
			instanceID, name, version, tags   string
			startKind, takenKind              string
			input, startPayload, takenPayload []byte
		}
		consumedRow struct{ instanceID, messageID string }
	)
	var (
		cancels   []cancelRow
		withdraws []withdrawRow
		rows      turnRows
		nexts     []nextRow
		children  []childRow
		consumed  []consumedRow
	)
	for _, t := range turns {
		id, exec := t.Lease.InstanceID, t.ExecutionID
		for _, a := range t.CancelActivities {
			cancels = append(cancels, cancelRow{id, exec, a})
		}
		for _, m := range t.WithdrawMessages {
			withdraws = append(withdraws, withdrawRow{id, m.Kind, m.Payload})
		}
		rows.add(t)
		if next := t.ContinueAsNew; next != nil {
			nexts = append(nexts, nextRow{instanceID: id, kind: next.Start.Kind, executionID: exec + 1,
				input: next.Input, payload: next.Start.Payload})
		}
		for _, c := range t.Children {
			tags, _ := json.Marshal(tagsOf(c.Tags))
			children = append(children, childRow{parent: id, parentExecution: exec, instanceID: c.InstanceID,
				name: c.Name, version: c.Version, tags: string(tags), startKind: c.Start.Kind, takenKind: c.IfTaken.Kind,
				input: c.Input, startPayload: c.Start.Payload, takenPayload: c.IfTaken.Payload})
		}
		for _, m := range t.MessageIDs {
			consumed = append(consumed, consumedRow{id, m})
		}
	}
	turnInstanceIDs := column(turns, func(t *store.AckOrchestrationItemParams) string { return t.Lease.InstanceID })
	turnTokens := uuidArray(column(turns, func(t *store.AckOrchestrationItemParams) string { return t.Lease.Token }))
	turnExecutionIDs := column(turns, func(t *store.AckOrchestrationItemParams) int64 { return t.ExecutionID })
	args := func(more namedArgs) namedArgs {
		more["tenant_id"], more["now"] = tenant, now
		more["turn_instance_ids"], more["turn_tokens"], more["turn_execution_ids"] = turnInstanceIDs, turnTokens, turnExecutionIDs
		return more
	}

	queued := 0
	if ids, delays, ok := wakeTargets(turns); ok {
		b.Queue(sqlAckWake, namedArgs{"tenant_id": tenant, "now": now, "wake_instance_ids": ids, "wake_delays": delays})
		queued++
	}
	enqueue := sqlAckEnqueuePinning
	switch {
	case len(cancels) > 0 || len(withdraws) > 0:
		b.Queue(sqlAckCancel, args(namedArgs{
			"cancel_instance_ids":   column(cancels, func(r cancelRow) string { return r.instanceID }),
			"cancel_execution_ids":  column(cancels, func(r cancelRow) int64 { return r.executionID }),
			"cancel_activity_ids":   column(cancels, func(r cancelRow) int64 { return r.activityID }),
			"withdraw_instance_ids": column(withdraws, func(r withdrawRow) string { return r.instanceID }),
			"withdraw_kinds":        column(withdraws, func(r withdrawRow) string { return r.kind }),
			"withdraw_payloads":     column(withdraws, func(r withdrawRow) []byte { return r.payload }),
		}))
		queued++
		enqueue = sqlAckEnqueue
	case len(rows.tasks) == 0 && len(rows.messages) == 0 && len(nexts) == 0 && len(children) > 0:
		b.Queue(sqlAckPin, args(namedArgs{}))
		queued++
	}
	if len(rows.tasks) > 0 || len(rows.messages) > 0 || len(nexts) > 0 {
		b.Queue(enqueue, args(rows.taskAndMessageArgs(namedArgs{
			"next_instance_ids":  column(nexts, func(r nextRow) string { return r.instanceID }),
			"next_execution_ids": column(nexts, func(r nextRow) int64 { return r.executionID }),
			"next_inputs":        column(nexts, func(r nextRow) []byte { return r.input }),
			"next_kinds":         column(nexts, func(r nextRow) string { return r.kind }),
			"next_payloads":      column(nexts, func(r nextRow) []byte { return r.payload }),
		})))
		queued++
	}
	if len(children) > 0 {
		b.Queue(sqlAckChildren, args(namedArgs{
			"child_parents":              column(children, func(r childRow) string { return r.parent }),
			"child_parent_execution_ids": column(children, func(r childRow) int64 { return r.parentExecution }),
			"child_instance_ids":         column(children, func(r childRow) string { return r.instanceID }),
			"child_names":                column(children, func(r childRow) string { return r.name }),
			"child_versions":             column(children, func(r childRow) string { return r.version }),
			"child_inputs":               column(children, func(r childRow) []byte { return r.input }),
			"child_tags":                 column(children, func(r childRow) string { return r.tags }),
			"child_start_kinds":          column(children, func(r childRow) string { return r.startKind }),
			"child_start_payloads":       column(children, func(r childRow) []byte { return r.startPayload }),
			"child_taken_kinds":          column(children, func(r childRow) string { return r.takenKind }),
			"child_taken_payloads":       column(children, func(r childRow) []byte { return r.takenPayload }),
			"shard":                      countShard(),
		}))
		queued++
	}

	// What each turn leaves its instance and execution: a continue-as-new
	// keeps the instance running on the next execution.
	type outcome struct {
		status, instanceStatus           store.Status
		completedAt, instanceCompletedAt *int64
		currentExecution, newExecutions  int64
	}
	outcomes := column(turns, func(t *store.AckOrchestrationItemParams) outcome {
		o := outcome{status: t.Status, instanceStatus: t.Status, currentExecution: t.ExecutionID}
		if t.Status != store.StatusRunning {
			o.completedAt = &now
		}
		if t.Status.Terminal() {
			o.instanceCompletedAt = &now
		}
		if t.ContinueAsNew != nil {
			o.instanceStatus, o.currentExecution, o.newExecutions = store.StatusRunning, t.ExecutionID+1, 1
		}
		return o
	})
	b.Queue(sqlAckRelease, args(rows.eventArgs(namedArgs{
		"turn_statuses":              column(outcomes, func(o outcome) string { return string(o.status) }),
		"turn_outputs":               column(turns, func(t *store.AckOrchestrationItemParams) []byte { return t.Output }),
		"turn_errors":                column(turns, func(t *store.AckOrchestrationItemParams) string { return t.Error }),
		"turn_completed_at":          column(outcomes, func(o outcome) *int64 { return o.completedAt }),
		"turn_events":                column(turns, func(t *store.AckOrchestrationItemParams) int64 { return int64(len(t.History)) }),
		"turn_instance_statuses":     column(outcomes, func(o outcome) string { return string(o.instanceStatus) }),
		"turn_instance_completed_at": column(outcomes, func(o outcome) *int64 { return o.instanceCompletedAt }),
		"turn_current_execution_ids": column(outcomes, func(o outcome) int64 { return o.currentExecution }),
		"turn_new_executions":        column(outcomes, func(o outcome) int64 { return o.newExecutions }),
		"consumed_instance_ids":      column(consumed, func(r consumedRow) string { return r.instanceID }),
		"consumed_message_ids":       uuidArray(column(consumed, func(r consumedRow) string { return r.messageID })),
		"shard":                      countShard(),
	})))
	var ended, endedTokens []string
	for _, t := range turns {
		if t.Status.Terminal() {
			ended, endedTokens = append(ended, t.Lease.InstanceID), append(endedTokens, t.Lease.Token)
		}
	}
	if len(ended) == 0 {
		return queued, 0
	}
	b.Queue(sqlAckDropEnded, namedArgs{"tenant_id": tenant, "now": now, "ended_instance_ids": ended, "ended_tokens": uuidArray(endedTokens)})
	return queued, 1
}

// turnRows are the rows that turns' acks add beside their instances:
// tasks, messages and history events (queueAck, and the first turns a
// start writes itself: startArgs).
type turnRows struct {
	tasks    []taskRow
	messages []messageRow
	events   []eventRow
}

type (
	taskRow struct {
		instanceID                              string
		executionID, activityID, attempt, delay int64
		name, taskQueue, traceContext           string
		input                                   []byte
		// id, leaseToken and leasedUntil: a task inserted leased
		// (ActivityTask.Lease); else a new id, no token, 0.
		id, leaseToken string
		leasedUntil    int64
	}
	messageRow struct {
		source, target, kind string
		executionID, delay   int64
		payload              []byte
	}
	eventRow struct {
		instanceID           string
		executionID, eventID int64
		kind                 string
		payload              []byte
	}
)

// add adds the rows of turn t.
func (r *turnRows) add(t *store.AckOrchestrationItemParams) {
	id, exec := t.Lease.InstanceID, t.ExecutionID
	for _, a := range t.Activities {
		row := taskRow{instanceID: id, executionID: exec, activityID: a.ActivityID,
			attempt: int64(max(a.Attempt, 1)), delay: a.Delay.Milliseconds(), name: a.Name, taskQueue: a.TaskQueue, input: a.Input,
			traceContext: a.TraceContext, id: uuid.NewString()}
		if l := a.Lease; l != nil {
			row.id, row.leaseToken, row.leasedUntil = l.ID, l.Token, l.ExpiresAt.UnixMilli()
		}
		r.tasks = append(r.tasks, row)
	}
	for _, m := range t.Messages {
		r.messages = append(r.messages, messageRow{source: id, target: m.InstanceID, kind: m.Message.Kind,
			executionID: m.ExecutionID, delay: m.Delay.Milliseconds(), payload: m.Message.Payload})
	}
	for _, ev := range t.History {
		r.events = append(r.events, eventRow{instanceID: id, executionID: exec, eventID: ev.EventID, kind: ev.Kind, payload: ev.Payload})
	}
}

// taskAndMessageArgs adds the task_ and message_ parameters to args.
func (r *turnRows) taskAndMessageArgs(args namedArgs) namedArgs {
	return r.messageArgs(r.taskArgs(args))
}

// taskArgs adds the task_ parameters to args.
func (r *turnRows) taskArgs(args namedArgs) namedArgs {
	tasks := r.tasks
	args["task_instance_ids"] = column(tasks, func(r taskRow) string { return r.instanceID })
	args["task_execution_ids"] = column(tasks, func(r taskRow) int64 { return r.executionID })
	args["task_activity_ids"] = column(tasks, func(r taskRow) int64 { return r.activityID })
	args["task_names"] = column(tasks, func(r taskRow) string { return r.name })
	args["task_queues"] = column(tasks, func(r taskRow) string { return r.taskQueue })
	args["task_inputs"] = column(tasks, func(r taskRow) []byte { return r.input })
	args["task_attempts"] = column(tasks, func(r taskRow) int64 { return r.attempt })
	args["task_delays"] = column(tasks, func(r taskRow) int64 { return r.delay })
	args["task_trace_contexts"] = column(tasks, func(r taskRow) string { return r.traceContext })
	args["task_ids"] = column(tasks, func(r taskRow) string { return r.id })
	args["task_lease_tokens"] = column(tasks, func(r taskRow) string { return r.leaseToken })
	args["task_leased_until"] = column(tasks, func(r taskRow) int64 { return r.leasedUntil })
	return args
}

// messageArgs adds the message_ parameters to args.
func (r *turnRows) messageArgs(args namedArgs) namedArgs {
	messages := r.messages
	args["message_sources"] = column(messages, func(r messageRow) string { return r.source })
	args["message_targets"] = column(messages, func(r messageRow) string { return r.target })
	args["message_execution_ids"] = column(messages, func(r messageRow) int64 { return r.executionID })
	args["message_kinds"] = column(messages, func(r messageRow) string { return r.kind })
	args["message_payloads"] = column(messages, func(r messageRow) []byte { return r.payload })
	args["message_delays"] = column(messages, func(r messageRow) int64 { return r.delay })
	return args
}

// eventArgs adds the event_ parameters to args.
func (r *turnRows) eventArgs(args namedArgs) namedArgs {
	events := r.events
	args["event_instance_ids"] = column(events, func(r eventRow) string { return r.instanceID })
	args["event_execution_ids"] = column(events, func(r eventRow) int64 { return r.executionID })
	args["event_ids"] = column(events, func(r eventRow) int64 { return r.eventID })
	args["event_kinds"] = column(events, func(r eventRow) string { return r.kind })
	args["event_payloads"] = column(events, func(r eventRow) []byte { return r.payload })
	return args
}

// wakeTargets lists the lease rows AckWake takes, in key order, with the
// delay of the earliest message the turns send to each (-1 for the turns'
// own rows); ok is false when the turns send only to themselves.
func wakeTargets(turns []*store.AckOrchestrationItemParams) (ids []string, delays []int64, ok bool) {
	due := make(map[string]int64, len(turns))
	for _, t := range turns {
		due[t.Lease.InstanceID] = -1
	}
	for _, t := range turns {
		for _, m := range t.Messages {
			if d, seen := due[m.InstanceID]; !seen || d > m.Delay.Milliseconds() {
				due[m.InstanceID], ok = m.Delay.Milliseconds(), true
			}
		}
	}
	if !ok {
		return nil, nil, false
	}
	ids = slices.Sorted(maps.Keys(due))
	delays = make([]int64, len(ids))
	for i, id := range ids {
		delays[i] = due[id]
	}
	return ids, delays, true
}
