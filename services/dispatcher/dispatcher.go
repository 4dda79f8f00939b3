// Package dispatcher runs orchestrations. Its loops lease instances that have
// messages waiting, run the engine's turn over each one's history and
// messages, and commit the turn's decision (the ack) through the store. Any
// number of dispatchers, in any number of processes, share one database with
// no other coordination: the store's leases make each turn count once.
//
// A dispatcher must never write to the database except through the store's
// runtime operations, never publish a turn whose lease it lost (the store's
// ack refuses it), and never loop forever on an instance it cannot run: such
// an instance ends Failed with the reason.
package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/orchardhq/orchard/pkg/notify"
	"github.com/orchardhq/orchard/pkg/store"
)

// Config configures a Dispatcher. Zero fields take the defaults.
type Config struct {
	Store store.Store
	// Loops is the number of concurrent fetch → turn → ack loops (default
	// 4). Half of them (rounded up) run whatever the load; the others,
	// reserve loops, only while the fetches come back full (see loop).
	Loops int
	// Batch is how many instances a loop leases per fetch (default
	// DefaultBatch).
	Batch int
	// LeaseDuration is how long a fetched instance stays leased without a
	// renewal (default DefaultLeaseDuration). Batches that run longer than
	// a third of it renew it every third, so it bounds how long the
	// instances of a dispatcher that died wait for another.
	LeaseDuration time.Duration
	// MinPoll and MaxPoll bound the wait of an idle loop before it fetches
	// again; the wait doubles from MinPoll with each empty fetch (defaults
	// 2ms and 100ms). A loop that fetches a full batch wakes the idle ones.
	MinPoll, MaxPoll time.Duration
	// ZombieInterval is how often, at most, the dispatcher's fetches look
	// for zombie messages, the messages of instances that no longer exist
	// or have ended, which they consume and log (default 1s; see
	// store.FetchOrchestrationItemsParams.SkipZombies).
	ZombieInterval time.Duration
	// TenantID restricts the dispatcher to one tenant; empty serves all
	// tenants, in turn.
	TenantID string
	// Clock gives each turn its time and the leases theirs (default the
	// system clock). Polling waits use real time.
	Clock store.Clock
	// Logger receives the dispatcher's logs (default slog.Default()).
	Logger *slog.Logger
	// TracerProvider and MeterProvider default to the global ones.
	TracerProvider trace.TracerProvider
	Metrics        *Metrics
	// DefinitionCacheSize bounds the compiled definitions kept (default 1024).
	DefinitionCacheSize int
	// PolicyTTL is how long a tenant's limits are cached (default 30s).
	PolicyTTL time.Duration
	// Notifier carries hints: the dispatcher's idle loops wake on a hint
	// that messages are queued for an instance, and its acks send hints of
	// the tasks they schedule, the messages they queue and the instances
	// they end. Share one with the API of this process (default: none,
	// the loops poll).
	Notifier notify.Notifier
	// Handoff, shared with the API of this process, lets an ack that
	// schedules a task due now hand it to a PollActivityTask waiting for
	// its task queue, leased to it, with no claim; and lets the API's
	// starts and task completions that find a loop idle lease the instance
	// they make due and run its turn in their own transaction, in the
	// loop's place (Hold; see notify.Handoff), and the starts that find
	// none run their first turns before their write (Handoff.Holds).
	// Nil: none.
	Handoff *notify.Handoff
	// Hinted says that a hint reaches Notifier for every message queued
	// for an instance: the API runs in this process, or hints cross
	// processes. A loop whose batch was not full then waits for a hint or
	// its poll instead of fetching again at once (see loop).
	Hinted bool
	// MaxTurnAttempts is how many turns of an instance in a row, each run
	// alone after its lease lapsed, may die before they end (the process
	// crashed, out of memory say, or the turn overran its lease) before the
	// instance is failed instead of run again, so that one poison instance
	// cannot crash-loop every dispatcher (default 3). A lapsed lease alone
	// does not count: the instance's dispatcher may have been killed, or
	// killed by another instance's turn.
	MaxTurnAttempts int
}

// DefaultLeaseDuration is the default LeaseDuration: a dispatcher killed
// holding instances delays them by at most this, and a batch renews its
// leases after a third of it (most batches end in milliseconds).
const DefaultLeaseDuration = 5 * time.Second

// DefaultBatch is the default Batch. The loops fetch one at a time
// (fetchAndRun), so under load a fetch carries what came during the last
// one: a larger batch serves a burst with fewer, fuller claims and acks,
// and a lighter load fills none.
const DefaultBatch = 16

// FailureKindPoison is the failure kind of an execution failed because its
// turns kept dying before they ended.
const FailureKindPoison = "poison"

func (c *Config) withDefaults() error {
	if c.Store == nil {
		return errors.New("dispatcher: no store")
	}
	c.Loops = cmp.Or(c.Loops, 4)
	c.Batch = cmp.Or(c.Batch, DefaultBatch)
	c.LeaseDuration = cmp.Or(c.LeaseDuration, DefaultLeaseDuration)
	c.MinPoll = cmp.Or(c.MinPoll, 2*time.Millisecond)
	c.MaxPoll = cmp.Or(c.MaxPoll, 100*time.Millisecond)
	c.ZombieInterval = cmp.Or(c.ZombieInterval, time.Second)
	c.DefinitionCacheSize = cmp.Or(c.DefinitionCacheSize, 1024)
	c.PolicyTTL = cmp.Or(c.PolicyTTL, 30*time.Second)
	c.MaxTurnAttempts = cmp.Or(c.MaxTurnAttempts, 3)
	if c.Loops < 0 || c.Batch < 0 || c.LeaseDuration < 0 || c.MinPoll < 0 || c.MaxPoll < c.MinPoll || c.MaxTurnAttempts < 0 || c.ZombieInterval < 0 {
		return fmt.Errorf("dispatcher: invalid config (loops %d, batch %d, lease %s, poll %s..%s)",
			c.Loops, c.Batch, c.LeaseDuration, c.MinPoll, c.MaxPoll)
	}
	if c.Notifier == nil {
		c.Notifier = notify.Off{}
	}
	if c.Clock == nil {
		c.Clock = store.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.Metrics == nil {
		m, err := NewMetrics(otel.GetMeterProvider())
		if err != nil {
			return err
		}
		c.Metrics = m
	}
	return nil
}

// Dispatcher runs orchestration turns. New → Start → Stop.
type Dispatcher struct {
	cfg      Config
	log      *slog.Logger
	tracer   trace.Tracer
	metrics  *Metrics
	defs     *definitionCache
	policies *policyCache
	ahead    *aheadCache

	mu         sync.Mutex
	started    bool
	stopFetch  context.CancelFunc // ends the loops' fetching
	abortTurns context.CancelFunc // ends turns in flight
	unhold     func()             // ends the starts' first turns here (Handoff.Holds)
	loopsDone  sync.WaitGroup
	stats      stats
	// wake is closed, and replaced, to wake the idle loops: a loop that
	// fetched a full batch expects more work waiting.
	wakeMu sync.Mutex
	wake   chan struct{}
	// kick wakes one idle loop: a hint came that messages are queued. It
	// holds one value, so that a hint that comes while every loop is busy
	// makes the next loop to idle look once more before it sleeps.
	kick chan struct{}
	// hints counts the hints that came, so that a loop knows whether one
	// came while it held its batch's leases (see loop).
	hints atomic.Int64
	// fetching holds a value while a loop fetches: one fetch at a time
	// (fetchAndRun).
	fetching chan struct{}
	// backlog is set while the last fetch came back full: the reserve
	// loops then run (see loop).
	backlog atomic.Bool
	// nextZombieLook is when (UnixNano) a fetch next looks for zombie
	// messages.
	nextZombieLook atomic.Int64
	// suspectMu runs the suspects' turns one at a time (runSuspect).
	suspectMu sync.Mutex
	// beforeAck, set by tests, runs between a batch's turns and its ack.
	beforeAck func(ctx context.Context, items []*store.OrchestrationItem)
}

// stats counts what the loops did, for Stats.
type stats struct {
	turns, fetches, fetchWaits, emptyPolls, leaseLosses, running, held, ahead atomic.Int64
	// loopEmptyPolls counts each loop's empty fetches.
	loopEmptyPolls []atomic.Int64
}

// Stats is a snapshot of a dispatcher's counters.
type Stats struct {
	// Turns is the number of turns committed.
	Turns int64
	// Fetches is the number of fetches (claims) made.
	Fetches int64
	// FetchWaits is the number of fetches that waited for another loop's
	// fetch to return first.
	FetchWaits int64
	// EmptyPolls is the number of fetches that found no work.
	EmptyPolls int64
	// LeaseLosses is the number of turns whose ack found the lease gone.
	LeaseLosses int64
	// Running is the number of loops running a batch they fetched, from the
	// fetch's return to the batch's ack. A batch's turns are counted before
	// it stops running.
	Running int64
	// EmptyPollsByLoop is EmptyPolls for each loop that polls when idle:
	// the first (Loops+1)/2. The others, reserve loops, fetch only while
	// the fetches come back full, and their empty fetches count in
	// EmptyPolls alone.
	EmptyPollsByLoop []int64
	// Held is the number of turns run inside the write that made their
	// instance due (Hold): in an idle loop's place, or a start's first
	// turn written with its start.
	Held int64
	// Ahead is the number of those that ran before their write, on their
	// instance as this dispatcher's last ack of it left it (a completion's
	// turn: store.EagerLease.Ahead).
	Ahead int64
}

// New checks the config and builds a dispatcher.
func New(cfg Config) (*Dispatcher, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	d := &Dispatcher{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "dispatcher"),
		tracer:  cfg.TracerProvider.Tracer("github.com/orchardhq/orchard/services/dispatcher"),
		metrics: cfg.Metrics,
	}
	d.wake = make(chan struct{})
	d.kick = make(chan struct{}, 1)
	d.fetching = make(chan struct{}, 1)
	d.stats.loopEmptyPolls = make([]atomic.Int64, d.activeLoops())
	d.defs = newDefinitionCache(cfg.Store, cfg.DefinitionCacheSize)
	d.policies = newPolicyCache(cfg.Store, cfg.PolicyTTL)
	if cfg.Handoff != nil {
		d.ahead = newAheadCache()
	}
	return d, nil
}

// Start starts the loops. They run until Stop, or until ctx ends (which
// abandons the turns in flight like a Stop whose deadline passed).
func (d *Dispatcher) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return errors.New("dispatcher: already started")
	}
	d.started = true
	turnCtx, abortTurns := context.WithCancel(context.WithoutCancel(ctx))
	fetchCtx, stopFetch := context.WithCancel(ctx)
	d.stopFetch, d.abortTurns = stopFetch, abortTurns
	context.AfterFunc(ctx, abortTurns)
	hints := d.cfg.Notifier.Subscribe(notify.Topic{Kind: notify.Orchestrations, TenantID: d.cfg.TenantID})
	d.loopsDone.Add(1)
	go func() {
		defer d.loopsDone.Done()
		defer hints.Close()
		for {
			select {
			case <-hints.C:
				d.hints.Add(1)
				select {
				case d.kick <- struct{}{}:
				default:
				}
			case <-fetchCtx.Done():
				return
			}
		}
	}()
	for i := range d.cfg.Loops {
		d.loopsDone.Add(1)
		go func() {
			defer d.loopsDone.Done()
			d.loop(fetchCtx, turnCtx, i)
		}()
	}
	if d.cfg.Handoff != nil {
		d.unhold = d.cfg.Handoff.Holds(d.cfg.TenantID, d.cfg.LeaseDuration, d.Hold)
	}
	d.log.Info("dispatcher started", "loops", d.cfg.Loops, "batch", d.cfg.Batch, "lease", d.cfg.LeaseDuration, "tenant", d.cfg.TenantID)
	return nil
}

// Stop drains the dispatcher: the loops stop fetching and finish the turns in
// flight. When ctx ends first, the turns still in flight are abandoned (their
// instances released for other dispatchers) and Stop returns ctx's error.
func (d *Dispatcher) Stop(ctx context.Context) error {
	d.mu.Lock()
	if !d.started {
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	if d.unhold != nil {
		d.unhold()
	}
	d.stopFetch()
	done := make(chan struct{})
	go func() { d.loopsDone.Wait(); close(done) }()
	defer d.policies.stop()
	select {
	case <-done:
		d.abortTurns()
		d.log.Info("dispatcher stopped")
		return nil
	case <-ctx.Done():
		d.abortTurns()
		<-done
		d.log.Warn("dispatcher stopped before its turns ended; they were abandoned")
		return ctx.Err()
	}
}

// Stats returns the dispatcher's counters.
func (d *Dispatcher) Stats() Stats {
	st := Stats{
		Turns:            d.stats.turns.Load(),
		Fetches:          d.stats.fetches.Load(),
		FetchWaits:       d.stats.fetchWaits.Load(),
		EmptyPolls:       d.stats.emptyPolls.Load(),
		LeaseLosses:      d.stats.leaseLosses.Load(),
		Running:          d.stats.running.Load(),
		Held:             d.stats.held.Load(),
		Ahead:            d.stats.ahead.Load(),
		EmptyPollsByLoop: make([]int64, len(d.stats.loopEmptyPolls)),
	}
	for i := range d.stats.loopEmptyPolls {
		st.EmptyPollsByLoop[i] = d.stats.loopEmptyPolls[i].Load()
	}
	return st
}

// loop fetches and runs batches until fetchCtx ends. Turns run under
// turnCtx, so that a drain lets them finish.
//
// A loop that ran a full batch fetches again at once: more may wait. So
// does one whose batch held a delayed message (a timer's), which came with
// no hint: others may be due, of other tenants. After another batch that
// was not full, it fetches again at once only when not every message comes
// with a hint (Config.Hinted), or when a hint came while it held the
// batch's leases: a message queued for one of its instances then (an
// event, an activity's result) makes that instance due at the ack, and the
// hint was spent on a fetch that found it leased. Otherwise the batch took
// what was hinted and it sleeps like an idle loop, until a hint or its
// poll: the fetch at once found nothing, about one per turn at low load.
//
// A reserve loop (activeLoops) waits, with no place offered and no hint
// taken, until a fetch comes back full, and goes back to waiting once one
// does not: below a backlog, the active loops alone run the turns, in
// fuller batches.
func (d *Dispatcher) loop(fetchCtx, turnCtx context.Context, n int) {
	wait := time.Duration(0)
	failures := failureBackoff()
	reserve := n >= d.activeLoops()
	for fetchCtx.Err() == nil {
		if reserve && !d.backlog.Load() {
			if !d.reserveWait(fetchCtx) {
				return
			}
			wait = 0
		}
		if wait > 0 && !d.idle(fetchCtx, wait) {
			return
		}
		hints := d.hints.Load()
		more, err := d.fetchAndRun(fetchCtx, turnCtx, n)
		switch {
		case errors.Is(err, errNoWork):
			failures.Reset()
			wait = min(max(2*wait, d.cfg.MinPoll), d.cfg.MaxPoll)
		case err != nil:
			if turnCtx.Err() != nil {
				return
			}
			wait = failures.NextBackOff()
			d.log.Warn("dispatch failed", "loop", n, "error", err, "retry_in", wait)
		case d.cfg.Hinted && !more && d.hints.Load() == hints:
			failures.Reset()
			wait = d.cfg.MinPoll
		default:
			failures.Reset()
			wait = 0
		}
	}
}

// activeLoops is how many loops run whatever the load; the others are
// reserve loops, which run only while the fetches come back full. A
// dispatcher that is not backlogged runs its turns in fewer, larger
// batches, each with one claim and one ack, and offers fewer places to
// the writes' eager turns, each of which acks alone.
func (d *Dispatcher) activeLoops() int { return (d.cfg.Loops + 1) / 2 }

// reserveWait parks a reserve loop until a fetch comes back full (which
// wakes the idle loops); false when fetchCtx ended. It offers no place
// and takes no hint.
func (d *Dispatcher) reserveWait(ctx context.Context) bool {
	for !d.backlog.Load() {
		d.wakeMu.Lock()
		wake := d.wake
		d.wakeMu.Unlock()
		if d.backlog.Load() {
			return true
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// errNoWork: a fetch found nothing to do.
var errNoWork = errors.New("no work")

// fetchAndRun fetches a batch and runs it, and reports whether more work
// may wait that no hint announces: the batch was full, or held a delayed
// message. n is the loop's number.
//
// The loops fetch one at a time: a loop that wants to fetch while another
// one's fetch runs waits for it to return, and then claims what came
// meanwhile. Claims side by side would split the due instances between
// them, a turn or two each, and each batch costs a claim and an ack
// whatever its size; one at a time, a claim takes what came during the
// last one, so a busy dispatcher runs fewer, fuller batches (group commit
// again, for the claims). Turns and acks still run side by side.
func (d *Dispatcher) fetchAndRun(fetchCtx, turnCtx context.Context, n int) (bool, error) {
	select {
	case d.fetching <- struct{}{}:
	default:
		d.stats.fetchWaits.Add(1)
		select {
		case d.fetching <- struct{}{}:
		case <-fetchCtx.Done():
			// The loop stops at its next look at fetchCtx.
			return false, errNoWork
		}
	}
	if fetchCtx.Err() != nil {
		<-d.fetching
		return false, errNoWork
	}
	items, err := d.fetch(turnCtx, n)
	<-d.fetching
	if err != nil {
		return false, err
	}
	return d.run(fetchCtx, turnCtx, items)
}

// fetch claims a batch for loop n: errNoWork when it found none.
func (d *Dispatcher) fetch(turnCtx context.Context, n int) ([]*store.OrchestrationItem, error) {
	// A fetch in flight when a drain's deadline passes runs to its end, and
	// its turns are then abandoned: cut short, its claim could still commit
	// in the database after the store let go of what it leased, and the
	// instances would wait for the leases to run out.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(turnCtx), d.cfg.LeaseDuration)
	defer cancel()
	// Zombie messages are rare and each look is a statement: one fetch
	// per ZombieInterval looks.
	now, next := time.Now().UnixNano(), d.nextZombieLook.Load()
	look := now >= next && d.nextZombieLook.CompareAndSwap(next, now+d.cfg.ZombieInterval.Nanoseconds())
	d.stats.fetches.Add(1)
	items, err := d.cfg.Store.FetchOrchestrationItems(ctx, &store.FetchOrchestrationItemsParams{
		FetchOrchestrationItemParams: store.FetchOrchestrationItemParams{TenantID: d.cfg.TenantID, LeaseDuration: d.cfg.LeaseDuration},
		Max:                          d.cfg.Batch,
		SkipZombies:                  !look,
	})
	if look && err != nil {
		// It may not have looked: the next fetch does.
		d.nextZombieLook.Store(0)
	}
	if err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	if len(items) == 0 {
		d.backlog.Store(false)
		d.stats.emptyPolls.Add(1)
		if n < len(d.stats.loopEmptyPolls) {
			d.stats.loopEmptyPolls[n].Add(1)
		}
		d.metrics.emptyPolls.Add(ctx, 1)
		return nil, errNoWork
	}
	return items, nil
}

// run runs a fetched batch, and reports whether more work may wait that
// no hint announces (see fetchAndRun).
func (d *Dispatcher) run(fetchCtx, turnCtx context.Context, items []*store.OrchestrationItem) (bool, error) {
	d.stats.running.Add(1)
	defer d.stats.running.Add(-1)
	more := len(items) == d.cfg.Batch
	d.backlog.Store(more)
	if more {
		d.wakeIdle()
	}
	for _, it := range items {
		for _, m := range it.Messages {
			more = more || m.VisibleAt.After(m.CreatedAt)
		}
	}
	return more, d.runBatch(turnCtx, items)
}

// failureBackoff spaces the attempts after consecutive failures:
// exponential from 50ms to 5s, with jitter.
func failureBackoff() *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{InitialInterval: 50 * time.Millisecond, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: 5 * time.Second}
}

// idle waits like sleep, with its place offered to the API of this
// process (Config.Handoff): a start or a task's completion that makes an
// instance due may take it, and lease the instance and run its turn in
// its own transaction, in the loop's place (Hold); one that could not
// wakes the loop, to fetch. It returns false when fetchCtx ended.
func (d *Dispatcher) idle(fetchCtx context.Context, wait time.Duration) bool {
	place := d.cfg.Handoff.Idle(d.cfg.TenantID, d.cfg.LeaseDuration, d.Hold)
	place.Offer()
	ok := d.sleep(fetchCtx, wait, place.Done())
	// A taker that runs a turn in the place goes on without the loop.
	place.Leave()
	return ok
}

// sleep waits for wait, or until another loop wakes the idle ones, or a
// hint wakes this one, or woken signals, or ctx ends; false when ctx
// ended.
func (d *Dispatcher) sleep(ctx context.Context, wait time.Duration, woken <-chan struct{}) bool {
	d.wakeMu.Lock()
	wake := d.wake
	d.wakeMu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wake:
	case <-d.kick:
	case <-woken:
	case <-ctx.Done():
		return false
	}
	return true
}

// wakeIdle wakes the loops that wait.
func (d *Dispatcher) wakeIdle() {
	d.wakeMu.Lock()
	close(d.wake)
	d.wake = make(chan struct{})
	d.wakeMu.Unlock()
}
