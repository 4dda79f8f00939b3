// Package storetest is the conformance suite of the store contract: the
// seeds' test plan for the runtime protocol, written once and run against
// every implementation and every database the tests can reach. An
// implementation's tests call Run with a factory that hands each test a
// fresh, empty store driven by the given clock.
//
// The suite uses only the contract (pkg/store); it never reaches into an
// implementation's tables.
package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/store"
)

// Factory returns a fresh, empty store whose times come from clock.
type Factory func(t *testing.T, clock store.Clock) store.Store

// InvariantChecker is what every store under the suite implements: a
// check of the rules its derived state keeps (counters, indexes of its own,
// schedules), which the suite runs after every case, on what the case
// left behind. The rules are the implementation's; the suite only asks.
type InvariantChecker interface {
	CheckInvariants(ctx context.Context) error
}

// RequireInvariants fails t when s does not implement InvariantChecker or
// one of its rules is broken. It may run in a cleanup, after t's context
// ended.
func RequireInvariants(t testing.TB, s store.Store) {
	t.Helper()
	c, ok := s.(InvariantChecker)
	require.True(t, ok, "%T does not check its invariants (storetest.InvariantChecker)", s)
	require.NoError(t, c.CheckInvariants(context.WithoutCancel(t.Context())))
}

// Run runs the whole suite.
func Run(t *testing.T, newStore Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"StartAndFetch", testStartAndFetch},
		{"FetchCarriesRetention", testFetchCarriesRetention},
		{"StartTakenID", testStartTakenID},
		{"StartMaxRunning", testStartMaxRunning},
		{"EagerStart", testEagerStart},
		{"EagerCompletion", testEagerCompletion},
		{"HeldStart", testHeldStart},
		{"FirstTurnWrittenWithItsStart", testFirstTurn},
		{"HeldCompletion", testHeldCompletion},
		{"AheadCompletion", testAheadCompletion},
		{"NextTurnWrittenWithItsCompletion", testNextTurn},
		{"EnqueueMissingInstance", testEnqueueMissingInstance},
		{"EnqueueTerminalInstance", testEnqueueTerminalInstance},
		{"WithdrawMessages", testWithdrawMessages},
		{"ExactlyOnceDelivery", testExactlyOnceDelivery},
		{"InvisibleUntilVisibleAt", testInvisibleUntilVisibleAt},
		{"NothingToFetch", testNothingToFetch},
		{"ExpiredLeaseTakenOver", testExpiredLeaseTakenOver},
		{"RenewKeepsLease", testRenewKeepsLease},
		{"LostLeaseAckWritesNothing", testLostLeaseAckWritesNothing},
		{"BatchFetchAndAck", testBatchFetchAndAck},
		{"AbandonWithDelay", testAbandonWithDelay},
		{"LeasedMessagesComeBack", testLeasedMessagesComeBack},
		{"AckFailurePartWayLeavesNothing", testAckFailurePartWay},
		{"AckTerminalStatus", testAckTerminalStatus},
		{"LateMessagesToEndedInstance", testLateMessagesToEndedInstance},
		{"AckEndsAndContinuesTogether", testAckEndsAndContinuesTogether},
		{"ContinueAsNew", testContinueAsNew},
		{"ChildStart", testChildStart},
		{"ZombieMessagesConsumed", testZombieMessagesConsumed},
		{"ZombieMessagesConsumedBesideWork", testZombieMessagesConsumedBesideWork},
		{"TenantIsolation", testTenantIsolation},
		{"FairnessAcrossTenants", testFairnessAcrossTenants},
		{"ClaimServesTenantsInTurn", testClaimServesTenantsInTurn},
		{"SuspendedTenantsWait", testSuspendedTenantsWait},
		{"WorkItemLifecycle", testWorkItemLifecycle},
		{"WorkItemAbandonAndExpiry", testWorkItemAbandonAndExpiry},
		{"WorkItemInsertedLeased", testWorkItemInsertedLeased},
		{"WorkItemsForAllTenants", testWorkItemsForAllTenants},
		{"WorkItemBatch", testWorkItemBatch},
		{"WorkItemBatchIsolation", testWorkItemBatchIsolation},
		{"WorkItemBatchesRace", testWorkItemBatchesRace},
		{"CancelledActivitiesDeleted", testCancelledActivitiesDeleted},
		{"RenewFailsAfterCancellation", testRenewFailsAfterCancellation},
		{"UnlockedCancelledActivityNeverFetched", testUnlockedCancelledNeverFetched},
		{"AckWorkItemFailsAfterCancellation", testAckWorkItemFailsAfterCancellation},
		{"AckWorkItemSucceeds", testAckWorkItemSucceeds},
		{"MassCancellation", testMassCancellation},
		{"InvalidArguments", testInvalidArguments},
		{"DeleteTerminalInstances", testDeleteTerminalInstances},
		{"DeleteRunningNeedsForce", testDeleteRunningNeedsForce},
		{"DeleteMissingInstance", testDeleteMissingInstance},
		{"ForceDeleteThenAckFails", testForceDeleteThenAckFails},
		{"IdentityReuseAfterDelete", testIdentityReuseAfterDelete},
		{"ZombiesAfterDelete", testZombiesAfterDelete},
		{"CascadeDeleteAndSubOrchestrationRefused", testCascadeDeleteAndSubOrchestrationRefused},
		{"DeleteInstancesAtomic", testDeleteInstancesAtomic},
		{"BulkDeleteFilters", testBulkDeleteFilters},
		{"BulkDeleteRetentionAndCascade", testBulkDeleteRetentionAndCascade},
		{"DeleteExpiredJudgesRootsAgain", testDeleteExpiredJudgesRootsAgain},
		{"ExpiryScansReadOneRule", testExpiryScansReadOneRule},
		{"PruneOptions", testPruneOptions},
		{"PruneBulk", testPruneBulk},
		{"ListFilters", testListFilters},
		{"ListPositions", testListPositions},
		{"ListPaginationUnderChurn", testListPaginationUnderChurn},
		{"Definitions", testDefinitions},
		{"Tenants", testTenants},
		{"InstanceRetentionOverride", testInstanceRetentionOverride},
		{"Usage", testUsage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			s := newStore(t, clock)
			// Also when the case failed: a broken rule often says why.
			t.Cleanup(func() { RequireInvariants(t, s) })
			tc.fn(t, &harness{t: t, s: s, clock: clock})
		})
	}
}

// ManualClock is a clock that moves only when told to.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a clock stopped at start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

const (
	lease     = 30 * time.Second
	kindStart = "start"
	kindEvent = "event"
	kindDone  = "activity_completed"
	queue     = "default"
)

// harness holds a test's store and clock and the steps tests share.
type harness struct {
	t     *testing.T
	s     store.Store
	clock *ManualClock
}

func (h *harness) ctx() context.Context { return h.t.Context() }

// invariants checks the store's rules in the middle of a case, at a state
// the end of the case would not show.
func (h *harness) invariants() {
	h.t.Helper()
	RequireInvariants(h.t, h.s)
}

func (h *harness) tenant(id string) string {
	h.t.Helper()
	require.NoError(h.t, h.s.CreateTenant(h.ctx(), &store.CreateTenantParams{TenantID: id}))
	return id
}

func (h *harness) start(tenant, id string) {
	h.t.Helper()
	_, err := h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{
		TenantID: tenant, InstanceID: id, Name: "order", Version: "1",
		Input: []byte(`{"n":1}`), Tags: map[string]string{"team": "a"},
		Start: store.Message{Kind: kindStart, Payload: []byte(`{"input":{"n":1}}`)},
	})
	require.NoError(h.t, err)
}

func (h *harness) enqueue(tenant, id, payload string, delay time.Duration) {
	h.t.Helper()
	_, err := h.s.Enqueue(h.ctx(), &store.EnqueueParams{
		TenantID: tenant, InstanceID: id, Message: store.Message{Kind: kindEvent, Payload: []byte(payload)}, Delay: delay,
	})
	require.NoError(h.t, err)
}

func (h *harness) fetch(tenant string) *store.OrchestrationItem {
	h.t.Helper()
	item, err := h.s.FetchOrchestrationItem(h.ctx(), &store.FetchOrchestrationItemParams{TenantID: tenant, LeaseDuration: lease})
	require.NoError(h.t, err)
	return item
}

func (h *harness) mustFetch(tenant, instance string) *store.OrchestrationItem {
	h.t.Helper()
	item := h.fetch(tenant)
	require.NotNil(h.t, item, "expected work for %s", instance)
	require.Equal(h.t, instance, item.Lease.InstanceID)
	return item
}

// fetchInstance fetches until it leases the given instance, letting go of
// the others it gets: fetches pick at random among the oldest work.
func (h *harness) fetchInstance(tenant, instance string) *store.OrchestrationItem {
	h.t.Helper()
	for range 100 {
		item := h.fetch(tenant)
		require.NotNil(h.t, item, "expected work for %s", instance)
		if item.Lease.InstanceID == instance {
			return item
		}
		require.NoError(h.t, h.s.AbandonOrchestrationItem(h.ctx(), &store.AbandonOrchestrationItemParams{Lease: item.Lease}))
	}
	h.t.Fatalf("never fetched %s", instance)
	return nil
}

// turn is an ack that consumes everything fetched and appends one history
// event per message, as a dispatcher's turn would.
func turn(item *store.OrchestrationItem) *store.AckOrchestrationItemParams {
	p := &store.AckOrchestrationItemParams{
		Lease:       item.Lease,
		ExecutionID: item.Instance.CurrentExecutionID,
		Status:      store.StatusRunning,
	}
	next := int64(len(item.History)) + 1
	for _, m := range item.Messages {
		p.MessageIDs = append(p.MessageIDs, m.ID)
		p.History = append(p.History, store.HistoryEvent{EventID: next, Kind: "received_" + m.Kind, Payload: m.Payload})
		next++
	}
	return p
}

func (h *harness) ack(p *store.AckOrchestrationItemParams) {
	h.t.Helper()
	require.NoError(h.t, h.s.AckOrchestrationItem(h.ctx(), p))
}

func (h *harness) instance(tenant, id string) *store.Instance {
	h.t.Helper()
	in, err := h.s.GetInstance(h.ctx(), &store.GetInstanceParams{TenantID: tenant, InstanceID: id})
	require.NoError(h.t, err)
	return in
}

func (h *harness) history(tenant, id string, exec int64) []store.HistoryEvent {
	h.t.Helper()
	events, err := h.s.GetHistory(h.ctx(), &store.GetHistoryParams{TenantID: tenant, InstanceID: id, ExecutionID: exec})
	require.NoError(h.t, err)
	return events
}

// scheduleActivities runs the first turn of a new instance, which schedules
// n activities with ids 2..n+1, and returns the item of the instance's
// next turn as the turn's ack left it (store.AckOrchestrationItemParams.Next).
func (h *harness) scheduleActivities(tenant, id string, n int) *store.OrchestrationItem {
	h.t.Helper()
	return h.scheduleActivitiesOn(tenant, id, queue, n)
}

// scheduleActivitiesOn is scheduleActivities on task queue q.
func (h *harness) scheduleActivitiesOn(tenant, id, q string, n int) *store.OrchestrationItem {
	h.t.Helper()
	h.start(tenant, id)
	item := h.fetchInstance(tenant, id)
	p := turn(item)
	for i := range n {
		activityID := int64(len(p.History)) + 1
		p.History = append(p.History, store.HistoryEvent{EventID: activityID, Kind: "activity_scheduled"})
		p.Activities = append(p.Activities, store.ActivityTask{
			ActivityID: activityID, Name: fmt.Sprintf("charge-%d", i), TaskQueue: q, Input: []byte(`{}`), Attempt: 1,
		})
	}
	h.ack(p)
	next, ok := p.Next(item)
	require.True(h.t, ok, "the turn that schedules left no next item")
	return next
}

// fetchWork leases one task of the tenant's queue (of any tenant when
// empty), or returns nil when there is none.
func (h *harness) fetchWork(tenant string) *store.WorkItem {
	h.t.Helper()
	return h.fetchWorkFrom(&store.FetchWorkItemsParams{TenantID: tenant, TaskQueue: queue, LeaseDuration: lease})
}

// fetchWorkFrom leases one task as p says (Max left at 0, which is 1), or
// returns nil when there is none.
func (h *harness) fetchWorkFrom(p *store.FetchWorkItemsParams) *store.WorkItem {
	h.t.Helper()
	items, err := h.s.FetchWorkItems(h.ctx(), p)
	require.NoError(h.t, err)
	require.LessOrEqual(h.t, len(items), 1, "a fetch of one task leased more")
	if len(items) == 0 {
		return nil
	}
	return items[0]
}

// cancel runs a turn on the instance that cancels the given activities.
func (h *harness) cancel(tenant, id string, activityIDs ...int64) {
	h.t.Helper()
	h.enqueue(tenant, id, `"cancel"`, 0)
	item := h.mustFetch(tenant, id)
	p := turn(item)
	p.CancelActivities = activityIDs
	h.ack(p)
}
