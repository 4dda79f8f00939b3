package crdb

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/google/uuid"

	"github.com/orchardhq/orchard/pkg/store"
)

var (
	sqlAckWorkWithResults = stmt("AckWorkWithResults")
	sqlAckWorkFolded      = stmt("AckWorkFolded")
)

// batchedCompletion is a task's completion with a result that no idle loop
// waits for (not eager), with its instance's next turn when that ran
// before it and folds (next, on item), and its outcome: whether it
// deleted the task, and whether it wrote the turn in place of the result.
type batchedCompletion struct {
	p            *store.AckWorkItemParams
	id           string // the task's id as the statement returns it (taskID)
	item         *store.OrchestrationItem
	next         *store.AckOrchestrationItemParams
	done, folded bool
}

func newCompletionBatches(s *Store) *groupCommit[string, *batchedCompletion] {
	return &groupCommit[string, *batchedCompletion]{
		ids:  func(w *batchedCompletion) []string { return []string{w.id} },
		send: s.sendCompletions,
	}
}

// completeBatched completes p's task in its tenant's next batch
// (groupCommit), with next, the ack of its instance's next turn run on
// item (nil: none). folded: the turn was written in place of the result
// (next.Acked is set).
func (s *Store) completeBatched(ctx context.Context, p *store.AckWorkItemParams, item *store.OrchestrationItem,
	next *store.AckOrchestrationItemParams) (done, folded bool, err error) {
	w := &batchedCompletion{p: p, id: taskID(p.Lease.ID), item: item, next: next}
	// As in startBatched, w is read only once its batch is done with it.
	if err := s.completions.do(ctx, p.Lease.TenantID, w); err != nil {
		return false, false, err
	}
	return w.done, w.folded, nil
}

// sendCompletions writes a batch of completions. When the database
// refuses a batch with turns to write, it is sent again without them
// (see sendStarts).
func (s *Store) sendCompletions(ctx context.Context, tenant string, batch []*batchedCompletion) error {
	err := s.sendCompletionsOnce(ctx, tenant, batch, true)
	if refusedBatch(err) && slices.ContainsFunc(batch, func(w *batchedCompletion) bool { return w.next != nil }) {
		err = s.sendCompletionsOnce(ctx, tenant, batch, false)
	}
	return err
}

func (s *Store) sendCompletionsOnce(ctx context.Context, tenant string, batch []*batchedCompletion, turns bool) error {
	ps := make([]*store.AckWorkItemParams, len(batch))
	for i, w := range batch {
		ps[i] = w.p
		w.done, w.folded = false, false
	}
	if s.onCompletionBatch != nil {
		s.onCompletionBatch(ps)
	}
	now := s.now()
	args := completionArgs(tenant, now, batch, turns)
	s.batchWrites.Record(ctx, int64(len(batch)), metric.WithAttributes(attribute.String("kind", "completion")))
	// Turns that end their instances or schedule tasks need a second
	// statement (AckWorkFolded), in the same round trip.
	var more namedArgs
	for _, w := range batch {
		if a := w.next; turns && a != nil && (a.Status != store.StatusRunning || len(a.Activities) > 0) {
			more = foldedArgs(tenant, now, batch)
			break
		}
	}
	return s.inBatchTx(ctx, pgx.ReadCommitted, func(b *pgx.Batch) {
		b.Queue(sqlAckWorkWithResults, args)
		if more != nil {
			b.Queue(sqlAckWorkFolded, more)
		}
	}, func(br pgx.BatchResults) error {
		done, folded, err := readCompleted(br.Query())
		if err != nil {
			return err
		}
		if more != nil {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		for _, w := range batch {
			w.done, w.folded = done[w.id], folded[w.id]
			if w.folded {
				w.next.Acked = &store.AckedInstance{UpdatedAt: fromMillis(now), ExecutionCount: 1,
					EventCount: w.item.Instance.EventCount + int64(len(w.next.History))}
				if w.next.Status != store.StatusRunning {
					w.next.Acked.CompletedAt = fromMillis(now)
				}
			}
		}
		return nil
	})
}

// foldedArgs binds AckWorkFolded for the turns of a batch of completions.
func foldedArgs(tenant string, now int64, batch []*batchedCompletion) namedArgs {
	var ids, tokens []string
	var ended []bool
	var rows turnRows
	for _, w := range batch {
		if a := w.next; a != nil {
			ids, tokens, ended = append(ids, a.Lease.InstanceID), append(tokens, a.Lease.Token), append(ended, a.Status != store.StatusRunning)
			rows.add(&store.AckOrchestrationItemParams{Lease: a.Lease, ExecutionID: a.ExecutionID, Activities: a.Activities})
		}
	}
	return rows.taskArgs(namedArgs{"tenant_id": tenant, "now": now, "fold_instance_ids": ids, "fold_tokens": uuidArray(tokens),
		"fold_ended": ended})
}

// readCompleted reads AckWorkWithResults: the tasks it deleted, and those
// whose turn it wrote.
func readCompleted(rows pgx.Rows, err error) (done, folded map[string]bool, _ error) {
	if err != nil {
		return nil, nil, err
	}
	done, folded = map[string]bool{}, map[string]bool{}
	var id string
	var fold bool
	_, err = pgx.ForEachRow(rows, []any{&id, &fold}, func() error {
		done[id], folded[id] = true, fold
		return nil
	})
	return done, folded, err
}

// foldsNext says whether a completion's turn, run before its write on its
// instance's first execution, can be written in place of its result
// (AckWorkWithResults): a simpleTurn that keeps the instance running, or
// one that ends it (Completed, Failed) with nothing more.
func foldsNext(ack *store.AckOrchestrationItemParams, item *store.OrchestrationItem) bool {
	if in := item.Instance; !simpleTurn(ack, item) || in.ExecutionCount != 1 || in.CurrentExecutionID != 1 {
		return false
	}
	switch ack.Status {
	case store.StatusRunning:
		return true
	case store.StatusCompleted, store.StatusFailed:
		return len(ack.Activities) == 0 && len(ack.Messages) == 0
	}
	return false
}

// completionArgs binds AckWorkWithResults for completions (each with a
// result) of one tenant's tasks, with their turns when turns is set.
func completionArgs(tenant string, now int64, batch []*batchedCompletion, turns bool) namedArgs {
	n := len(batch)
	ids, tokens, kinds, traces := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	payloads := make([][]byte, n)
	fold := make([]bool, n)
	executions, events, updated, newEvents, dues := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	statuses, errs, outputs, foldTokens := make([]string, n), make([]string, n), make([][]byte, n), make([]string, n)
	expected := make([]string, n)
	var rows turnRows
	foldInstances := []string{}
	for i, w := range batch {
		p := w.p
		ids[i], tokens[i], kinds[i], payloads[i], traces[i] = p.Lease.ID, p.Lease.Token, p.Result.Kind, p.Result.Payload, p.TraceContext
		dues[i] = -1
		if !turns || w.next == nil {
			continue
		}
		a, in := w.next, w.item.Instance
		fold[i], executions[i], events[i], updated[i] = true, in.CurrentExecutionID, in.EventCount, in.UpdatedAt.UnixMilli()
		statuses[i], outputs[i], errs[i], newEvents[i] = string(a.Status), a.Output, a.Error, int64(len(a.History))
		foldTokens[i], foldInstances = a.Lease.Token, append(foldInstances, a.Lease.InstanceID)
		expected[i] = in.InstanceID
		for _, m := range a.Messages {
			if d := m.Delay.Milliseconds(); dues[i] < 0 || d < dues[i] {
				dues[i] = d
			}
		}
		// Tasks go in AckWorkFolded, once the turn is known written.
		rows.add(&store.AckOrchestrationItemParams{Lease: a.Lease, ExecutionID: a.ExecutionID, History: a.History, Messages: a.Messages})
	}
	args := namedArgs{"tenant_id": tenant, "now": now, "shard": countShard(), "ids": uuidArray(ids), "tokens": uuidArray(tokens),
		"kinds": kinds, "payloads": payloads, "trace_contexts": traces,
		"folds": fold, "fold_execution_ids": executions, "fold_events": events, "fold_updated_ats": updated,
		"fold_statuses": statuses, "fold_outputs": outputs, "fold_errors": errs, "fold_new_events": newEvents, "fold_due_delays": dues,
		"fold_tokens": uuidArray(foldTokens), "fold_instance_ids": foldInstances,
		"fold_instances": expected}
	return rows.eventArgs(rows.messageArgs(args))
}

// taskID is a task id (a UUID, in any of the forms PostgreSQL reads) in
// the form AckWorkWithResults returns it.
func taskID(id string) string {
	if u, err := uuid.Parse(id); err == nil {
		return u.String()
	}
	return id
}
