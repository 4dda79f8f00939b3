package dispatcher_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/internal/testworker"
	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/pkg/store/storetest"
	"github.com/orchardhq/orchard/services/dispatcher"
)

func TestMain(m *testing.M) { testdb.Main(m) }

const tenant = "acme"

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// system is a database, a store on a manual clock, and the dispatchers and
// test workers a test starts on it. Time moves only when the test says so,
// or when everything is idle and waitFor moves it to the next due message.
type system struct {
	t           *testing.T
	pool        *pgxpool.Pool
	store       *crdb.Store
	clock       *storetest.ManualClock
	dispatchers []*dispatcher.Dispatcher
	workers     []*testworker.Worker
	// blocked counts handlers that wait for their context on purpose: they
	// keep a worker loop busy, yet wait for the clock like everything else.
	blocked atomic.Int64
}

func newSystem(t *testing.T, docs ...string) *system {
	t.Helper()
	pool := testdb.Pool(t, 40)
	clock := storetest.NewManualClock(epoch)
	s := &system{t: t, pool: pool, clock: clock, store: crdb.New(pool, crdb.Options{Clock: clock})}
	require.NoError(t, s.store.CreateTenant(t.Context(), &store.CreateTenantParams{TenantID: tenant}))
	for _, doc := range docs {
		s.register(doc)
	}
	return s
}

// examples are the engine's example definitions.
func examples(t *testing.T) []string {
	var docs []string
	for _, doc := range engine.Examples() {
		docs = append(docs, string(doc))
	}
	require.Len(t, docs, 4)
	return docs
}

func (s *system) register(doc string) *engine.Definition {
	s.t.Helper()
	def, err := engine.ParseDefinition([]byte(doc))
	require.NoError(s.t, err)
	_, err = s.store.RegisterDefinition(s.t.Context(), &store.RegisterDefinitionParams{
		TenantID: tenant, Name: def.Name, Version: def.Version, Document: def.Document(),
	})
	require.NoError(s.t, err)
	return def
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// dispatcher starts a dispatcher on the system's store (or on st).
func (s *system) dispatcher(cfg dispatcher.Config) *dispatcher.Dispatcher {
	s.t.Helper()
	if cfg.Store == nil {
		cfg.Store = s.store
	}
	cfg.Clock = s.clock
	cfg.MaxPoll = 10 * time.Millisecond
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	d, err := dispatcher.New(cfg)
	require.NoError(s.t, err)
	return d
}

// dieHolding runs a dispatcher (cfg, on connections of its own) until it
// dies in its first batch, between fetch and ack, as a killed process
// would: its connections go, nothing is acked or released.
func (s *system) dieHolding(cfg dispatcher.Config) *dispatcher.Dispatcher {
	s.t.Helper()
	pool := testdb.PoolFor(s.t, s.pool, 2)
	cfg.Store = crdb.New(pool, crdb.Options{Clock: s.clock})
	doomed := s.dispatcher(cfg)
	fetched := make(chan struct{})
	var once sync.Once
	doomed.SetBeforeAck(func(ctx context.Context, items []*store.OrchestrationItem) {
		once.Do(func() { pool.Close(); close(fetched) })
	})
	ctx, kill := context.WithCancel(s.t.Context())
	require.NoError(s.t, doomed.Start(ctx))
	<-fetched
	kill()
	_ = doomed.Stop(s.t.Context())
	return doomed
}

func (s *system) startDispatcher(d *dispatcher.Dispatcher) {
	s.t.Helper()
	require.NoError(s.t, d.Start(s.t.Context()))
	s.dispatchers = append(s.dispatchers, d)
	s.t.Cleanup(func() { _ = d.Stop(context.Background()) })
}

// stopDispatcher drains a dispatcher the system started, and leaves it out
// of the idle judgement, whose loops must all poll.
func (s *system) stopDispatcher(d *dispatcher.Dispatcher) {
	s.t.Helper()
	require.NoError(s.t, d.Stop(s.t.Context()))
	s.dispatchers = slices.DeleteFunc(s.dispatchers, func(e *dispatcher.Dispatcher) bool { return e == d })
}

func (s *system) worker(h testworker.Handler, queues ...string) *testworker.Worker {
	s.t.Helper()
	w := testworker.Start(s.t.Context(), testworker.Config{Store: s.store, TaskQueues: queues, Handler: h})
	s.workers = append(s.workers, w)
	s.t.Cleanup(w.Stop)
	return w
}

// start starts an instance of the latest version of a definition.
func (s *system) start(id, name string, input any, retention *store.Retention) {
	s.t.Helper()
	s.startEager(id, name, input, retention, nil)
}

// startEager is start with an eager lease (nil: none).
func (s *system) startEager(id, name string, input any, retention *store.Retention, e *store.EagerLease) {
	s.t.Helper()
	s.startWith(id, name, input, retention, func(p *store.StartOrchestrationParams) { p.Eager = e })
}

// startFirst starts an instance whose first turn e holds, as a start that
// found no loop idle (store.StartOrchestrationParams.First).
func (s *system) startFirst(id, name string, input any, e *store.EagerLease) {
	s.t.Helper()
	s.startWith(id, name, input, nil, func(p *store.StartOrchestrationParams) { p.First = e })
}

func (s *system) startWith(id, name string, input any, retention *store.Retention, with func(p *store.StartOrchestrationParams)) {
	s.t.Helper()
	def, err := s.store.GetDefinition(s.t.Context(), &store.GetDefinitionParams{TenantID: tenant, Name: name})
	version := ""
	if err == nil {
		version = def.Version
	}
	raw, err := json.Marshal(input)
	require.NoError(s.t, err)
	kind, payload, err := engine.EncodeMessage(engine.StartMessage{Input: raw})
	require.NoError(s.t, err)
	p := &store.StartOrchestrationParams{
		TenantID: tenant, InstanceID: id, Name: name, Version: version, Input: raw, Retention: retention,
		Start: store.Message{Kind: kind, Payload: payload},
	}
	with(p)
	_, err = s.store.StartOrchestration(s.t.Context(), p)
	require.NoError(s.t, err)
}

func (s *system) raise(id, name string, payload any) {
	s.t.Helper()
	raw, err := json.Marshal(payload)
	require.NoError(s.t, err)
	kind, body, err := engine.EncodeMessage(engine.EventRaisedMessage{Name: name, Payload: raw})
	require.NoError(s.t, err)
	_, err = s.store.Enqueue(s.t.Context(), &store.EnqueueParams{TenantID: tenant, InstanceID: id, Message: store.Message{Kind: kind, Payload: body}})
	require.NoError(s.t, err)
}

func (s *system) instance(id string) *store.Instance {
	s.t.Helper()
	in, err := s.store.GetInstance(s.t.Context(), &store.GetInstanceParams{TenantID: tenant, InstanceID: id})
	require.NoError(s.t, err)
	return in
}

// waitFor polls cond until it holds, moving the clock to the next due
// message whenever the whole system is idle. It fails the test after 3
// minutes of real time (under -race on a machine loaded 14-fold, as in
// `make test` beside other builds, a 60s bound failed tests that were only
// slow), or when the system is idle with nothing due.
func (s *system) waitFor(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		require.True(s.t, time.Now().Before(deadline), "timed out waiting for %s", what)
		if s.idle(deadline) {
			// What made the system idle may have met cond after cond was
			// last asked: the clock moves only for a cond still unmet.
			if cond() {
				return
			}
			if !s.advanceToNextDue() {
				require.Fail(s.t, "idle with nothing due, and still not "+what)
			}
			continue
		}
		<-tick.C
	}
}

// waitDone waits until an instance is terminal and returns it.
func (s *system) waitDone(id string) *store.Instance {
	s.t.Helper()
	var in *store.Instance
	s.waitFor(id+" to end", func() bool {
		var err error
		in, err = s.store.GetInstance(s.t.Context(), &store.GetInstanceParams{TenantID: tenant, InstanceID: id})
		require.NoError(s.t, err)
		return in.Status.Terminal()
	})
	return in
}

// counters is a snapshot of what the dispatchers and workers did: turns
// and tasks ended, tasks and batches running, and each loop's empty polls.
type counters struct {
	running, blocked, turns, done int64
	polls                         []int64
}

// counters reads the running loops before the turns and tasks that ended:
// a loop counts its turns and tasks before it stops running, so nothing
// ends unseen between the two reads.
func (s *system) counters() counters {
	var c counters
	for _, d := range s.dispatchers {
		c.running += d.Stats().Running
	}
	for _, w := range s.workers {
		c.running += w.Stats().Running
	}
	c.blocked = s.blocked.Load()
	c.running -= c.blocked
	for _, d := range s.dispatchers {
		st := d.Stats()
		c.turns += st.Turns + st.LeaseLosses
		c.polls = append(c.polls, st.EmptyPollsByLoop...)
	}
	for _, w := range s.workers {
		st := w.Stats()
		c.done += st.Completed + st.Failed + st.LeaseLosses
		c.polls = append(c.polls, st.EmptyPollsByLoop...)
	}
	return c
}

// idle reports whether nothing can happen without the clock moving. It
// takes a snapshot with nothing running, then waits until every dispatcher
// and worker loop has fetched nothing twice (so once in a fetch that began
// after the snapshot), and judges idle when still nothing runs and no turn
// or task ended in between: whatever a fetch could find was written before
// the snapshot, and the later empty fetches would have found it. Only
// running turns and tasks stop the judgement, not fetches, which a loaded
// machine keeps in flight nearly all the time. It waits as long as nothing
// happens, until deadline: on a loaded machine two passes of a worker over
// five task queues can take seconds.
func (s *system) idle(deadline time.Time) bool {
	a := s.counters()
	if a.running != 0 {
		return false
	}
	for {
		b := s.counters()
		if len(b.polls) != len(a.polls) || b.blocked != a.blocked || b.running != 0 || b.turns != a.turns || b.done != a.done || time.Now().After(deadline) {
			return false
		}
		// A blocked handler's loop does not poll until its context ends.
		twice := int64(0)
		for i := range b.polls {
			if b.polls[i] >= a.polls[i]+2 {
				twice++
			}
		}
		if twice >= int64(len(b.polls))-b.blocked {
			return true
		}
		testwait.Tick()
	}
}

// advanceToNextDue moves the clock to when the next message becomes
// fetchable; false when there is none.
func (s *system) advanceToNextDue() bool {
	s.t.Helper()
	now := s.clock.Now().UnixMilli()
	var next *int64
	// Messages not yet visible, and instances with messages whose lease
	// (an abandoned turn's delay) has not run out.
	require.NoError(s.t, s.pool.QueryRow(s.t.Context(), `
SELECT min(t) FROM (
	SELECT visible_at AS t FROM orchestrator_queue WHERE visible_at > $1
	UNION ALL
	SELECT l.leased_until FROM instance_leases l WHERE l.leased_until > $1
		AND EXISTS (SELECT 1 FROM orchestrator_queue q WHERE q.tenant_id = l.tenant_id AND q.instance_id = l.instance_id)
) due`, now).Scan(&next))
	if next == nil {
		return false
	}
	s.clock.Advance(time.Duration(*next-now) * time.Millisecond)
	return true
}

// history returns the kinds of an execution's events, in order, checking
// that their ids run 1, 2, 3... with no gap and no duplicate.
func (s *system) history(id string, execution int64) []string {
	s.t.Helper()
	events, err := s.store.GetHistory(s.t.Context(), &store.GetHistoryParams{TenantID: tenant, InstanceID: id, ExecutionID: execution})
	require.NoError(s.t, err)
	kinds := make([]string, len(events))
	for i, e := range events {
		require.Equal(s.t, int64(i+1), e.EventID)
		kinds[i] = e.Kind
	}
	return kinds
}

// rows counts the rows of one of the tenant's tables.
func (s *system) rows(table string) int64 {
	s.t.Helper()
	var n int64
	require.NoError(s.t, s.pool.QueryRow(s.t.Context(), "SELECT count(*) FROM "+table+" WHERE tenant_id = $1", tenant).Scan(&n))
	return n
}
