package crdb

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

var sqlAckWorkWithResults = stmt("AckWorkWithResults")

// batchedCompletion is a task's completion with a result that no idle loop
// waits for (not eager, or for a runner: eager), and its outcome: whether
// it deleted the task, and (eager) whether its runner got the instance.
type batchedCompletion struct {
	p     *store.AckWorkItemParams
	eager *store.EagerLease
	id    string // the task's id as the statement returns it (taskID)
	done  bool
	held  bool
}

func newCompletionBatches(s *Store) *groupCommit[string, *batchedCompletion] {
	return &groupCommit[string, *batchedCompletion]{
		ids:  func(w *batchedCompletion) []string { return []string{w.id} },
		send: s.sendCompletions,
	}
}

// completeBatched completes p's task in its tenant's next batch
// (groupCommit), which leases its instance for eager's runner (unless nil).
func (s *Store) completeBatched(ctx context.Context, p *store.AckWorkItemParams, eager *store.EagerLease) (bool, error) {
	w := &batchedCompletion{p: p, eager: eager, id: taskID(p.Lease.ID)}
	err := s.completions.do(ctx, p.Lease.TenantID, w)
	if err == nil && eager != nil {
		eager.Held = w.held
	}
	return w.done, err
}

func (s *Store) sendCompletions(ctx context.Context, tenant string, batch []*batchedCompletion) error {
	ps := make([]*store.AckWorkItemParams, len(batch))
	for i, w := range batch {
		ps[i] = w.p
	}
	if s.onCompletionBatch != nil {
		s.onCompletionBatch(ps)
	}
	now := s.now()
	args := completionArgs(tenant, now, ps)
	eager := make([]*store.EagerLease, len(batch))
	leasedIDs := []string{}
	for i, w := range batch {
		if w.eager != nil {
			eager[i] = w.eager
			leasedIDs = append(leasedIDs, w.p.Lease.ID)
		}
	}
	args["leased_ids"] = uuidArray(leasedIDs)
	// The tasks deleted, each with its instance; the instances leased.
	done := map[string]string{}
	unread := map[string]store.OrchestrationLease{}
	lease := batchLeaseOf(now, eager)
	err := s.sendBatch(ctx, "completion", len(batch), sqlAckWorkWithResults, args, lease, func(rows pgx.Rows) error {
		clear(done) // afresh at each attempt
		clear(unread)
		var task *string
		var instance string
		_, err := pgx.ForEachRow(rows, []any{&task, &instance}, func() error {
			if task == nil {
				unread[instance] = lease.lease(tenant, instance)
			} else {
				done[*task] = instance
			}
			return nil
		})
		return err
	})
	instances := make([]string, len(batch))
	for i, w := range batch {
		instances[i], w.done = done[w.id]
	}
	if err != nil {
		unread = nil // nothing committed
	}
	held := s.holdBatched(ctx, nil, unread, instances, eager)
	for i, w := range batch {
		w.held = held[i]
	}
	return err
}

// completionArgs binds AckWorkWithResults for completions (each with a
// result) of one tenant's tasks.
func completionArgs(tenant string, now int64, ps []*store.AckWorkItemParams) namedArgs {
	n := len(ps)
	ids, tokens, kinds, traces := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	payloads := make([][]byte, n)
	for i, p := range ps {
		ids[i], tokens[i], kinds[i], payloads[i], traces[i] = p.Lease.ID, p.Lease.Token, p.Result.Kind, p.Result.Payload, p.TraceContext
	}
	return namedArgs{"tenant_id": tenant, "now": now, "ids": uuidArray(ids), "tokens": uuidArray(tokens), "kinds": kinds, "payloads": payloads, "trace_contexts": traces}
}

// taskID is a task id (a UUID, in any of the forms PostgreSQL reads) in
// the form AckWorkWithResults returns it.
func taskID(id string) string {
	if u, err := uuid.Parse(id); err == nil {
		return u.String()
	}
	return id
}
