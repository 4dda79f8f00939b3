package crdb

import (
	"context"
	"encoding/json"

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

// batchedStart is a start that no idle loop waits for (not eager), and its
// outcome: whether it created its instance, and when.
type batchedStart struct {
	p       *store.StartOrchestrationParams
	created bool
	now     int64
}

func newStartBatches(s *Store) *groupCommit[startKey, *batchedStart] {
	return &groupCommit[startKey, *batchedStart]{
		ids:  func(w *batchedStart) []string { return []string{w.p.InstanceID} },
		send: s.sendStarts,
	}
}

// startBatched starts p in its group's next batch (groupCommit).
func (s *Store) startBatched(ctx context.Context, p *store.StartOrchestrationParams) (bool, int64, error) {
	key := startKey{tenant: p.TenantID}
	if p.MaxRunning != nil {
		key.limited, key.maxRunning = true, *p.MaxRunning
	}
	w := &batchedStart{p: p}
	// A call whose ctx ended returns while its batch may still run and
	// write w: w is read only once the batch is done with it.
	if err := s.starts.do(ctx, key, w); err != nil {
		return false, 0, err
	}
	return w.created, w.now, nil
}

func (s *Store) sendStarts(ctx context.Context, key startKey, batch []*batchedStart) error {
	ps := make([]*store.StartOrchestrationParams, len(batch))
	for i, w := range batch {
		ps[i] = w.p
	}
	if s.onStartBatch != nil {
		s.onStartBatch(ps)
	}
	var maxRunning *int64
	if key.limited {
		maxRunning = &key.maxRunning
	}
	now := s.now()
	args, err := startArgs(key.tenant, maxRunning, now, ps)
	if err != nil {
		return err
	}
	created, err := s.sendBatch(ctx, "start", len(batch), sqlStartOrchestrations, args)
	for _, w := range batch {
		w.created, w.now = created[w.p.InstanceID], now
	}
	return err
}

// startArgs binds StartOrchestrations for starts of one tenant.
func startArgs(tenant string, maxRunning *int64, now int64, ps []*store.StartOrchestrationParams) (namedArgs, error) {
	n := len(ps)
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
	return namedArgs{"tenant_id": tenant, "now": now, "shard": countShard(), "max_running": maxRunning, "instance_ids": ids, "names": names, "versions": versions,
		"inputs": inputs, "tags": tags, "retentions": retentions, "kinds": kinds, "payloads": payloads,
		"trace_contexts": traces}, nil
}
