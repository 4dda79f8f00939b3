package crdb

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"

	"github.com/jackc/pgx/v5"

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

// batchedStart is a start that no idle loop waits for (not eager, or for
// a runner: eager), and its outcome: whether it created its instance, and
// when, and (eager) whether its runner got the instance (holdBatched).
type batchedStart struct {
	p       *store.StartOrchestrationParams
	eager   *store.EagerLease
	created bool
	now     int64
	held    bool
}

func newStartBatches(s *Store) *groupCommit[startKey, *batchedStart] {
	return &groupCommit[startKey, *batchedStart]{
		ids:  func(w *batchedStart) []string { return []string{w.p.InstanceID} },
		send: s.sendStarts,
	}
}

// startBatched starts p in its group's next batch (groupCommit), which
// leases its instance for eager's runner (unless nil).
func (s *Store) startBatched(ctx context.Context, p *store.StartOrchestrationParams, eager *store.EagerLease) (bool, int64, error) {
	key := startKey{tenant: p.TenantID}
	if p.MaxRunning != nil {
		key.limited, key.maxRunning = true, *p.MaxRunning
	}
	w := &batchedStart{p: p, eager: eager}
	err := s.starts.do(ctx, key, w)
	if err == nil && eager != nil {
		eager.Held = w.held
	}
	return w.created, w.now, err
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
	eager, ids := make([]*store.EagerLease, len(batch)), make([]string, len(batch))
	leasedIDs := []string{}
	for i, w := range batch {
		ids[i] = w.p.InstanceID
		if w.eager != nil {
			eager[i] = w.eager
			leasedIDs = append(leasedIDs, w.p.InstanceID)
		}
	}
	args["leased_ids"] = leasedIDs
	// The instances created, each with its start message's id.
	created := map[string]string{}
	var policy []byte
	lease := batchLeaseOf(now, eager)
	err = s.sendBatch(ctx, "start", len(batch), sqlStartOrchestrations, args, lease, func(rows pgx.Rows) error {
		clear(created) // afresh at each attempt
		var id, message string
		_, err := pgx.ForEachRow(rows, []any{&id, &message, &policy}, func() error {
			created[id] = message
			return nil
		})
		return err
	})
	var leased map[string]*store.OrchestrationItem
	var unread map[string]store.OrchestrationLease
	if err == nil && lease != nil {
		leased, unread = startItems(key.tenant, lease, batch, created, policy)
	}
	held := s.holdBatched(ctx, leased, unread, ids, eager)
	for i, w := range batch {
		_, w.created = created[w.p.InstanceID]
		w.now, w.held = now, held[i]
	}
	return err
}

// startItems returns the items of the instances a batch of starts created
// and leased (the eager starts'), by instance id, as a claim's LeasedInputs
// would read them right after: created holds the id of each instance's
// start message, and policy is the tenant's retention policy, as the
// statement returned them. A policy that does not decode leaves the
// instances unread, to be read (and let go) as a claim's would be.
func startItems(tenant string, lease *batchLease, batch []*batchedStart, created map[string]string, policy []byte) (map[string]*store.OrchestrationItem, map[string]store.OrchestrationLease) {
	var rules store.RetentionPolicy
	if policy != nil && json.Unmarshal(policy, &rules) != nil {
		unread := map[string]store.OrchestrationLease{}
		for _, w := range batch {
			if _, ok := created[w.p.InstanceID]; ok && w.eager != nil {
				unread[w.p.InstanceID] = lease.lease(tenant, w.p.InstanceID)
			}
		}
		return nil, unread
	}
	at := fromMillis(lease.now)
	items := map[string]*store.OrchestrationItem{}
	for _, w := range batch {
		p := w.p
		message, ok := created[p.InstanceID]
		if w.eager == nil || !ok {
			continue
		}
		in := store.Instance{TenantID: tenant, InstanceID: p.InstanceID, Name: p.Name, Version: p.Version,
			Status: store.StatusRunning, CurrentExecutionID: 1, RootInstanceID: p.InstanceID, Input: bytes.Clone(p.Input),
			Tags: maps.Clone(tagsOf(p.Tags)), CreatedAt: at, UpdatedAt: at, ExecutionCount: 1}
		if p.Retention != nil {
			r := *p.Retention
			in.Retention = &r
		}
		items[p.InstanceID] = &store.OrchestrationItem{
			Lease:    lease.lease(tenant, p.InstanceID),
			Instance: in,
			Messages: []store.QueuedMessage{{ID: message, InstanceID: p.InstanceID, ExecutionID: 1,
				Message:   store.Message{Kind: p.Start.Kind, Payload: bytes.Clone(p.Start.Payload)},
				VisibleAt: at, CreatedAt: at, TraceContext: p.TraceContext}},
			Claims:    1,
			Retention: rules.For(p.Name, in.Retention),
		}
	}
	return items, nil
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
