package crdb

import (
	"context"

	"github.com/google/uuid"

	"github.com/orchardhq/orchard/pkg/store"
)

var sqlAckWorkWithResults = stmt("AckWorkWithResults")

// batchedCompletion is a task's completion with a result that no idle loop
// waits for (not eager), and its outcome: whether it deleted the task.
type batchedCompletion struct {
	p    *store.AckWorkItemParams
	id   string // the task's id as the statement returns it (taskID)
	done bool
}

func newCompletionBatches(s *Store) *groupCommit[string, *batchedCompletion] {
	return &groupCommit[string, *batchedCompletion]{
		ids:  func(w *batchedCompletion) []string { return []string{w.id} },
		send: s.sendCompletions,
	}
}

// completeBatched completes p's task in its tenant's next batch
// (groupCommit).
func (s *Store) completeBatched(ctx context.Context, p *store.AckWorkItemParams) (bool, error) {
	w := &batchedCompletion{p: p, id: taskID(p.Lease.ID)}
	// As in startBatched, w is read only once its batch is done with it.
	if err := s.completions.do(ctx, p.Lease.TenantID, w); err != nil {
		return false, err
	}
	return w.done, nil
}

func (s *Store) sendCompletions(ctx context.Context, tenant string, batch []*batchedCompletion) error {
	ps := make([]*store.AckWorkItemParams, len(batch))
	for i, w := range batch {
		ps[i] = w.p
	}
	if s.onCompletionBatch != nil {
		s.onCompletionBatch(ps)
	}
	done, err := s.sendBatch(ctx, "completion", len(batch), sqlAckWorkWithResults, completionArgs(tenant, s.now(), ps))
	for _, w := range batch {
		w.done = done[w.id]
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
