package dispatcher_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testlog"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/notify"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/services/dispatcher"
)

// zombieLooks counts the looks for a zombie tenant a pool sends.
type zombieLooks struct{ n atomic.Int64 }

func (z *zombieLooks) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	// The comment of FindZombieTenant (sql/runtime.sql).
	if strings.Contains(d.SQL, "(it was deleted): a zombie message") {
		z.n.Add(1)
	}
	return ctx
}
func (z *zombieLooks) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// An idle dispatcher looks for zombie messages once per ZombieInterval, not
// after each empty fetch, and still consumes and logs the zombie it finds.
func TestZombieLooksAreSpaced(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	// A message of an instance that does not exist: a zombie.
	_, err := s.pool.Exec(t.Context(), `INSERT INTO orchestrator_queue (tenant_id, instance_id, kind, visible_at, created_at)
		VALUES ($1, 'gone', 'event_raised', 0, 0)`, tenant)
	require.NoError(t, err)

	cfg, err := pgxpool.ParseConfig(s.pool.Config().ConnString())
	require.NoError(t, err)
	looks := &zombieLooks{}
	cfg.ConnConfig.Tracer = looks
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	logs := &testlog.Buffer{}
	st := crdb.New(pool, crdb.Options{Clock: s.clock, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	d, err := dispatcher.New(dispatcher.Config{Store: st, Loops: 2, MinPoll: time.Millisecond, MaxPoll: time.Millisecond,
		ZombieInterval: time.Hour, Clock: s.clock, Logger: quiet()})
	require.NoError(t, err)
	require.NoError(t, d.Start(t.Context()))
	testwait.Until(t, time.Minute, "50 empty fetches", func() bool { return d.Stats().EmptyPolls >= 50 })
	require.NoError(t, d.Stop(t.Context()))

	require.Zero(t, s.rows("orchestrator_queue"), "the zombie is still queued")
	require.Contains(t, logs.String(), "consumed a message for an instance that does not exist")
	// The first empty fetch looked: it found the zombie, and looked once
	// more after consuming it. No other fetch of the hour looked.
	require.Equal(t, int64(2), looks.n.Load(), "zombie looks in %d empty fetches", d.Stats().EmptyPolls)
}

const waiterDoc = `
name: waiter
version: 1
steps:
  - wait_event: { name: go }
`

// hinted starts a dispatcher whose loops wait an hour between polls: only
// hints wake them.
func (s *system) hinted(hints notify.Notifier, loops int) *dispatcher.Dispatcher {
	s.t.Helper()
	d, err := dispatcher.New(dispatcher.Config{Store: s.store, Notifier: hints, Hinted: true, Loops: loops,
		MinPoll: time.Hour, MaxPoll: time.Hour, Clock: s.clock, Logger: quiet()})
	require.NoError(s.t, err)
	return d
}

// With hints, a loop whose batch was not full sleeps until the next hint
// instead of fetching again at once: the fetch would find nothing.
func TestAPartialBatchWaitsForAHint(t *testing.T) {
	t.Parallel()
	s := newSystem(t, waiterDoc)
	hints := notify.NewLocal()
	d := s.hinted(hints, 1)
	require.NoError(t, d.Start(t.Context()))
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	orchestrations := notify.Topic{Kind: notify.Orchestrations, TenantID: tenant}
	const n = 10
	for i := range n {
		id := fmt.Sprintf("w%d", i)
		s.start(id, "waiter", nil, nil)
		hints.Notify(t.Context(), orchestrations)
		testwait.Until(t, time.Minute, id+" to wait", func() bool { return d.Stats().Turns == int64(2*i+1) })
		s.raise(id, "go", nil)
		hints.Notify(t.Context(), orchestrations)
		testwait.Until(t, time.Minute, id+" to end", func() bool { return d.Stats().Turns == int64(2*i+2) })
	}
	// A hint that comes between a batch and the loop's judgement of it
	// costs one fetch that finds nothing; a fetch after every batch would
	// find nothing 2n times, bar the same race.
	require.Less(t, d.Stats().EmptyPolls, int64(n/2), "empty fetches for %d batches", 2*n)
}

// A hint that comes while a loop holds an instance's lease is spent on a
// fetch that finds the instance leased; the loop that holds it fetches
// again after its ack, and runs the turn the message makes due.
func TestAHintDuringABatchFetchesAgain(t *testing.T) {
	t.Parallel()
	s := newSystem(t, waiterDoc)
	hints := notify.NewLocal()
	// Two active loops and a reserve one, which stays parked.
	d := s.hinted(hints, 3)
	inTurn, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	d.SetBeforeAck(func(ctx context.Context, items []*store.OrchestrationItem) {
		once.Do(func() { close(inTurn); <-release })
	})
	require.NoError(t, d.Start(t.Context()))
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	// Each active loop fetches once as it starts, then waits for hints.
	testwait.Until(t, time.Minute, "the loops' first fetches", func() bool { return d.Stats().EmptyPolls == 2 })
	orchestrations := notify.Topic{Kind: notify.Orchestrations, TenantID: tenant}
	s.start("w", "waiter", nil, nil)
	hints.Notify(t.Context(), orchestrations)
	<-inTurn
	s.raise("w", "go", nil)
	hints.Notify(t.Context(), orchestrations)
	testwait.Until(t, time.Minute, "the other loop to find the instance leased", func() bool { return d.Stats().EmptyPolls == 3 })
	close(release)
	released = true
	testwait.Until(t, time.Minute, "the instance to end", func() bool { return s.instance("w").Status.Terminal() })
}

// Timers come with no hint: a loop whose batch held one fetches again at
// once, for the timers of other tenants due with it, though its batch was
// not full and no hint came.
func TestATimersBatchFetchesAgain(t *testing.T) {
	t.Parallel()
	const doc = `
name: sleeper
version: 1
steps:
  - timer: 1m
`
	s := newSystem(t, doc)
	const other = "bravo"
	require.NoError(t, s.store.CreateTenant(t.Context(), &store.CreateTenantParams{TenantID: other}))
	def := s.register(doc)
	_, err := s.store.RegisterDefinition(t.Context(), &store.RegisterDefinitionParams{
		TenantID: other, Name: def.Name, Version: def.Version, Document: def.Document()})
	require.NoError(t, err)
	hints := notify.NewLocal()
	d := s.hinted(hints, 1)
	require.NoError(t, d.Start(t.Context()))
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	orchestrations := notify.Topic{Kind: notify.Orchestrations}
	s.start("a", "sleeper", nil, nil)
	hints.Notify(t.Context(), orchestrations)
	testwait.Until(t, time.Minute, "a's timer", func() bool { return d.Stats().Turns == 1 })
	kind, payload, err := engine.EncodeMessage(engine.StartMessage{})
	require.NoError(t, err)
	_, err = s.store.StartOrchestration(t.Context(), &store.StartOrchestrationParams{
		TenantID: other, InstanceID: "b", Name: def.Name, Version: def.Version, Start: store.Message{Kind: kind, Payload: payload}})
	require.NoError(t, err)
	hints.Notify(t.Context(), orchestrations)
	testwait.Until(t, time.Minute, "b's timer", func() bool { return d.Stats().Turns == 2 })

	// Both timers are due; one hint wakes the loop, whose fetch takes one
	// tenant's.
	s.clock.Advance(time.Minute)
	hints.Notify(t.Context(), orchestrations)
	testwait.Until(t, time.Minute, "both timers' turns", func() bool { return d.Stats().Turns == 4 })
}

// fetchWatch is a store whose fetches the test sees: how many run at once
// (the most), and the first one waits for release.
type fetchWatch struct {
	store.Store
	inFlight, most atomic.Int64
	first          sync.Once
	entered        chan struct{}
	release        chan struct{}
}

func (f *fetchWatch) FetchOrchestrationItems(ctx context.Context, p *store.FetchOrchestrationItemsParams) ([]*store.OrchestrationItem, error) {
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
	}
	f.first.Do(func() { close(f.entered); <-f.release })
	return f.Store.FetchOrchestrationItems(ctx, p)
}

// The loops fetch one at a time: while one loop's fetch runs, the others
// wait for it, and the turns still run.
func TestLoopsFetchOneAtATime(t *testing.T) {
	t.Parallel()
	s := newSystem(t, waiterDoc)
	watch := &fetchWatch{Store: s.store, entered: make(chan struct{}), release: make(chan struct{})}
	// Three loops that poll when idle, three reserve loops.
	const loops, active = 6, 3
	d := s.dispatcher(dispatcher.Config{Store: watch, Loops: loops, MinPoll: time.Millisecond})
	s.startDispatcher(d)
	// Before the dispatcher's Stop, which waits for the first fetch.
	release := sync.OnceFunc(func() { close(watch.release) })
	t.Cleanup(release)
	<-watch.entered
	testwait.Until(t, time.Minute, "the other loops to wait for the first fetch", func() bool { return d.Stats().FetchWaits == active-1 })
	release()
	for i := range 10 {
		s.start(fmt.Sprintf("w%d", i), "waiter", nil, nil)
	}
	testwait.Until(t, time.Minute, "the instances to wait", func() bool { return d.Stats().Turns == 10 })
	for i := range 10 {
		s.raise(fmt.Sprintf("w%d", i), "go", nil)
	}
	testwait.Until(t, time.Minute, "the instances to end", func() bool { return d.Stats().Turns == 20 })
	require.Equal(t, int64(1), watch.most.Load(), "fetches at once")
	require.Greater(t, d.Stats().FetchWaits, int64(active-1), "waits after the first fetch")
}

// The reserve loops run only while the fetches come back full. Idle, only
// the active loops poll; with every batch held before its ack, the first
// full fetch wakes the reserve loops, and every loop holds a batch.
func TestReserveLoopsRunWhileTheFetchesComeBackFull(t *testing.T) {
	t.Parallel()
	s := newSystem(t, waiterDoc)
	const loops, batch = 4, 2
	cfg := dispatcher.Config{Loops: loops, Batch: batch, MinPoll: time.Millisecond, MaxPoll: time.Millisecond}

	idle := s.dispatcher(cfg)
	s.startDispatcher(idle)
	require.Len(t, idle.Stats().EmptyPollsByLoop, loops/2, "the reserve loops are not counted by loop")
	byLoop := func() (n int64) {
		for _, p := range idle.Stats().EmptyPollsByLoop {
			n += p
		}
		return n
	}
	testwait.Until(t, time.Minute, "the active loops to poll", func() bool { return byLoop() >= 20 })
	s.stopDispatcher(idle)
	require.Equal(t, idle.Stats().EmptyPolls, byLoop(), "empty fetches of the reserve loops")

	d := s.dispatcher(cfg)
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	d.SetBeforeAck(func(context.Context, []*store.OrchestrationItem) { <-hold })
	for i := range loops * batch {
		s.start(fmt.Sprintf("w%d", i), "waiter", nil, nil)
	}
	s.startDispatcher(d)
	// Before the dispatcher's Stop, which waits for the batches held.
	t.Cleanup(release)
	testwait.Until(t, time.Minute, "every loop to hold a batch", func() bool { return d.Stats().Running == loops })
	release()
	testwait.Until(t, time.Minute, "every instance to wait", func() bool { return d.Stats().Turns == loops*batch })
}
