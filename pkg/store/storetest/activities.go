package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/store"
)

func testWorkItemLifecycle(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.scheduleActivities(tenant, "order", 1)

	w := h.fetchWork(tenant)
	require.NotNil(t, w)
	require.Equal(t, "order", w.InstanceID)
	require.Equal(t, int64(1), w.ExecutionID)
	require.Equal(t, int64(2), w.ActivityID)
	require.Equal(t, "charge-0", w.Name)
	require.Equal(t, queue, w.TaskQueue)
	require.Equal(t, 1, w.Attempt)
	require.Equal(t, h.clock.Now().Add(lease), w.Lease.ExpiresAt)
	require.Nil(t, h.fetchWork(tenant), "a leased task was handed out twice")
	other := h.fetchWorkFrom(&store.FetchWorkItemsParams{TenantID: tenant, TaskQueue: "other", LeaseDuration: lease})
	require.Nil(t, other, "a task was handed out on the wrong task queue")

	h.clock.Advance(lease - time.Second)
	until, err := h.s.RenewWorkItemLease(h.ctx(), &store.RenewWorkItemLeaseParams{Lease: w.Lease, Duration: lease})
	require.NoError(t, err)
	require.Equal(t, h.clock.Now().Add(lease), until)
	h.clock.Advance(lease - time.Second)
	require.Nil(t, h.fetchWork(tenant), "a renewed lease was taken over")
	require.NoError(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w.Lease, Result: &store.Message{Kind: kindDone, Payload: []byte(`{"paid":true}`)}}))
	require.ErrorIs(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w.Lease, Result: &store.Message{Kind: kindDone}}), store.ErrLeaseLost,
		"a second ack of the same task succeeded")

	item := h.mustFetch(tenant, "order")
	require.Len(t, item.Messages, 1)
	require.Equal(t, kindDone, item.Messages[0].Kind)
	require.Equal(t, int64(1), item.Messages[0].ExecutionID)
	require.JSONEq(t, `{"paid":true}`, string(item.Messages[0].Payload))
}

func testWorkItemAbandonAndExpiry(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.scheduleActivities(tenant, "order", 1)

	w := h.fetchWork(tenant)
	require.NoError(t, h.s.AbandonWorkItem(h.ctx(), &store.AbandonWorkItemParams{Lease: w.Lease, Delay: 10 * time.Second}))
	require.Nil(t, h.fetchWork(tenant))
	_, err := h.s.RenewWorkItemLease(h.ctx(), &store.RenewWorkItemLeaseParams{Lease: w.Lease, Duration: lease})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	h.clock.Advance(10 * time.Second)

	w2 := h.fetchWork(tenant)
	require.NotNil(t, w2)
	require.NotEqual(t, w.Lease.Token, w2.Lease.Token)

	// A lapsed lease lets another worker take the task; the first worker's
	// renew and ack then fail.
	h.clock.Advance(lease)
	w3 := h.fetchWork(tenant)
	require.NotNil(t, w3)
	_, err = h.s.RenewWorkItemLease(h.ctx(), &store.RenewWorkItemLeaseParams{Lease: w2.Lease, Duration: lease})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.ErrorIs(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w2.Lease, Result: &store.Message{Kind: kindDone}}), store.ErrLeaseLost)
	require.Nil(t, h.fetch(tenant), "a lost ack enqueued a completion")
	require.NoError(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w3.Lease}))
	require.Nil(t, h.fetch(tenant), "an ack without result enqueued something")
	require.Nil(t, h.fetchWork(tenant))
}

// A task the ack inserts leased (handed to a waiting poll) is the poll's
// until its lease lapses: no fetch takes it, its lease renews and acks; a
// turn that does not hold inserts nothing; a lease lapsed makes it visible
// like a claimed task's.
func testWorkItemInsertedLeased(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	leased := func() *store.WorkLease {
		return &store.WorkLease{ID: uuid.NewString(), Token: uuid.NewString(), ExpiresAt: h.clock.Now().Add(lease)}
	}
	scheduleLeased := func(id string, l *store.WorkLease) *store.AckOrchestrationItemParams {
		h.start(tenant, id)
		p := turn(h.fetchInstance(tenant, id))
		p.History = append(p.History, store.HistoryEvent{EventID: int64(len(p.History)) + 1, Kind: "activity_scheduled"})
		p.Activities = append(p.Activities, store.ActivityTask{
			ActivityID: int64(len(p.History)), Name: "charge", TaskQueue: queue, Input: []byte(`{}`), Attempt: 1, Lease: l,
		})
		return p
	}

	l := leased()
	h.ack(scheduleLeased("order", l))
	require.Nil(t, h.fetchWork(tenant), "a fetch took a task inserted leased")
	w := store.WorkLease{TenantID: tenant, ID: l.ID, Token: l.Token}
	until, err := h.s.RenewWorkItemLease(h.ctx(), &store.RenewWorkItemLeaseParams{Lease: w, Duration: lease})
	require.NoError(t, err, "the lease the task was inserted with does not renew")
	require.Equal(t, h.clock.Now().Add(lease), until)
	require.NoError(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w, Result: &store.Message{Kind: kindDone}}))
	item := h.mustFetch(tenant, "order")
	require.Len(t, item.Messages, 1)
	require.Equal(t, kindDone, item.Messages[0].Kind)

	// A turn whose lease was lost inserts nothing.
	lost := scheduleLeased("lost", leased())
	lost.Lease.Token = uuid.NewString()
	require.ErrorIs(t, h.s.AckOrchestrationItem(h.ctx(), lost), store.ErrLeaseLost)
	require.ErrorIs(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{
		Lease: store.WorkLease{TenantID: tenant, ID: lost.Activities[0].Lease.ID, Token: lost.Activities[0].Lease.Token}}), store.ErrLeaseLost)

	// Refused: a delay, or a lease without an expiry.
	bad := scheduleLeased("bad", leased())
	bad.Activities[0].Delay = time.Second
	require.ErrorIs(t, h.s.AckOrchestrationItem(h.ctx(), bad), store.ErrInvalidArgument)
	bad.Activities[0].Delay, bad.Activities[0].Lease.ExpiresAt = 0, time.Time{}
	require.ErrorIs(t, h.s.AckOrchestrationItem(h.ctx(), bad), store.ErrInvalidArgument)

	// When its lease lapses, a fetch takes it.
	l = leased()
	h.ack(scheduleLeased("lapsed", l))
	h.clock.Advance(lease)
	taken := h.fetchWork(tenant)
	require.NotNil(t, taken, "a task inserted leased stayed hidden after its lease lapsed")
	require.Equal(t, l.ID, taken.Lease.ID)
	require.Equal(t, "lapsed", taken.InstanceID)
}

func testWorkItemsForAllTenants(t *testing.T, h *harness) {
	a, b := h.tenant("tenant-a"), h.tenant("tenant-b")
	h.scheduleActivities(a, "a", 5)
	h.scheduleActivities(b, "b", 2)
	var order []string
	for {
		w := h.fetchWork("")
		if w == nil {
			break
		}
		order = append(order, w.Lease.TenantID)
		require.NoError(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w.Lease}))
	}
	require.Len(t, order, 7)
	// Tenants alternate while both have work.
	require.Equal(t, []string{a, b, a, b}, order[:4])
}

// Seed 004: cancellation deletes the task rows of the activities a turn names.
func testCancelledActivitiesDeleted(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.scheduleActivities(tenant, "race", 3) // activities 2, 3, 4
	h.cancel(tenant, "race", 2, 4)

	w := h.fetchWork(tenant)
	require.NotNil(t, w)
	require.Equal(t, int64(3), w.ActivityID)
	require.Nil(t, h.fetchWork(tenant), "a cancelled activity survived")
}

func testRenewFailsAfterCancellation(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.scheduleActivities(tenant, "race", 1)
	w := h.fetchWork(tenant)
	require.NotNil(t, w)
	_, err := h.s.RenewWorkItemLease(h.ctx(), &store.RenewWorkItemLeaseParams{Lease: w.Lease, Duration: lease})
	require.NoError(t, err)
	h.cancel(tenant, "race", w.ActivityID)
	_, err = h.s.RenewWorkItemLease(h.ctx(), &store.RenewWorkItemLeaseParams{Lease: w.Lease, Duration: lease})
	require.ErrorIs(t, err, store.ErrLeaseLost)
}

func testUnlockedCancelledNeverFetched(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.scheduleActivities(tenant, "race", 1)
	h.cancel(tenant, "race", 2)
	require.Nil(t, h.fetchWork(tenant))
	h.clock.Advance(time.Hour)
	require.Nil(t, h.fetchWork(tenant))
	require.Nil(t, h.fetchWork(""))
}

func testAckWorkItemFailsAfterCancellation(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.scheduleActivities(tenant, "race", 1)
	w := h.fetchWork(tenant)
	require.NotNil(t, w)
	h.cancel(tenant, "race", w.ActivityID)

	err := h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w.Lease, Result: &store.Message{Kind: kindDone}})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.Nil(t, h.fetch(tenant), "a completion was enqueued for a cancelled activity")
}

func testAckWorkItemSucceeds(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.scheduleActivities(tenant, "plain", 2)
	for range 2 {
		w := h.fetchWork(tenant)
		require.NotNil(t, w)
		require.NoError(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: w.Lease, Result: &store.Message{Kind: kindDone}}))
	}
	item := h.mustFetch(tenant, "plain")
	require.Len(t, item.Messages, 2)
}

func testMassCancellation(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.scheduleActivities(tenant, "fan-out", 50) // activities 2..51
	held := h.fetchWork(tenant)
	require.NotNil(t, held)
	ids := make([]int64, 0, 50)
	for id := int64(2); id <= 51; id++ {
		ids = append(ids, id)
	}
	h.cancel(tenant, "fan-out", ids...)
	require.Nil(t, h.fetchWork(tenant))
	_, err := h.s.RenewWorkItemLease(h.ctx(), &store.RenewWorkItemLeaseParams{Lease: held.Lease, Duration: lease})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.ErrorIs(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: held.Lease, Result: &store.Message{Kind: kindDone}}), store.ErrLeaseLost)
	require.Nil(t, h.fetch(tenant))
}

// fetchWorkBatch leases up to max tasks of a tenant (any tenant when
// empty) on task queue q.
func (h *harness) fetchWorkBatch(tenant, q string, max int) []*store.WorkItem {
	h.t.Helper()
	items, err := h.s.FetchWorkItems(h.ctx(), &store.FetchWorkItemsParams{TenantID: tenant, TaskQueue: q, LeaseDuration: lease, Max: max})
	require.NoError(h.t, err)
	require.LessOrEqual(h.t, len(items), max, "a fetch leased more tasks than it asked for")
	return items
}

// testWorkItemBatch: one fetch leases several tasks, never more than Max
// and never one that is leased, each with a lease of its own that is
// renewed, acked and lost on its own.
func testWorkItemBatch(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.scheduleActivities(tenant, "order", 12) // activities 2..13

	first := h.fetchWorkBatch(tenant, queue, 5)
	require.Len(t, first, 5)
	ids := map[string]bool{}
	activities := map[int64]bool{}
	for _, w := range first {
		require.Equal(t, tenant, w.Lease.TenantID)
		require.Equal(t, "order", w.InstanceID)
		require.Equal(t, queue, w.TaskQueue)
		require.Equal(t, 1, w.Attempt)
		require.NotEmpty(t, w.Lease.Token)
		require.Equal(t, h.clock.Now().Add(lease), w.Lease.ExpiresAt)
		ids[w.Lease.ID] = true
		activities[w.ActivityID] = true
	}
	require.Len(t, ids, 5, "a task was leased twice in one batch")
	require.Len(t, activities, 5)

	rest := h.fetchWorkBatch(tenant, queue, 100)
	require.Len(t, rest, 7, "the other tasks, and none of the leased ones")
	for _, w := range rest {
		require.False(t, ids[w.Lease.ID], "a leased task was handed out again")
		activities[w.ActivityID] = true
	}
	require.Len(t, activities, 12)
	require.Empty(t, h.fetchWorkBatch(tenant, queue, 5), "a leased task was handed out again")

	// Each lease stands alone: one is acked, one renewed, the others lapse.
	require.NoError(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: first[0].Lease, Result: &store.Message{Kind: kindDone}}))
	h.clock.Advance(lease - time.Second)
	_, err := h.s.RenewWorkItemLease(h.ctx(), &store.RenewWorkItemLeaseParams{Lease: first[1].Lease, Duration: lease})
	require.NoError(t, err)
	h.clock.Advance(time.Second)
	again := h.fetchWorkBatch(tenant, queue, 20)
	require.Len(t, again, 10, "the lapsed leases, and neither the acked task nor the renewed one")
	for _, w := range again {
		require.NotEqual(t, first[0].Lease.ID, w.Lease.ID)
		require.NotEqual(t, first[1].Lease.ID, w.Lease.ID)
	}
	_, err = h.s.RenewWorkItemLease(h.ctx(), &store.RenewWorkItemLeaseParams{Lease: first[2].Lease, Duration: lease})
	require.ErrorIs(t, err, store.ErrLeaseLost, "a lapsed lease taken over by another fetch was renewed")
	require.NoError(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: first[1].Lease}))

	for _, max := range []int{-1, 1000} {
		_, err = h.s.FetchWorkItems(h.ctx(), &store.FetchWorkItemsParams{TenantID: tenant, TaskQueue: queue, LeaseDuration: lease, Max: max})
		require.ErrorIs(t, err, store.ErrInvalidArgument, "max %d", max)
	}
}

// testWorkItemBatchIsolation: a batch holds only tasks of its tenant and
// task queue; without a tenant, the tasks of one tenant, the tenants
// taking turns.
func testWorkItemBatchIsolation(t *testing.T, h *harness) {
	a, b := h.tenant("tenant-a"), h.tenant("tenant-b")
	h.scheduleActivities(a, "a", 3)
	h.scheduleActivitiesOn(a, "a-other", "other", 4)
	h.scheduleActivities(b, "b", 5)

	got := h.fetchWorkBatch(a, queue, 100)
	require.Len(t, got, 3)
	for _, w := range got {
		require.Equal(t, a, w.Lease.TenantID)
		require.Equal(t, "a", w.InstanceID)
		require.Equal(t, queue, w.TaskQueue)
	}
	got = h.fetchWorkBatch(a, "other", 100)
	require.Len(t, got, 4)
	for _, w := range got {
		require.Equal(t, a, w.Lease.TenantID)
		require.Equal(t, "other", w.TaskQueue)
	}
	require.Empty(t, h.fetchWorkBatch(a, queue, 100))
	require.Empty(t, h.fetchWorkBatch(a, "other", 100))

	// Tenant b's tasks were untouched; without a tenant, one tenant's
	// tasks per fetch.
	h.scheduleActivities(a, "a2", 2)
	tenants := map[string]int{}
	for range 2 {
		got = h.fetchWorkBatch("", queue, 100)
		require.NotEmpty(t, got)
		for _, w := range got {
			require.Equal(t, got[0].Lease.TenantID, w.Lease.TenantID, "one fetch leased the tasks of two tenants")
		}
		tenants[got[0].Lease.TenantID] = len(got)
	}
	require.Equal(t, map[string]int{a: 2, b: 5}, tenants)
	require.Empty(t, h.fetchWorkBatch("", queue, 100))
}

// testWorkItemBatchesRace: fetchers with batches of various sizes race over
// 200 tasks: each task is leased exactly once, no batch exceeds its Max,
// and another tenant's tasks stay where they are.
func testWorkItemBatchesRace(t *testing.T, h *harness) {
	const instances, perInstance, fetchers = 4, 50, 8
	tenant, other := h.tenant("acme"), h.tenant("other")
	for i := range instances {
		h.scheduleActivities(tenant, fmt.Sprintf("i-%d", i), perInstance)
	}
	h.scheduleActivities(other, "o", 3)

	var (
		mu     sync.Mutex
		leased = map[string]int{}
		total  atomic.Int64
		failed atomic.Bool
		errs   = make(chan error, fetchers)
		wg     sync.WaitGroup
	)
	deadline := time.Now().Add(2 * time.Minute)
	for f := range fetchers {
		wg.Go(func() {
			max := f*2 + 1 // 1, 3, ..., 15
			for total.Load() < instances*perInstance && !failed.Load() && time.Now().Before(deadline) {
				items, err := h.s.FetchWorkItems(h.ctx(), &store.FetchWorkItemsParams{TenantID: tenant, TaskQueue: queue, LeaseDuration: lease, Max: max})
				if err == nil && len(items) > max {
					err = fmt.Errorf("a fetch of at most %d leased %d", max, len(items))
				}
				if err != nil {
					failed.Store(true)
					errs <- err
					return
				}
				mu.Lock()
				for _, w := range items {
					if w.Lease.TenantID != tenant {
						mu.Unlock()
						failed.Store(true)
						errs <- fmt.Errorf("tenant %s's task %s leased by a fetch of %s", w.Lease.TenantID, w.Lease.ID, tenant)
						return
					}
					leased[w.Lease.ID]++
				}
				mu.Unlock()
				total.Add(int64(len(items)))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, leased, instances*perInstance)
	for id, n := range leased {
		require.Equal(t, 1, n, "task %s leased %d times", id, n)
	}
	require.Empty(t, h.fetchWorkBatch(tenant, queue, 100))
	require.Len(t, h.fetchWorkBatch(other, queue, 100), 3)
}
