package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/internal/testworker"
	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/services/dispatcher"
)

const oneActivity = `
name: one
version: 1
steps:
  - id: a
    activity: { name: echo, task_queue: q, input: "${ input }" }
output: ${ steps.a.output }
`

func echo(_ context.Context, task *store.WorkItem) (any, error) {
	return json.RawMessage(task.Input), nil
}

var oneActivityHistory = []string{"execution_started", "activity_scheduled", "activity_completed", "execution_completed"}

// Two groups of dispatchers and workers, as two processes would be, share
// one database: every instance completes once, no event is written twice,
// and both groups work.
func TestTwoDispatcherGroups(t *testing.T) {
	t.Parallel()
	s := newSystem(t, oneActivity)
	const n = 1000
	for i := range n {
		s.start(fmt.Sprintf("i-%04d", i), "one", i, nil)
	}
	var groups []*dispatcher.Dispatcher
	for range 2 {
		// Each group has its own connection pool, as a process would.
		st := crdb.New(testdb.PoolFor(t, s.pool, 10), crdb.Options{Clock: s.clock})
		d := s.dispatcher(dispatcher.Config{Store: st, Loops: 3, Batch: 8})
		s.startDispatcher(d)
		groups = append(groups, d)
	}
	s.worker(echo, "q")
	s.worker(echo, "q")

	s.waitFor("all instances to complete", func() bool {
		res, err := s.store.CountInstances(t.Context(), &store.CountInstancesParams{TenantID: tenant, Filter: store.InstanceFilter{Statuses: []store.Status{store.StatusCompleted}}})
		require.NoError(t, err)
		return res.Total == n
	})
	for i := range n {
		id := fmt.Sprintf("i-%04d", i)
		in := s.instance(id)
		require.Equal(t, store.StatusCompleted, in.Status)
		require.JSONEq(t, fmt.Sprint(i), string(in.Output))
		require.Equal(t, oneActivityHistory, s.history(id, 1), id)
		require.Equal(t, int64(4), in.EventCount)
	}
	var turns int64
	for i, d := range groups {
		st := d.Stats()
		require.Positive(t, st.Turns, "group %d did no work", i)
		turns += st.Turns
	}
	// Two turns per instance (start, result), three when a turn's lease was
	// lost; never fewer.
	require.GreaterOrEqual(t, turns, int64(2*n))
}

// A dispatcher dies between fetch and ack (its connections dropped, nothing
// released): once the lease expires another dispatcher finishes the
// instance, with the history it would have had.
func TestCrashBetweenFetchAndAck(t *testing.T) {
	t.Parallel()
	s := newSystem(t, oneActivity)
	s.start("crash", "one", "x", nil)

	doomed := s.dieHolding(dispatcher.Config{Loops: 1, LeaseDuration: time.Minute})
	require.Zero(t, doomed.Stats().Turns, "the killed dispatcher acked nothing")

	s.startDispatcher(s.dispatcher(dispatcher.Config{Loops: 1, LeaseDuration: time.Minute}))
	s.worker(echo, "q")
	// The survivor sees nothing until the dead lease expires.
	s.clock.Advance(time.Minute + time.Millisecond)
	in := s.waitDone("crash")
	require.Equal(t, store.StatusCompleted, in.Status)
	require.Equal(t, oneActivityHistory, s.history("crash", 1))
}

// A dispatcher with the default lease dies holding an instance: the lease
// it leaves lapses within the default lease, far inside the 30 s the
// default once was, and another dispatcher runs the instance's next turn
// then; the lapse does not count against the instance.
func TestKilledDispatchersInstanceWaitsOnlyTheDefaultLease(t *testing.T) {
	t.Parallel()
	s := newSystem(t, oneActivity)
	s.start("held", "one", "x", nil)
	claimedAt := s.clock.Now()

	s.dieHolding(dispatcher.Config{Loops: 1})

	var leasedUntil int64
	require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT leased_until FROM instance_leases WHERE tenant_id = $1 AND instance_id = 'held'`, tenant).Scan(&leasedUntil))
	require.Equal(t, claimedAt.Add(dispatcher.DefaultLeaseDuration).UnixMilli(), leasedUntil)
	require.Less(t, time.UnixMilli(leasedUntil).Sub(claimedAt), 30*time.Second, "the dead dispatcher's lease ends inside the old bound")

	s.startDispatcher(s.dispatcher(dispatcher.Config{Loops: 1}))
	s.worker(echo, "q")
	s.clock.Advance(time.UnixMilli(leasedUntil).Sub(s.clock.Now()) + time.Millisecond)
	in := s.waitDone("held")
	require.Equal(t, store.StatusCompleted, in.Status)
	require.Equal(t, oneActivityHistory, s.history("held", 1))
}

// Force delete while a turn is in flight: the ack fails and the instance
// stays deleted (seed 000 §8.5).
func TestForceDeleteDuringTurn(t *testing.T) {
	t.Parallel()
	s := newSystem(t, oneActivity)
	s.start("doomed", "one", "x", nil)
	d := s.dispatcher(dispatcher.Config{Loops: 1})
	inTurn, deleted := make(chan struct{}), make(chan struct{})
	var once sync.Once
	d.SetBeforeAck(func(ctx context.Context, items []*store.OrchestrationItem) {
		once.Do(func() { close(inTurn); <-deleted })
	})
	s.startDispatcher(d)
	<-inTurn
	res, err := s.store.DeleteInstance(t.Context(), &store.DeleteInstanceParams{TenantID: tenant, InstanceID: "doomed", Force: true})
	require.NoError(t, err)
	require.Equal(t, int64(1), res.InstancesDeleted)
	close(deleted)

	s.waitFor("the turn's ack to fail", func() bool { return d.Stats().LeaseLosses == 1 })
	_, err = s.store.GetInstance(t.Context(), &store.GetInstanceParams{TenantID: tenant, InstanceID: "doomed"})
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Zero(t, d.Stats().Turns)
	require.Zero(t, s.rows("worker_queue"), "the lost turn scheduled no activity")
}

// sleepingInstance starts a dispatcher, a worker and instance "sleepy",
// and returns once the instance waits on a one-hour timer, before an
// activity.
func sleepingInstance(t *testing.T) (*system, *testworker.Worker) {
	t.Helper()
	s := newSystem(t, `
name: sleepy
version: 1
steps:
  - timer: 1h
  - activity: { name: echo, task_queue: q }
`)
	s.startDispatcher(s.dispatcher(dispatcher.Config{}))
	w := s.worker(echo, "q")
	s.start("sleepy", "sleepy", nil, nil)
	s.waitFor("the timer to be created", func() bool { return last(s.history("sleepy", 1)) == "timer_created" })
	return s, w
}

// Deleting an instance while its timer's turn runs: the turn's ack and the
// delete conflict, and whichever comes second finds nothing to write or
// deletes what the first wrote; no task or message outlives the instance.
func TestDeleteRacesADueTimer(t *testing.T) {
	t.Parallel()
	s, _ := sleepingInstance(t)
	s.clock.Advance(time.Hour)
	_, err := s.store.DeleteInstance(t.Context(), &store.DeleteInstanceParams{TenantID: tenant, InstanceID: "sleepy", Force: true})
	require.NoError(t, err)
	leftovers := func() (n int64) {
		require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM worker_queue) + (SELECT count(*) FROM orchestrator_queue)
			+ (SELECT count(*) FROM instances) + (SELECT count(*) FROM instance_leases)`).Scan(&n))
		return n
	}
	require.Zero(t, leftovers(), "right after the delete")
	s.waitFor("the system to be idle", func() bool { return s.idle(time.Now().Add(time.Minute)) })
	require.Zero(t, leftovers(), "once the turn and the worker are done")
}

// Deleting an instance whose timer is pending: the timer never fires
// anything; an event raised after the delete finds no instance.
func TestDeleteWithPendingTimer(t *testing.T) {
	t.Parallel()
	s, w := sleepingInstance(t)
	_, err := s.store.DeleteInstance(t.Context(), &store.DeleteInstanceParams{TenantID: tenant, InstanceID: "sleepy", Force: true})
	require.NoError(t, err)

	s.clock.Advance(2 * time.Hour)
	s.waitFor("the timer's message to be consumed", func() bool { return s.rows("orchestrator_queue") == 0 })
	_, err = s.store.GetInstance(t.Context(), &store.GetInstanceParams{TenantID: tenant, InstanceID: "sleepy"})
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Zero(t, s.rows("worker_queue"))
	require.Zero(t, w.Stats().Completed)

	_, err = s.store.Enqueue(t.Context(), &store.EnqueueParams{TenantID: tenant, InstanceID: "sleepy", Message: store.Message{Kind: "event_raised", Payload: []byte(`{"name":"late"}`)}})
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Zero(t, s.rows("instances"))
}

// A race between an activity and a 48 h timer, won by the activity: the
// timer's message leaves the queue when the race is decided, while the
// instance still runs (a wait on an event follows), and the queue is empty
// once it ends; the timeout timer of an answered activity goes too.
func TestDecidedRaceWithdrawsTheLosingTimer(t *testing.T) {
	t.Parallel()
	s := newSystem(t, `
name: racer
version: 1
steps:
  - race:
      - activity: { name: echo, task_queue: q, timeout: 72h }
      - timer: 48h
  - wait_event: { name: go }
`)
	s.startDispatcher(s.dispatcher(dispatcher.Config{}))
	s.worker(echo, "q")
	s.start("r", "racer", 1, nil)
	s.waitFor("the race to be decided", func() bool { return last(s.history("r", 1)) == "activity_completed" })
	require.Equal(t, []string{"execution_started", "activity_scheduled", "timer_created", "timer_created", "activity_completed"}, s.history("r", 1))
	require.Zero(t, s.rows("orchestrator_queue"), "the timers of the decided race are still queued")
	s.raise("r", "go", nil)
	require.Equal(t, store.StatusCompleted, s.waitDone("r").Status)
	require.Zero(t, s.rows("orchestrator_queue"))
	require.Zero(t, s.rows("worker_queue"))
	usage, err := s.store.GetUsage(t.Context(), &store.GetUsageParams{TenantID: tenant})
	require.NoError(t, err)
	require.Zero(t, usage.QueuedMessages)
}

// counterDef continues as new from its input n to 100, and returns 100.
const counterDef = `
name: counter
version: 1
steps:
  - if: ${ input.n < 100 }
    continue_as_new: { input: { n: "${ input.n + 1 }" } }
  - return: ${ input.n }
`

// autoPruneKeeping sets the tenant's policy: chains are pruned as they
// go, keeping the last keep executions.
func (s *system) autoPruneKeeping(keep int) {
	s.t.Helper()
	_, err := s.store.UpdateTenant(s.t.Context(), &store.UpdateTenantParams{TenantID: tenant, Retention: &store.RetentionPolicy{
		Default: store.Retention{Chain: store.ChainRetention{KeepLast: keep, AutoPrune: new(true)}}}})
	require.NoError(s.t, err)
}

// Continue-as-new chains of 100 generations under a tenant policy that
// auto-prunes keeping 3: an instance whose own retention keeps 5 keeps 5,
// one without keeps 3, one whose own retention turns auto-prune off keeps
// all 100.
func TestContinueAsNewAutoPrune(t *testing.T) {
	t.Parallel()
	s := newSystem(t, counterDef)
	s.autoPruneKeeping(3)
	s.startDispatcher(s.dispatcher(dispatcher.Config{}))
	s.start("pruned", "counter", map[string]any{"n": 1}, &store.Retention{Chain: store.ChainRetention{KeepLast: 5}})
	s.start("by-policy", "counter", map[string]any{"n": 1}, nil)
	s.start("kept", "counter", map[string]any{"n": 1}, &store.Retention{Chain: store.ChainRetention{AutoPrune: new(false)}})
	for id, want := range map[string]int{"pruned": 5, "by-policy": 3, "kept": 100} {
		in := s.waitDone(id)
		require.Equal(t, store.StatusCompleted, in.Status, in.Error)
		require.Equal(t, "100", string(in.Output))
		require.Equal(t, int64(100), in.CurrentExecutionID)
		// The prune runs right after the ack that ends the chain.
		var executions []store.Execution
		s.waitFor(fmt.Sprintf("%s to keep %d executions", id, want), func() bool {
			var err error
			executions, err = s.store.ListExecutions(t.Context(), &store.ListExecutionsParams{TenantID: tenant, InstanceID: id})
			require.NoError(t, err)
			return len(executions) == want
		})
		require.Equal(t, int64(100), executions[len(executions)-1].ExecutionID)
	}
}

// A turn that cannot run ends the instance Failed with the reason, once:
// an instance of a name nobody registered, and a child whose definition is
// missing, whose parent learns of it.
func TestMissingDefinitionFails(t *testing.T) {
	t.Parallel()
	s := newSystem(t, `
name: parent
version: 1
steps:
  - id: kid
    continue_on_error: true
    sub_orchestration: { name: ghost, input: 1 }
  - return: ${ steps.kid.error.message }
`)
	d := s.dispatcher(dispatcher.Config{})
	s.startDispatcher(d)
	s.start("orphan", "nobody", nil, nil)
	in := s.waitDone("orphan")
	require.Equal(t, store.StatusFailed, in.Status)
	require.Contains(t, in.Error, "no definition nobody")
	require.Equal(t, []string{"execution_started", "execution_failed"}, s.history("orphan", 1))

	s.start("parent", "parent", nil, nil)
	in = s.waitDone("parent")
	require.Equal(t, store.StatusCompleted, in.Status, in.Error)
	require.Contains(t, string(in.Output), "no definition ghost")
	child := s.instance("parent:1:2")
	require.Equal(t, store.StatusFailed, child.Status)
}

// Cancelling a parent reaches its running child and the child's activity.
func TestCancelReachesChildren(t *testing.T) {
	t.Parallel()
	s := newSystem(t, `
name: parent
version: 1
steps:
  - sub_orchestration: { name: child, instance_id: kid }
`, `
name: child
version: 1
steps:
  - activity: { name: forever, task_queue: q }
`)
	s.startDispatcher(s.dispatcher(dispatcher.Config{}))
	cancelled := make(chan struct{})
	s.worker(func(ctx context.Context, task *store.WorkItem) (any, error) {
		s.blocked.Add(1)
		defer s.blocked.Add(-1)
		<-ctx.Done()
		close(cancelled)
		return nil, ctx.Err()
	}, "q")
	s.start("parent", "parent", nil, nil)
	s.waitFor("the child's activity to start", func() bool { return s.rows("worker_queue") == 1 && s.blocked.Load() == 1 })

	kind, payload, err := engine.EncodeMessage(engine.CancelMessage{Reason: "customer asked"})
	require.NoError(t, err)
	_, err = s.store.Enqueue(t.Context(), &store.EnqueueParams{TenantID: tenant, InstanceID: "parent", Message: store.Message{Kind: kind, Payload: payload}})
	require.NoError(t, err)
	for _, id := range []string{"parent", "kid"} {
		require.Equal(t, store.StatusCancelled, s.waitDone(id).Status, id)
	}
	<-cancelled
	require.Zero(t, s.rows("worker_queue"))
}

// A drain lets the turns in flight finish and loses nothing; a drain whose
// deadline passes abandons them, and another dispatcher finishes them.
func TestDrain(t *testing.T) {
	t.Parallel()
	for _, deadline := range []bool{false, true} {
		t.Run(fmt.Sprintf("deadline passes %v", deadline), func(t *testing.T) {
			t.Parallel()
			s := newSystem(t, oneActivity)
			const n = 40
			for i := range n {
				s.start(fmt.Sprintf("i-%02d", i), "one", i, nil)
			}
			d := s.dispatcher(dispatcher.Config{Loops: 4, Batch: 4})
			inFlight := make(chan struct{}, 4)
			release := make(chan struct{})
			d.SetBeforeAck(func(ctx context.Context, items []*store.OrchestrationItem) {
				select {
				case inFlight <- struct{}{}:
				default:
				}
				select {
				case <-release:
				case <-ctx.Done():
				}
			})
			require.NoError(t, d.Start(t.Context()))
			<-inFlight
			stopped := make(chan error, 1)
			stopCtx, cancel := context.WithCancel(t.Context())
			defer cancel()
			go func() { stopped <- d.Stop(stopCtx) }()
			if deadline {
				cancel()
				require.ErrorIs(t, <-stopped, context.Canceled)
				// The turns cut short released their leases (into the
				// short delay of an abandon), rather than leaving them to
				// run out: no instance waits for the drained dispatcher.
				var held int
				require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT count(*) FROM instance_leases WHERE tenant_id = $1 AND leased_until > $2`,
					tenant, s.clock.Now().Add(time.Second).UnixMilli()).Scan(&held))
				require.Zero(t, held)
			} else {
				close(release)
				require.NoError(t, <-stopped)
				require.Positive(t, d.Stats().Turns)
			}

			// Another dispatcher finishes everything; nothing was lost or
			// written twice.
			s.startDispatcher(s.dispatcher(dispatcher.Config{}))
			s.worker(echo, "q")
			for i := range n {
				id := fmt.Sprintf("i-%02d", i)
				require.Equal(t, store.StatusCompleted, s.waitDone(id).Status)
				require.Equal(t, oneActivityHistory, s.history(id, 1), id)
			}
		})
	}
}

// A turn that fails (here a child id an expression left empty) ends its own
// execution Failed and does not hold up the turns batched with it.
func TestUnstorableDecisionFailsItsInstanceOnly(t *testing.T) {
	t.Parallel()
	s := newSystem(t, oneActivity, `
name: bad
version: 1
steps:
  - sub_orchestration: { name: one, instance_id: "${ input.id }" }
`)
	for i := range 6 {
		s.start(fmt.Sprintf("good-%d", i), "one", i, nil)
	}
	s.start("bad", "bad", map[string]any{"id": ""}, nil)
	s.startDispatcher(s.dispatcher(dispatcher.Config{Loops: 1, Batch: 16}))
	s.worker(echo, "q")
	in := s.waitDone("bad")
	require.Equal(t, store.StatusFailed, in.Status)
	require.Contains(t, in.Error, "is not an instance id")
	for i := range 6 {
		require.Equal(t, store.StatusCompleted, s.waitDone(fmt.Sprintf("good-%d", i)).Status)
	}
}

// A turn that runs longer than a third of its lease renews it, and the turn
// is recorded as a span with its tenant, instance, events and outcome.
func TestLongTurnRenewsLeaseAndIsTraced(t *testing.T) {
	t.Parallel()
	s := newSystem(t, oneActivity)
	s.start("slow", "one", 1, nil)
	spans := tracetest.NewSpanRecorder()
	d := s.dispatcher(dispatcher.Config{Loops: 1, LeaseDuration: 90 * time.Millisecond,
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))})
	var once sync.Once
	d.SetBeforeAck(func(ctx context.Context, items []*store.OrchestrationItem) {
		once.Do(func() {
			// The store's clock moves on, within the lease; a renewal
			// extends it from the new time.
			s.clock.Advance(60 * time.Millisecond)
			want := s.clock.Now().Add(90 * time.Millisecond).UnixMilli()
			s.waitFor("the lease to be renewed", func() bool {
				var until int64
				require.NoError(t, s.pool.QueryRow(ctx, `SELECT leased_until FROM instance_leases WHERE tenant_id = $1 AND instance_id = 'slow'`, tenant).Scan(&until))
				return until == want
			})
		})
	})
	s.startDispatcher(d)
	s.worker(echo, "q")
	require.Equal(t, store.StatusCompleted, s.waitDone("slow").Status)
	require.Zero(t, d.Stats().LeaseLosses)

	s.waitFor("both turns' spans", func() bool { return len(spans.Ended()) >= 2 })
	outcomes := map[string]bool{}
	for _, span := range spans.Ended() {
		require.Equal(t, "orchestration turn", span.Name())
		attrs := map[string]string{}
		for _, kv := range span.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		require.Equal(t, tenant, attrs["orchard.tenant"])
		require.Equal(t, "slow", attrs["orchard.instance"])
		require.Equal(t, "1", attrs["orchard.execution"])
		require.NotEmpty(t, attrs["orchard.events_appended"])
		outcomes[attrs["orchard.outcome"]] = true
	}
	require.Equal(t, map[string]bool{"Running": true, "Completed": true}, outcomes)
}

// An execution whose history would pass the tenant's limit ends Failed,
// saying why, instead of growing without bound.
func TestHistoryLimitEndsTheExecution(t *testing.T) {
	t.Parallel()
	s := newSystem(t, `
name: chatty
version: 1
steps:
  - for_each:
      items: ${ [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] }
      steps:
        - activity: { name: echo, task_queue: q, input: "${ item }" }
`)
	_, err := s.store.UpdateTenant(t.Context(), &store.UpdateTenantParams{TenantID: tenant,
		Limits: &store.Limits{MaxHistoryEventsPerExecution: 12}})
	require.NoError(t, err)
	s.startDispatcher(s.dispatcher(dispatcher.Config{}))
	s.worker(echo, "q")
	s.start("chatty", "chatty", nil, nil)
	in := s.waitDone("chatty")
	require.Equal(t, store.StatusFailed, in.Status)
	require.Contains(t, in.Error, "limit of 12 events")
	require.LessOrEqual(t, len(s.history("chatty", 1)), 12+3, "the history stops just past the limit")
}

// A poison instance (its turns keep killing their process before they end)
// is failed after MaxTurnAttempts such turns, each run alone, instead of
// run again: one instance must not crash-loop every dispatcher. The
// instances leased with it, whose leases lapse with it each time, are not
// counted: their turns never ran alone and died.
func TestPoisonInstanceIsFailed(t *testing.T) {
	t.Parallel()
	s := newSystem(t, oneActivity)
	s.start("poison", "one", "x", nil)
	s.start("healthy", "one", "x", nil)
	// Four processes in a row lease both instances and die: the first in a
	// batch of both (nothing tells which turn killed it), the next three
	// in the poison one's turn, run alone after a strike, as runSuspect
	// does.
	for round := range 4 {
		items, err := s.store.FetchOrchestrationItems(t.Context(), &store.FetchOrchestrationItemsParams{
			FetchOrchestrationItemParams: store.FetchOrchestrationItemParams{TenantID: tenant, LeaseDuration: time.Minute}, Max: 2})
		require.NoError(t, err)
		require.Len(t, items, 2)
		for _, it := range items {
			require.Equal(t, int64(round+1), it.Claims)
			if it.Lease.InstanceID == "poison" && round > 0 {
				strikes, err := s.store.StrikeOrchestrationLease(t.Context(), it.Lease)
				require.NoError(t, err)
				require.Equal(t, int64(round), strikes)
			}
		}
		s.clock.Advance(time.Minute + time.Millisecond)
	}
	s.startDispatcher(s.dispatcher(dispatcher.Config{Loops: 1, LeaseDuration: time.Minute}))
	s.worker(echo, "q")
	in := s.waitDone("poison")
	require.Equal(t, store.StatusFailed, in.Status)
	require.Equal(t, "the instance's last 3 turns, each run alone, died before they ended (the dispatcher crashed or overran its lease); it is failed rather than run again", in.Error)
	require.Equal(t, store.StatusCompleted, s.waitDone("healthy").Status, "an instance whose leases lapsed with its dispatcher is not counted")
	// The ack that ended it took its lease row, strike and all.
	var leases int64
	require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT count(*) FROM instance_leases WHERE tenant_id = $1 AND instance_id = 'healthy'`, tenant).Scan(&leases))
	require.Zero(t, leases, "the ended instance kept its lease row")
}

// Instances whose leases lapsed (their dispatcher died) run again, each
// alone, in a batch of its own, after a strike on its lease that the ack
// clears: the next death, if it comes, is charged to that instance only.
func TestSuspectsRunAloneAfterAStrike(t *testing.T) {
	t.Parallel()
	s := newSystem(t, oneActivity)
	const n = 3
	for i := range n {
		s.start(fmt.Sprintf("i-%d", i), "one", i, nil)
	}
	items, err := s.store.FetchOrchestrationItems(t.Context(), &store.FetchOrchestrationItemsParams{
		FetchOrchestrationItemParams: store.FetchOrchestrationItemParams{TenantID: tenant, LeaseDuration: time.Minute}, Max: n})
	require.NoError(t, err)
	require.Len(t, items, n)
	s.clock.Advance(time.Minute + time.Millisecond)

	d := s.dispatcher(dispatcher.Config{Loops: 2, Batch: n, LeaseDuration: time.Minute})
	var mu sync.Mutex
	acked := map[string]int64{} // instance → its strikes when its suspect turn was acked
	d.SetBeforeAck(func(ctx context.Context, items []*store.OrchestrationItem) {
		if items[0].Claims < 2 {
			return
		}
		var strikes int64 = -1 // a suspect acked with others
		if len(items) == 1 {
			require.NoError(t, s.pool.QueryRow(ctx, `SELECT strikes FROM instance_leases WHERE tenant_id = $1 AND instance_id = $2`,
				tenant, items[0].Lease.InstanceID).Scan(&strikes))
		}
		mu.Lock()
		acked[items[0].Lease.InstanceID] = strikes
		mu.Unlock()
	})
	s.startDispatcher(d)
	s.worker(echo, "q")
	for i := range n {
		require.Equal(t, store.StatusCompleted, s.waitDone(fmt.Sprintf("i-%d", i)).Status)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int64{"i-0": 1, "i-1": 1, "i-2": 1}, acked)
	var strikes int64
	require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT COALESCE(sum(strikes), 0) FROM instance_leases WHERE tenant_id = $1`, tenant).Scan(&strikes))
	require.Zero(t, strikes)
}

// An orchestration that builds a value past the tenant's limit fails with the
// reason; so does a turn that runs past the tenant's time budget. Neither
// takes the dispatcher down.
func TestTenantLimitsEndTheExecution(t *testing.T) {
	t.Parallel()
	var doubling strings.Builder
	doubling.WriteString("name: doubling\nversion: 1\nsteps:\n  - set: { v1: \"0123456789abcdef\" }\n")
	for i := 2; i <= 30; i++ {
		fmt.Fprintf(&doubling, "  - set: { v%d: \"${ [vars.v%d, vars.v%d] }\" }\n", i, i-1, i-1)
	}
	s := newSystem(t, doubling.String(), `
name: slow
version: 1
steps:
  - for_each:
      items: "${ input }"
      steps:
        - for_each:
            items: "${ input }"
            steps:
              - set: { x: "${ item }" }
`)
	setLimits := func(limits store.Limits) {
		_, err := s.store.UpdateTenant(t.Context(), &store.UpdateTenantParams{TenantID: tenant, Limits: &limits})
		require.NoError(t, err)
	}
	// Each dispatcher reads the limits afresh.
	setLimits(store.Limits{MaxValueBytes: 100000})
	d := s.dispatcher(dispatcher.Config{})
	s.startDispatcher(d)
	s.start("doubling", "doubling", nil, nil)
	in := s.waitDone("doubling")
	require.Equal(t, store.StatusFailed, in.Status)
	require.Equal(t, "steps[13].set.v14: ${ [vars.v13, vars.v13] }: the value is larger than the limit of 100000 bytes", in.Error)
	s.stopDispatcher(d)

	setLimits(store.Limits{TurnBudgetMillis: 1})
	s.startDispatcher(s.dispatcher(dispatcher.Config{}))
	// 90,000 iterations take far longer than a millisecond on any machine.
	s.start("slow", "slow", make([]int, 300), nil)
	in = s.waitDone("slow")
	require.Equal(t, store.StatusFailed, in.Status)
	require.Equal(t, "the turn ran longer than the tenant's budget of 1ms", in.Error)
}
