package storetest

import (
	"testing"
	"time"

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
	other, err := h.s.FetchWorkItem(h.ctx(), &store.FetchWorkItemParams{TenantID: tenant, TaskQueue: "other", LeaseDuration: lease})
	require.NoError(t, err)
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

func testWorkItemsForAllTenants(t *testing.T, h *harness) {
	a, b := h.tenant("tenant-a"), h.tenant("tenant-b")
	h.scheduleActivities(a, "a", 5)
	h.scheduleActivities(b, "b", 2)
	var order []string
	for {
		w, err := h.s.FetchWorkItem(h.ctx(), &store.FetchWorkItemParams{TaskQueue: queue, LeaseDuration: lease})
		require.NoError(t, err)
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
