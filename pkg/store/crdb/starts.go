package crdb

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orchardhq/orchard/pkg/store"
)

var sqlStartOrchestrations = stmt("StartOrchestrations")

// startKey groups the starts one statement can carry: a tenant's, under one
// running-instance limit.
type startKey struct {
	tenant     string
	limited    bool
	maxRunning int64
}

// batchedStart is a start, with its first turn's ack when that turn ran
// before it and folds, and its outcome: whether it created its instance,
// and whether it wrote the first turn with it.
type batchedStart struct {
	p     *store.StartOrchestrationParams
	first *store.AckOrchestrationItemParams
	// at is when the start came: its instance's creation time.
	at              int64
	created, folded bool
}

func newStartBatches(s *Store) *groupCommit[startKey, *batchedStart] {
	return &groupCommit[startKey, *batchedStart]{
		ids:  func(w *batchedStart) []string { return []string{w.p.InstanceID} },
		send: s.sendStarts,
	}
}

// startBatched starts p, made at at, in its group's next batch
// (groupCommit), with first, its first turn's ack (nil: none). folded: the
// instance was created as first leaves it (first.Acked is set).
func (s *Store) startBatched(ctx context.Context, p *store.StartOrchestrationParams, at int64, first *store.AckOrchestrationItemParams) (created, folded bool, err error) {
	key := startKey{tenant: p.TenantID}
	if p.MaxRunning != nil {
		key.limited, key.maxRunning = true, *p.MaxRunning
	}
	w := &batchedStart{p: p, at: at, first: first}
	// A call whose ctx ended returns while its batch may still run and
	// write w: w is read only once the batch is done with it.
	if err := s.starts.do(ctx, key, w); err != nil {
		return false, false, err
	}
	return w.created, w.folded, nil
}

// sendStarts writes a batch of starts. A batch with first turns that the
// database refuses goes again without them (refusedBatch): a turn whose
// rows the database refuses fails neither its own start nor the others.
func (s *Store) sendStarts(ctx context.Context, key startKey, batch []*batchedStart) error {
	err := s.sendStartsOnce(ctx, key, batch, true)
	if refusedBatch(err) && slices.ContainsFunc(batch, func(w *batchedStart) bool { return w.first != nil }) {
		err = s.sendStartsOnce(ctx, key, batch, false)
	}
	return err
}

func (s *Store) sendStartsOnce(ctx context.Context, key startKey, batch []*batchedStart, firstTurns bool) error {
	ps := make([]*store.StartOrchestrationParams, len(batch))
	firsts := make([]*store.AckOrchestrationItemParams, len(batch))
	ats := make([]int64, len(batch))
	for i, w := range batch {
		ps[i], ats[i] = w.p, w.at
		if firstTurns {
			firsts[i] = w.first
		}
	}
	if s.onStartBatch != nil {
		s.onStartBatch(ps)
	}
	var maxRunning *int64
	if key.limited {
		maxRunning = &key.maxRunning
	}
	now := s.now()
	args, err := startArgs(key.tenant, maxRunning, now, ps, ats, firsts)
	if err != nil {
		return err
	}
	created, err := s.sendBatch(ctx, "start", len(batch), sqlStartOrchestrations, args)
	for i, w := range batch {
		w.created = created[w.p.InstanceID]
		w.folded = w.created && firsts[i] != nil
		if w.folded {
			w.first.Acked = &store.AckedInstance{UpdatedAt: fromMillis(now), ExecutionCount: 1, EventCount: int64(len(w.first.History))}
		}
	}
	return err
}

// folds says whether a start's first turn, run before its write, can go
// in the start's own statement (StartOrchestrations): its instance stays
// running (simpleTurn).
func folds(ack *store.AckOrchestrationItemParams, item *store.OrchestrationItem) bool {
	return simpleTurn(ack, item) && ack.Status == store.StatusRunning
}

// simpleTurn says whether a turn run before its write, on item, is one a
// write can carry in its own statement: on execution 1, it consumes only
// the item's message, appends events, and otherwise only schedules tasks
// and sets timers on its instance (no child, cancel, withdraw or
// continue-as-new).
func simpleTurn(ack *store.AckOrchestrationItemParams, item *store.OrchestrationItem) bool {
	if ack == nil || validateAck(ack) != nil || ack.Lease != item.Lease || ack.ExecutionID != 1 ||
		ack.ContinueAsNew != nil || len(ack.Children) > 0 || len(ack.CancelActivities) > 0 || len(ack.WithdrawMessages) > 0 ||
		len(ack.History) == 0 || len(ack.MessageIDs) != 1 || ack.MessageIDs[0] != item.Messages[0].ID {
		return false
	}
	for _, m := range ack.Messages {
		if m.InstanceID != item.Lease.InstanceID || m.ExecutionID != 1 {
			return false
		}
	}
	return true
}

// refusedBatch says whether a batch that carried turns is to go again
// without them: the database refused it (a turn's rows may be why), where
// a database out of reach, or conflicts past the retries, would fail the
// batch again.
func refusedBatch(err error) bool {
	var refused *pgconn.PgError
	return errors.As(err, &refused) && !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, store.ErrConflict)
}

// startArgs binds StartOrchestrations for starts of one tenant, made at
// ats, with the acks of their first turns to write (firsts, nil for none).
func startArgs(tenant string, maxRunning *int64, now int64, ps []*store.StartOrchestrationParams, ats []int64, firsts []*store.AckOrchestrationItemParams) (namedArgs, error) {
	n := len(ps)
	events, dues := make([]int64, n), make([]int64, n)
	var rows turnRows
	for i, a := range firsts {
		dues[i] = -1
		if a == nil {
			continue
		}
		events[i] = int64(len(a.History))
		rows.add(a)
		for _, m := range a.Messages {
			if d := m.Delay.Milliseconds(); dues[i] < 0 || d < dues[i] {
				dues[i] = d
			}
		}
	}
	ids, names, versions, kinds := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	tags, retentions, traces := make([]string, n), make([]string, n), make([]string, n)
	inputs, payloads := make([][]byte, n), make([][]byte, n)
	for i, p := range ps {
		ids[i], names[i], versions[i], kinds[i], traces[i] = p.InstanceID, p.Name, p.Version, p.Start.Kind, p.TraceContext
		inputs[i], payloads[i] = p.Input, p.Start.Payload
		t, err := json.Marshal(tagsOf(p.Tags))
		if err != nil {
			return nil, err
		}
		tags[i] = string(t)
		if p.Retention != nil {
			r, err := json.Marshal(p.Retention)
			if err != nil {
				return nil, err
			}
			retentions[i] = string(r)
		}
	}
	args := namedArgs{"tenant_id": tenant, "now": now, "shard": countShard(), "max_running": maxRunning, "instance_ids": ids, "names": names, "versions": versions,
		"inputs": inputs, "tags": tags, "retentions": retentions, "kinds": kinds, "payloads": payloads,
		"trace_contexts": traces, "created_ats": ats, "first_events": events, "first_due_delays": dues}
	return rows.eventArgs(rows.taskAndMessageArgs(args)), nil
}
