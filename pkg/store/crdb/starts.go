package crdb

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orchardhq/orchard/pkg/store"
)

var sqlStartOrchestrations = stmt("StartOrchestrations")

// startBatches groups the starts that no idle loop waits for (those that
// are not eager) by tenant and running-instance limit, and sends each
// group's starts in one statement and one commit: group commit, with no
// wait of its own. A start that finds its group idle is sent at once, with
// whatever joined it meanwhile; one that comes while its group's statement
// runs waits for that statement and goes in the next, with every start that
// came in between. So one start alone costs what it did, and under load
// (completions come in the dispatcher's batches, and their clients start
// again together) a statement carries several.
type startBatches struct {
	mu     sync.Mutex
	groups map[startGroupKey]*startGroup
}

type startGroupKey struct {
	tenant     string
	limited    bool
	maxRunning int64
}

type startGroup struct {
	pending []*pendingStart
	busy    bool
}

type pendingStart struct {
	ctx     context.Context
	p       *store.StartOrchestrationParams
	created bool
	now     int64
	err     error
	done    chan struct{}
}

// maxStartBatch bounds the starts of one statement.
const maxStartBatch = 64

// startBatchTimeout bounds a batch's statement, which runs apart from the
// contexts of the calls it serves: one caller that goes away must not fail
// the others' starts.
const startBatchTimeout = 30 * time.Second

// startBatched starts p (not eager) in its group's next batch. It reports
// whether p created its instance, and the batch's time.
func (s *Store) startBatched(ctx context.Context, p *store.StartOrchestrationParams) (bool, int64, error) {
	key := startGroupKey{tenant: p.TenantID}
	if p.MaxRunning != nil {
		key.limited, key.maxRunning = true, *p.MaxRunning
	}
	item := &pendingStart{ctx: ctx, p: p, done: make(chan struct{})}
	b := &s.starts
	b.mu.Lock()
	if b.groups == nil {
		b.groups = map[startGroupKey]*startGroup{}
	}
	g := b.groups[key]
	if g == nil {
		g = &startGroup{}
		b.groups[key] = g
	}
	g.pending = append(g.pending, item)
	lead := !g.busy
	g.busy = true
	b.mu.Unlock()
	if lead {
		// Its own start is in the batch it sends.
		s.runStartBatch(ctx, key, g)
		return item.created, item.now, item.err
	}
	select {
	case <-item.done:
		return item.created, item.now, item.err
	case <-ctx.Done():
		return false, 0, ctx.Err()
	}
}

// runStartBatch sends one batch of g, then hands the group on: to a
// goroutine of its own when more starts came meanwhile, so that the
// caller who led returns with its own result.
func (s *Store) runStartBatch(ctx context.Context, key startGroupKey, g *startGroup) {
	b := &s.starts
	b.mu.Lock()
	batch, rest := takeStartBatch(g.pending)
	g.pending = rest
	b.mu.Unlock()

	if len(batch) > 0 {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startBatchTimeout)
		s.sendStartBatch(ctx, key, batch)
		cancel()
	}

	b.mu.Lock()
	more := len(g.pending) > 0
	if !more {
		g.busy = false
		delete(b.groups, key)
	}
	b.mu.Unlock()
	if more {
		go s.runStartBatch(context.Background(), key, g)
	}
}

// takeStartBatch takes up to maxStartBatch starts of distinct instance ids
// from pending, in order; the others stay for the next batch. A start whose
// caller has gone is dropped, not sent.
func takeStartBatch(pending []*pendingStart) (batch, rest []*pendingStart) {
	ids := make(map[string]bool, len(pending))
	for _, item := range pending {
		switch {
		case item.ctx.Err() != nil:
			item.err = item.ctx.Err()
			close(item.done)
		case len(batch) < maxStartBatch && !ids[item.p.InstanceID]:
			ids[item.p.InstanceID] = true
			batch = append(batch, item)
		default:
			rest = append(rest, item)
		}
	}
	return batch, rest
}

func (s *Store) sendStartBatch(ctx context.Context, key startGroupKey, batch []*pendingStart) {
	ps := make([]*store.StartOrchestrationParams, len(batch))
	for i, item := range batch {
		ps[i] = item.p
	}
	var maxRunning *int64
	if key.limited {
		maxRunning = &key.maxRunning
	}
	if s.onStartBatch != nil {
		s.onStartBatch(ps)
	}
	now := s.now()
	var created map[string]bool
	args, err := startArgs(key.tenant, maxRunning, now, ps, "", 0)
	if err == nil {
		err = s.inBatchTx(ctx, pgx.ReadCommitted, func(b *pgx.Batch) {
			b.Queue(sqlStartOrchestrations, args)
		}, func(br pgx.BatchResults) error {
			ids, err := readStarted(br)
			created = ids
			return err
		})
	}
	for _, item := range batch {
		item.created, item.now, item.err = created[item.p.InstanceID], now, err
		close(item.done)
	}
}

// startArgs binds StartOrchestrations for starts of one tenant: leased
// under token until until (an eager start), or free when until is 0.
func startArgs(tenant string, maxRunning *int64, now int64, ps []*store.StartOrchestrationParams, token string, until int64) (namedArgs, error) {
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
	var leaseToken *string
	if until > 0 {
		leaseToken = &token
	}
	return namedArgs{"tenant_id": tenant, "now": now, "shard": countShard(), "max_running": maxRunning,
		"lease_token": leaseToken, "leased_until": until, "instance_ids": ids, "names": names, "versions": versions,
		"inputs": inputs, "tags": tags, "retentions": retentions, "kinds": kinds, "payloads": payloads,
		"trace_contexts": traces}, nil
}

// readStarted reads the ids StartOrchestrations created.
func readStarted(br pgx.BatchResults) (map[string]bool, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	created := make(map[string]bool, len(ids))
	for _, id := range ids {
		created[id] = true
	}
	return created, err
}
