package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/store"
)

// finish runs a turn of the instance that ends it with the given status.
func (h *harness) finish(tenant, id string, status store.Status) {
	h.t.Helper()
	h.enqueue(tenant, id, `"finish"`, 0)
	item := h.fetchInstance(tenant, id)
	p := turn(item)
	p.Status = status
	if status == store.StatusFailed || status == store.StatusCancelled {
		p.Error = "stopped"
	}
	h.ack(p)
}

// startChildren runs a turn of parent that starts the given children.
func (h *harness) startChildren(tenant, parent string, children ...string) {
	h.t.Helper()
	h.enqueue(tenant, parent, `"spawn"`, 0)
	item := h.fetchInstance(tenant, parent)
	p := turn(item)
	for _, c := range children {
		p.Children = append(p.Children, store.ChildStart{
			InstanceID: c, Name: "child", Start: store.Message{Kind: kindStart}, IfTaken: store.Message{Kind: "child_failed"},
		})
	}
	h.ack(p)
}

// drain runs a turn for every instance with work, without ending any.
func (h *harness) drain(tenant string) {
	h.t.Helper()
	for range 10_000 {
		item := h.fetch(tenant)
		if item == nil {
			return
		}
		h.ack(turn(item))
	}
}

func (h *harness) gone(tenant, id string) {
	h.t.Helper()
	_, err := h.s.GetInstance(h.ctx(), &store.GetInstanceParams{TenantID: tenant, InstanceID: id})
	require.ErrorIs(h.t, err, store.ErrNotFound, "instance %s still exists", id)
	_, err = h.s.GetHistory(h.ctx(), &store.GetHistoryParams{TenantID: tenant, InstanceID: id})
	require.ErrorIs(h.t, err, store.ErrNotFound)
	_, err = h.s.ListExecutions(h.ctx(), &store.ListExecutionsParams{TenantID: tenant, InstanceID: id})
	require.ErrorIs(h.t, err, store.ErrNotFound)
}

// requireCounts checks the counts by status of a whole tenant (which an
// implementation may keep as counters) against want and against the counts
// of a filter that selects every instance (which it must compute).
func (h *harness) requireCounts(tenant string, want map[store.Status]int64) {
	h.t.Helper()
	all, err := h.s.CountInstances(h.ctx(), &store.CountInstancesParams{TenantID: tenant})
	require.NoError(h.t, err)
	everything, err := h.s.CountInstances(h.ctx(), &store.CountInstancesParams{
		TenantID: tenant, Filter: store.InstanceFilter{CreatedAfter: new(time.UnixMilli(1))},
	})
	require.NoError(h.t, err)
	require.Equal(h.t, everything, all, "counts by status disagree with the instances")
	if want == nil {
		want = map[store.Status]int64{}
	}
	require.Equal(h.t, want, all.ByStatus)
	var total int64
	for _, n := range want {
		total += n
	}
	require.Equal(h.t, total, all.Total)
	for st, n := range want {
		one, err := h.s.CountInstances(h.ctx(), &store.CountInstancesParams{
			TenantID: tenant, Filter: store.InstanceFilter{Statuses: []store.Status{st}},
		})
		require.NoError(h.t, err)
		require.Equal(h.t, n, one.Total, "count of %s", st)
	}
}

func (h *harness) deleteInstance(tenant, id string, force bool) (*store.DeleteResult, error) {
	return h.s.DeleteInstance(h.ctx(), &store.DeleteInstanceParams{TenantID: tenant, InstanceID: id, Force: force})
}

func (h *harness) list(tenant string, f store.InstanceFilter, order store.Order) []string {
	h.t.Helper()
	var ids []string
	var after *store.InstancePosition
	for range 10_000 {
		page, err := h.s.ListInstances(h.ctx(), &store.ListInstancesParams{TenantID: tenant, Filter: f, Order: order, Limit: 3, After: after})
		require.NoError(h.t, err)
		for _, in := range page.Instances {
			ids = append(ids, in.InstanceID)
		}
		if page.Next == nil {
			return ids
		}
		after = page.Next
	}
	h.t.Fatal("listing never ended")
	return nil
}

func testDeleteTerminalInstances(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	for _, st := range []store.Status{store.StatusCompleted, store.StatusFailed, store.StatusCancelled} {
		id := "done-" + string(st)
		h.scheduleActivities(tenant, id, 2)
		h.enqueue(tenant, id, `"late"`, time.Hour) // a pending timer
		h.finish(tenant, id, st)
		res, err := h.deleteInstance(tenant, id, false)
		require.NoError(t, err)
		require.Equal(t, int64(1), res.InstancesDeleted)
		require.Equal(t, int64(1), res.ExecutionsDeleted)
		require.Equal(t, int64(4), res.EventsDeleted)        // the start, 2 scheduled, the finish
		require.Equal(t, int64(3), res.QueueMessagesDeleted) // 2 tasks and the timer
		h.gone(tenant, id)
	}
	require.Nil(t, h.fetchWork(tenant), "a deleted instance's task survived")
	h.clock.Advance(2 * time.Hour)
	require.Nil(t, h.fetch(tenant), "a deleted instance's timer survived")
}

func testDeleteRunningNeedsForce(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.scheduleActivities(tenant, "busy", 1)
	_, err := h.deleteInstance(tenant, "busy", false)
	require.ErrorIs(t, err, store.ErrInstanceRunning)
	require.Equal(t, store.StatusRunning, h.instance(tenant, "busy").Status)
	h.requireCounts(tenant, map[store.Status]int64{store.StatusRunning: 1})

	held := h.fetchWork(tenant)
	res, err := h.deleteInstance(tenant, "busy", true)
	require.NoError(t, err)
	require.Equal(t, int64(1), res.InstancesDeleted)
	h.gone(tenant, "busy")
	h.requireCounts(tenant, nil)
	// The worker holding the task learns of it.
	_, err = h.s.RenewWorkItemLease(h.ctx(), &store.RenewWorkItemLeaseParams{Lease: held.Lease, Duration: lease})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.ErrorIs(t, h.s.AckWorkItem(h.ctx(), &store.AckWorkItemParams{Lease: held.Lease, Result: &store.Message{Kind: kindDone}}), store.ErrLeaseLost)
	require.Nil(t, h.fetch(tenant), "a completion was enqueued for a deleted instance")
}

func testDeleteMissingInstance(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	res, err := h.deleteInstance(tenant, "never-was", false)
	require.NoError(t, err)
	require.Equal(t, store.DeleteResult{}, *res)
}

// Seed 000 §8.5: a turn in flight when its instance is force-deleted can
// never bring it back.
func testForceDeleteThenAckFails(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "doomed")
	item := h.mustFetch(tenant, "doomed")
	_, err := h.deleteInstance(tenant, "doomed", true)
	require.NoError(t, err)

	p := turn(item)
	p.Activities = []store.ActivityTask{{ActivityID: 2, Name: "charge", TaskQueue: queue}}
	p.Messages = []store.OutgoingMessage{{InstanceID: "doomed", Message: store.Message{Kind: kindEvent}}}
	p.Children = []store.ChildStart{{InstanceID: "doomed:child", Name: "c", Start: store.Message{Kind: kindStart}, IfTaken: store.Message{Kind: "x"}}}
	require.ErrorIs(t, h.s.AckOrchestrationItem(h.ctx(), p), store.ErrLeaseLost)
	h.gone(tenant, "doomed")
	h.gone(tenant, "doomed:child")
	require.Nil(t, h.fetchWork(tenant))
	require.Nil(t, h.fetch(tenant))
	_, err = h.s.RenewOrchestrationLease(h.ctx(), &store.RenewOrchestrationLeaseParams{Lease: item.Lease, Duration: lease})
	require.ErrorIs(t, err, store.ErrLeaseLost)
}

func testIdentityReuseAfterDelete(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.scheduleActivities(tenant, "again", 1)
	h.finish(tenant, "again", store.StatusCompleted)
	_, err := h.deleteInstance(tenant, "again", false)
	require.NoError(t, err)
	h.start(tenant, "again")
	in := h.instance(tenant, "again")
	require.Equal(t, int64(1), in.CurrentExecutionID)
	require.Equal(t, int64(0), in.EventCount)
	require.Equal(t, store.StatusRunning, in.Status)
	require.Empty(t, h.history(tenant, "again", 0))
	require.Nil(t, h.fetchWork(tenant))
	item := h.mustFetch(tenant, "again")
	require.Len(t, item.Messages, 1, "an old message leaked into the new instance")
}

func testZombiesAfterDelete(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "parent")
	h.drain(tenant)
	h.startChildren(tenant, "parent", "parent:1")
	h.drain(tenant)
	_, err := h.deleteInstance(tenant, "parent", true)
	require.NoError(t, err)

	// An event raised after the delete has no target.
	_, err = h.s.Enqueue(h.ctx(), &store.EnqueueParams{TenantID: tenant, InstanceID: "parent", Message: store.Message{Kind: kindEvent}})
	require.ErrorIs(t, err, store.ErrNotFound)
	// A message sent to it anyway (by an instance of another tree) is consumed.
	h.start(tenant, "other")
	item := h.mustFetch(tenant, "other")
	p := turn(item)
	p.Messages = []store.OutgoingMessage{{InstanceID: "parent", Message: store.Message{Kind: "child_completed"}}}
	h.ack(p)
	require.Nil(t, h.fetch(tenant))
	h.gone(tenant, "parent")
}

func testCascadeDeleteAndSubOrchestrationRefused(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "root")
	h.drain(tenant)
	h.startChildren(tenant, "root", "root:a", "root:b")
	h.drain(tenant)
	h.startChildren(tenant, "root:a", "root:a:x")
	h.drain(tenant)
	h.requireCounts(tenant, map[store.Status]int64{store.StatusRunning: 4})

	for _, force := range []bool{false, true} {
		_, err := h.deleteInstance(tenant, "root:a", force)
		require.ErrorIs(t, err, store.ErrSubOrchestration)
		_, err = h.deleteInstance(tenant, "root:a:x", force)
		require.ErrorIs(t, err, store.ErrSubOrchestration)
	}

	parent, err := h.s.GetParentID(h.ctx(), &store.GetParentIDParams{TenantID: tenant, InstanceID: "root:a:x"})
	require.NoError(t, err)
	require.Equal(t, "root:a", parent)
	parent, err = h.s.GetParentID(h.ctx(), &store.GetParentIDParams{TenantID: tenant, InstanceID: "root"})
	require.NoError(t, err)
	require.Empty(t, parent)
	_, err = h.s.GetParentID(h.ctx(), &store.GetParentIDParams{TenantID: tenant, InstanceID: "nope"})
	require.ErrorIs(t, err, store.ErrNotFound)
	children, err := h.s.ListChildren(h.ctx(), &store.ListChildrenParams{TenantID: tenant, InstanceID: "root"})
	require.NoError(t, err)
	require.Equal(t, []string{"root:a", "root:b"}, children)
	tree, err := h.s.GetInstanceTree(h.ctx(), &store.GetInstanceTreeParams{TenantID: tenant, InstanceID: "root"})
	require.NoError(t, err)
	require.Equal(t, "root", tree.RootID)
	require.ElementsMatch(t, []string{"root", "root:a", "root:b", "root:a:x"}, tree.IDs)
	requireChildrenFirst(t, h, tenant, tree.IDs)

	// The tree runs: no delete without force.
	_, err = h.deleteInstance(tenant, "root", false)
	require.ErrorIs(t, err, store.ErrInstanceRunning)
	for _, id := range []string{"root:a:x", "root:a", "root:b", "root"} {
		h.finish(tenant, id, store.StatusCompleted)
	}
	h.requireCounts(tenant, map[store.Status]int64{store.StatusCompleted: 4})
	res, err := h.deleteInstance(tenant, "root", false)
	require.NoError(t, err)
	require.Equal(t, int64(4), res.InstancesDeleted)
	require.Equal(t, int64(4), res.ExecutionsDeleted)
	for _, id := range tree.IDs {
		h.gone(tenant, id)
	}
	h.requireCounts(tenant, nil)
}

func requireChildrenFirst(t *testing.T, h *harness, tenant string, ids []string) {
	pos := map[string]int{}
	for i, id := range ids {
		pos[id] = i
	}
	for _, id := range ids {
		parent, err := h.s.GetParentID(h.ctx(), &store.GetParentIDParams{TenantID: tenant, InstanceID: id})
		require.NoError(t, err)
		if parent != "" {
			require.Less(t, pos[id], pos[parent], "%s comes after its parent %s", id, parent)
		}
	}
}

func testDeleteInstancesAtomic(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "p")
	h.drain(tenant)
	h.startChildren(tenant, "p", "p:1", "p:2")
	h.drain(tenant)

	_, err := h.s.DeleteInstancesAtomic(h.ctx(), &store.DeleteInstancesAtomicParams{TenantID: tenant, InstanceIDs: []string{"p", "p:1"}, Force: true})
	require.ErrorIs(t, err, store.ErrWouldOrphan, "deleting p without p:2 orphans p:2")
	_, err = h.s.DeleteInstancesAtomic(h.ctx(), &store.DeleteInstancesAtomicParams{TenantID: tenant, InstanceIDs: []string{"p:1", "p:2", "p"}})
	require.ErrorIs(t, err, store.ErrInstanceRunning)
	require.Equal(t, store.StatusRunning, h.instance(tenant, "p:1").Status, "a refused atomic delete deleted something")

	// Children alone leave no orphan.
	res, err := h.s.DeleteInstancesAtomic(h.ctx(), &store.DeleteInstancesAtomicParams{TenantID: tenant, InstanceIDs: []string{"p:1", "missing"}, Force: true})
	require.NoError(t, err)
	require.Equal(t, int64(1), res.InstancesDeleted)
	h.gone(tenant, "p:1")
	res, err = h.s.DeleteInstancesAtomic(h.ctx(), &store.DeleteInstancesAtomicParams{TenantID: tenant, InstanceIDs: []string{"p", "p:2"}, Force: true})
	require.NoError(t, err)
	require.Equal(t, int64(2), res.InstancesDeleted)
	h.gone(tenant, "p")
	h.gone(tenant, "p:2")
}

// completedAt finishes instances one millisecond apart and returns their
// completion times.
func (h *harness) completeAll(tenant string, ids ...string) map[string]time.Time {
	h.t.Helper()
	at := map[string]time.Time{}
	for _, id := range ids {
		h.start(tenant, id)
		h.drain(tenant)
		h.clock.Advance(time.Millisecond)
		h.finish(tenant, id, store.StatusCompleted)
		at[id] = h.clock.Now()
	}
	return at
}

func testBulkDeleteFilters(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	at := h.completeAll(tenant, "a", "b", "c", "d")
	h.start(tenant, "running")
	h.drain(tenant)
	bulk := func(f store.InstanceFilter, limit int) *store.BulkDeleteResult {
		res, err := h.s.DeleteInstanceBulk(h.ctx(), &store.DeleteInstanceBulkParams{TenantID: tenant, Filter: f, Limit: limit})
		require.NoError(t, err)
		return res
	}

	// Ids that do not exist, and a running one: nothing, and no error.
	res := bulk(store.InstanceFilter{InstanceIDs: []string{"nope", "running"}}, 0)
	require.Zero(t, res.InstancesDeleted)
	require.True(t, res.Complete)
	require.Equal(t, store.StatusRunning, h.instance(tenant, "running").Status)

	// completed_before is strict, to the millisecond: b completed at the
	// cutoff and stays.
	res = bulk(store.InstanceFilter{CompletedBefore: new(at["b"])}, 0)
	require.Equal(t, int64(1), res.InstancesDeleted)
	h.gone(tenant, "a")
	h.instance(tenant, "b")

	// Ids AND completed_before: only those in the list that are old enough.
	res = bulk(store.InstanceFilter{InstanceIDs: []string{"b", "d"}, CompletedBefore: new(at["d"])}, 0)
	require.Equal(t, int64(1), res.InstancesDeleted)
	h.gone(tenant, "b")
	h.instance(tenant, "d")

	// The limit comes last and says whether more remain.
	res = bulk(store.InstanceFilter{}, 1)
	require.Equal(t, int64(1), res.InstancesDeleted)
	require.False(t, res.Complete)
	res = bulk(store.InstanceFilter{}, 1)
	require.Equal(t, int64(1), res.InstancesDeleted)
	require.True(t, res.Complete, "nothing deletable is left")
	h.gone(tenant, "c")
	h.gone(tenant, "d")
	require.Equal(t, store.StatusRunning, h.instance(tenant, "running").Status)
}

// 5-day retention: everything completed more than five days ago goes,
// trees as units, and a tree with a running member is skipped whole.
func testBulkDeleteRetentionAndCascade(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "old-tree")
	h.drain(tenant)
	h.startChildren(tenant, "old-tree", "old-tree:1")
	h.drain(tenant)
	h.finish(tenant, "old-tree:1", store.StatusCompleted)
	h.finish(tenant, "old-tree", store.StatusCompleted)

	h.start(tenant, "old-busy")
	h.drain(tenant)
	h.startChildren(tenant, "old-busy", "old-busy:1") // fire and forget: still running
	h.drain(tenant)
	h.finish(tenant, "old-busy", store.StatusFailed)

	h.clock.Advance(6 * 24 * time.Hour)
	h.completeAll(tenant, "recent")
	h.requireCounts(tenant, map[store.Status]int64{store.StatusCompleted: 3, store.StatusFailed: 1, store.StatusRunning: 1})

	res, err := h.s.DeleteInstanceBulk(h.ctx(), &store.DeleteInstanceBulkParams{
		TenantID: tenant, Filter: store.InstanceFilter{CompletedBefore: new(h.clock.Now().Add(-5 * 24 * time.Hour))},
	})
	require.NoError(t, err)
	require.True(t, res.Complete)
	require.Equal(t, int64(2), res.InstancesDeleted, "the old tree, with its child")
	h.gone(tenant, "old-tree")
	h.gone(tenant, "old-tree:1")
	h.instance(tenant, "old-busy")
	h.instance(tenant, "old-busy:1")
	h.instance(tenant, "recent")
	h.requireCounts(tenant, map[store.Status]int64{store.StatusCompleted: 1, store.StatusFailed: 1, store.StatusRunning: 1})
}

// testDeleteExpiredJudgesRootsAgain: the janitor's delete takes whole
// trees with everything their instances own, whatever each owns, and
// skips a root that was replaced after it was chosen or whose tree still
// runs.
func testDeleteExpiredJudgesRootsAgain(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "tagged") // h.start gives tags
	h.finish(tenant, "tagged", store.StatusCompleted)
	_, err := h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{
		TenantID: tenant, InstanceID: "plain", Name: "order", Version: "1", Start: store.Message{Kind: kindStart},
	})
	require.NoError(t, err)
	h.finish(tenant, "plain", store.StatusCompleted)
	h.start(tenant, "chain")
	h.continueAsNew(tenant, "chain", 2) // a prunable row
	h.finish(tenant, "chain", store.StatusCompleted)
	h.scheduleActivities(tenant, "queued", 2)            // starts it
	h.enqueue(tenant, "queued", `"later"`, 48*time.Hour) // outlives the instance's end
	h.finish(tenant, "queued", store.StatusCompleted)
	h.start(tenant, "tree")
	h.drain(tenant)
	h.startChildren(tenant, "tree", "tree:1")
	h.drain(tenant)
	h.finish(tenant, "tree:1", store.StatusCompleted)
	h.finish(tenant, "tree", store.StatusCompleted)
	h.start(tenant, "busy")
	h.drain(tenant)
	h.startChildren(tenant, "busy", "busy:1") // still running
	h.drain(tenant)
	h.finish(tenant, "busy", store.StatusCompleted)
	h.start(tenant, "replaced")
	h.finish(tenant, "replaced", store.StatusCompleted)

	j, ok := h.s.(store.Janitor)
	require.True(t, ok, "the store serves the janitor")
	h.clock.Advance(time.Hour)
	candidates, err := j.ListExpiryCandidates(h.ctx(), &store.ListExpiryCandidatesParams{
		TenantID: tenant, Status: store.StatusCompleted, CompletedBefore: h.clock.Now(), Limit: 100,
	})
	require.NoError(t, err)
	require.Len(t, candidates, 7)

	// Deleted and started again under the same id after it was chosen.
	_, err = h.deleteInstance(tenant, "replaced", false)
	require.NoError(t, err)
	h.clock.Advance(time.Minute)
	h.start(tenant, "replaced")
	h.finish(tenant, "replaced", store.StatusCompleted)

	res, err := j.DeleteExpired(h.ctx(), &store.DeleteExpiredParams{TenantID: tenant, Roots: candidates})
	require.NoError(t, err)
	require.Equal(t, int64(6), res.InstancesDeleted, "tagged, plain, chain, queued, tree and its child")
	require.Equal(t, int64(3), res.QueueMessagesDeleted, "the timer and the two activity tasks")
	for _, id := range []string{"tagged", "plain", "chain", "queued", "tree", "tree:1"} {
		h.gone(tenant, id)
	}
	h.instance(tenant, "busy")
	h.instance(tenant, "busy:1")
	h.instance(tenant, "replaced")
	h.requireCounts(tenant, map[store.Status]int64{store.StatusCompleted: 2, store.StatusRunning: 1})

	_, err = j.DeleteExpired(h.ctx(), &store.DeleteExpiredParams{TenantID: "", Roots: candidates})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
}

// testExpiryScansReadOneRule: a scan of expiry candidates reads the names
// it is given, or leaves out those it is told to, and a scan of instances
// with a retention of their own returns only those their rule lets go:
// their own time for the status, else their name's rule, else the default.
func testExpiryScansReadOneRule(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	start := func(id, name string, own *store.Retention, status store.Status) {
		_, err := h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{
			TenantID: tenant, InstanceID: id, Name: name, Version: "1", Start: store.Message{Kind: kindStart}, Retention: own,
		})
		require.NoError(t, err)
		h.finish(tenant, id, status)
	}
	hour := time.Hour
	start("order-1", "order", nil, store.StatusCompleted)
	start("report-1", "report", nil, store.StatusCompleted)
	start("poll-1", "poll", nil, store.StatusCompleted)
	start("own-short", "order", &store.Retention{Completed: new(hour)}, store.StatusCompleted)
	start("own-long", "order", &store.Retention{Completed: new(48 * hour)}, store.StatusCompleted)
	start("own-other", "report", &store.Retention{Failed: new(48 * hour)}, store.StatusCompleted) // its name's rule
	start("own-default", "poll", &store.Retention{Failed: new(48 * hour)}, store.StatusCompleted) // the default
	start("own-failed", "order", &store.Retention{Failed: new(hour)}, store.StatusFailed)
	h.clock.Advance(3 * hour)
	now := h.clock.Now()

	j, ok := h.s.(store.Janitor)
	require.True(t, ok, "the store serves the janitor")
	read := func(p store.ListExpiryCandidatesParams) []string {
		t.Helper()
		p.TenantID, p.Limit = tenant, 100
		if p.Status == "" {
			p.Status = store.StatusCompleted
		}
		page, err := j.ListExpiryCandidates(h.ctx(), &p)
		require.NoError(t, err)
		var ids []string
		for _, c := range page {
			ids = append(ids, c.InstanceID)
		}
		slices.Sort(ids)
		return ids
	}
	require.Equal(t, []string{"order-1", "poll-1", "report-1"}, read(store.ListExpiryCandidatesParams{CompletedBefore: now}))
	require.Equal(t, []string{"report-1"}, read(store.ListExpiryCandidatesParams{CompletedBefore: now, Names: []string{"report"}}))
	require.Equal(t, []string{"order-1", "poll-1"}, read(store.ListExpiryCandidatesParams{CompletedBefore: now, ExcludeNames: []string{"report"}}))
	require.Empty(t, read(store.ListExpiryCandidatesParams{CompletedBefore: now.Add(-4 * hour)}))

	policy := &store.RetentionPolicy{
		Default: store.Retention{Completed: new(2 * hour)},
		ByName:  map[string]store.Retention{"report": {Completed: new(24 * hour)}},
	}
	overrides := func(st store.Status, policy *store.RetentionPolicy) []string {
		return read(store.ListExpiryCandidatesParams{Status: st, Overrides: true, Policy: policy, CompletedBefore: now})
	}
	require.Equal(t, []string{"own-default", "own-short"}, overrides(store.StatusCompleted, policy),
		"own-long keeps two days, own-other follows its name's rule of a day")
	require.Equal(t, []string{"own-failed"}, overrides(store.StatusFailed, policy))
	require.Equal(t, []string{"own-short"}, overrides(store.StatusCompleted, &store.RetentionPolicy{}),
		"without a rule for the status, only its own time lets it go")

	_, err := j.ListExpiryCandidates(h.ctx(), &store.ListExpiryCandidatesParams{TenantID: tenant, Status: store.StatusCompleted,
		Overrides: true, CompletedBefore: now, Limit: 10})
	require.ErrorIs(t, err, store.ErrInvalidArgument, "an override scan needs the policy")
	_, err = j.ListExpiryCandidates(h.ctx(), &store.ListExpiryCandidatesParams{TenantID: tenant, Status: store.StatusRunning,
		CompletedBefore: now, Limit: 10})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
}

func (h *harness) continueAsNew(tenant, id string, times int) {
	h.t.Helper()
	for range times {
		h.clock.Advance(24 * time.Hour)
		h.enqueue(tenant, id, `"tick"`, 0)
		item := h.fetchInstance(tenant, id)
		p := turn(item)
		p.Status = store.StatusContinuedAsNew
		p.ContinueAsNew = &store.ContinueAsNew{Start: store.Message{Kind: kindStart}}
		h.ack(p)
	}
	h.drain(tenant)
}

func testPruneOptions(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	h.start(tenant, "loop")
	h.drain(tenant)
	h.continueAsNew(tenant, "loop", 9) // executions 1..10, one a day; 10 is current
	execIDs := func() []int64 {
		execs, err := h.s.ListExecutions(h.ctx(), &store.ListExecutionsParams{TenantID: tenant, InstanceID: "loop"})
		require.NoError(t, err)
		var ids []int64
		for _, e := range execs {
			ids = append(ids, e.ExecutionID)
		}
		return ids
	}
	prune := func(o store.PruneOptions) *store.PruneResult {
		res, err := h.s.PruneExecutions(h.ctx(), &store.PruneExecutionsParams{TenantID: tenant, InstanceID: "loop", Options: o})
		require.NoError(t, err)
		return res
	}
	execs, err := h.s.ListExecutions(h.ctx(), &store.ListExecutionsParams{TenantID: tenant, InstanceID: "loop"})
	require.NoError(t, err)
	require.Len(t, execs, 10)

	// 30-day style: older than the completion of execution 3.
	res := prune(store.PruneOptions{CompletedBefore: new(execs[2].CompletedAt)})
	require.Equal(t, store.PruneResult{InstancesProcessed: 1, InstancesPruned: 1, ExecutionsDeleted: 2, EventsDeleted: res.EventsDeleted}, *res)
	require.Equal(t, []int64{3, 4, 5, 6, 7, 8, 9, 10}, execIDs())

	// keep_last AND completed_before: outside the last 4 and older than 7.
	res = prune(store.PruneOptions{KeepLast: 4, CompletedBefore: new(execs[5].CompletedAt)})
	require.Equal(t, int64(3), res.ExecutionsDeleted)
	require.Equal(t, []int64{6, 7, 8, 9, 10}, execIDs())
	res = prune(store.PruneOptions{KeepLast: 2})
	require.Equal(t, int64(3), res.ExecutionsDeleted)
	require.Equal(t, []int64{9, 10}, execIDs())
	_, err = h.s.GetHistory(h.ctx(), &store.GetHistoryParams{TenantID: tenant, InstanceID: "loop", ExecutionID: 8})
	require.ErrorIs(t, err, store.ErrNotFound)

	// The current execution is never pruned, whatever the options say.
	res = prune(store.PruneOptions{KeepLast: 0, CompletedBefore: new(h.clock.Now().Add(time.Hour))})
	require.Equal(t, int64(1), res.ExecutionsDeleted)
	require.Equal(t, []int64{10}, execIDs())
	res = prune(store.PruneOptions{})
	require.Equal(t, store.PruneResult{InstancesProcessed: 1}, *res)
	in := h.instance(tenant, "loop")
	require.Equal(t, int64(1), in.ExecutionCount)
	require.Equal(t, int64(len(h.history(tenant, "loop", 10))), in.EventCount)
	require.Equal(t, store.StatusRunning, in.Status)

	_, err = h.s.PruneExecutions(h.ctx(), &store.PruneExecutionsParams{TenantID: tenant, InstanceID: "nope"})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = h.s.PruneExecutions(h.ctx(), &store.PruneExecutionsParams{TenantID: tenant, InstanceID: "loop", Options: store.PruneOptions{KeepLast: -1}})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
}

func testPruneBulk(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	for _, id := range []string{"loop-a", "loop-b", "other"} {
		h.start(tenant, id)
		h.drain(tenant)
		h.continueAsNew(tenant, id, 3)
	}
	res, err := h.s.PruneExecutionsBulk(h.ctx(), &store.PruneExecutionsBulkParams{
		TenantID: tenant, Filter: store.InstanceFilter{IDPrefix: "loop-"}, Options: store.PruneOptions{KeepLast: 1},
	})
	require.NoError(t, err)
	require.True(t, res.Complete)
	require.Equal(t, int64(2), res.InstancesProcessed)
	require.Equal(t, int64(2), res.InstancesPruned)
	require.Equal(t, int64(6), res.ExecutionsDeleted)
	require.Equal(t, int64(1), h.instance(tenant, "loop-a").ExecutionCount)
	require.Equal(t, int64(4), h.instance(tenant, "other").ExecutionCount)

	res, err = h.s.PruneExecutionsBulk(h.ctx(), &store.PruneExecutionsBulkParams{
		TenantID: tenant, Options: store.PruneOptions{KeepLast: 2}, Limit: 1,
	})
	require.NoError(t, err)
	require.Equal(t, int64(1), res.InstancesProcessed)
	require.Equal(t, int64(1), res.InstancesPruned)
	require.Equal(t, int64(2), res.ExecutionsDeleted)
	require.True(t, res.Complete)
	// Pruning changes no instance's status.
	h.requireCounts(tenant, map[store.Status]int64{store.StatusRunning: 3})

	// Examined and pruned differ: "other" has two executions left, which
	// keep_last 2 keeps, and "chain" has four, of which it keeps two.
	h.start(tenant, "chain")
	h.drain(tenant)
	h.continueAsNew(tenant, "chain", 3)
	res, err = h.s.PruneExecutionsBulk(h.ctx(), &store.PruneExecutionsBulkParams{
		TenantID: tenant, Filter: store.InstanceFilter{InstanceIDs: []string{"other", "chain", "loop-a"}}, Options: store.PruneOptions{KeepLast: 2},
	})
	require.NoError(t, err)
	require.True(t, res.Complete)
	require.Equal(t, store.PruneResult{InstancesProcessed: 2, InstancesPruned: 1, ExecutionsDeleted: 2, EventsDeleted: res.EventsDeleted}, res.PruneResult)
}

func testListFilters(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	other := h.tenant("other")
	start := func(tenant, id, name string, tags map[string]string) {
		_, err := h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{
			TenantID: tenant, InstanceID: id, Name: name, Version: "1", Tags: tags, Start: store.Message{Kind: kindStart},
		})
		require.NoError(t, err)
		h.clock.Advance(time.Second)
	}
	t0 := h.clock.Now()
	start(tenant, "order-1", "order", map[string]string{"region": "eu", "tier": "gold"})
	start(tenant, "order-2", "order", map[string]string{"region": "us"})
	start(tenant, "order-3", "order.v2", map[string]string{"region": "eu"})
	start(tenant, "refund-1", "refund", nil)
	start(tenant, "o_x%", "odd", nil) // LIKE metacharacters in the id
	start(other, "order-9", "order", nil)
	h.drain(tenant)
	h.clock.Advance(time.Second)
	tDrained := h.clock.Now()
	h.finish(tenant, "order-2", store.StatusCompleted)
	tFinish := h.clock.Now()
	h.clock.Advance(time.Second)
	h.finish(tenant, "refund-1", store.StatusFailed)
	h.clock.Advance(time.Second)
	h.startChildren(tenant, "order-1", "order-1:c")
	h.clock.Advance(time.Second)
	h.drain(tenant)

	cases := []struct {
		name string
		f    store.InstanceFilter
		want []string
	}{
		{"all", store.InstanceFilter{}, []string{"order-1", "order-2", "order-3", "refund-1", "o_x%", "order-1:c"}},
		{"status", store.InstanceFilter{Statuses: []store.Status{store.StatusCompleted, store.StatusFailed}}, []string{"order-2", "refund-1"}},
		{"name", store.InstanceFilter{Name: "order"}, []string{"order-1", "order-2"}},
		{"name prefix", store.InstanceFilter{NamePrefix: "order"}, []string{"order-1", "order-2", "order-3"}},
		{"id prefix", store.InstanceFilter{IDPrefix: "order-1"}, []string{"order-1", "order-1:c"}},
		{"id prefix with LIKE characters", store.InstanceFilter{IDPrefix: "o_x"}, []string{"o_x%"}},
		{"id prefix _ is literal", store.InstanceFilter{IDPrefix: "o_"}, []string{"o_x%"}},
		{"ids", store.InstanceFilter{InstanceIDs: []string{"order-3", "order-9", "nope"}}, []string{"order-3"}},
		{"created range", store.InstanceFilter{CreatedAfter: new(t0.Add(time.Second)), CreatedBefore: new(t0.Add(3 * time.Second))}, []string{"order-2", "order-3"}},
		{"updated before", store.InstanceFilter{UpdatedBefore: new(tDrained)}, []string{"order-3", "o_x%"}},
		{"completed", store.InstanceFilter{CompletedAfter: new(tFinish.Add(time.Millisecond))}, []string{"refund-1"}},
		{"completed before", store.InstanceFilter{CompletedBefore: new(tFinish.Add(time.Millisecond))}, []string{"order-2"}},
		{"tags", store.InstanceFilter{Tags: map[string]string{"region": "eu"}}, []string{"order-1", "order-3"}},
		{"two tags", store.InstanceFilter{Tags: map[string]string{"region": "eu", "tier": "gold"}}, []string{"order-1"}},
		{"roots", store.InstanceFilter{RootsOnly: true, NamePrefix: "order"}, []string{"order-1", "order-2", "order-3"}},
		{"children", store.InstanceFilter{ParentInstanceID: "order-1"}, []string{"order-1:c"}},
		{"combined", store.InstanceFilter{Statuses: []store.Status{store.StatusRunning}, NamePrefix: "order", Tags: map[string]string{"region": "eu"}}, []string{"order-1", "order-3"}},
		{"nothing", store.InstanceFilter{Name: "order", Statuses: []store.Status{store.StatusFailed}}, nil},
	}
	for _, tc := range cases {
		got := h.list(tenant, tc.f, store.OrderCreatedAsc)
		require.ElementsMatch(t, tc.want, got, tc.name)
		count, err := h.s.CountInstances(h.ctx(), &store.CountInstancesParams{TenantID: tenant, Filter: tc.f})
		require.NoError(t, err)
		require.Equal(t, int64(len(tc.want)), count.Total, "count of %s", tc.name)
	}

	count, err := h.s.CountInstances(h.ctx(), &store.CountInstancesParams{TenantID: tenant})
	require.NoError(t, err)
	require.Equal(t, map[store.Status]int64{store.StatusRunning: 4, store.StatusCompleted: 1, store.StatusFailed: 1}, count.ByStatus)

	// Orders.
	require.Equal(t, []string{"order-1:c", "o_x%", "refund-1", "order-3", "order-2", "order-1"},
		h.list(tenant, store.InstanceFilter{}, store.OrderCreatedDesc))
	byUpdate := h.list(tenant, store.InstanceFilter{}, store.OrderUpdatedDesc)
	require.Equal(t, "order-1:c", byUpdate[0])
	require.Equal(t, []string{"o_x%", "order-3"}, h.list(tenant, store.InstanceFilter{}, store.OrderUpdatedAsc)[:2]) // same time: by id

	// Enriched rows.
	page, err := h.s.ListInstances(h.ctx(), &store.ListInstancesParams{TenantID: tenant, Filter: store.InstanceFilter{InstanceIDs: []string{"order-1"}}})
	require.NoError(t, err)
	require.Len(t, page.Instances, 1)
	in := page.Instances[0]
	require.Equal(t, map[string]string{"region": "eu", "tier": "gold"}, in.Tags)
	require.Equal(t, "order", in.Name)
	require.Positive(t, in.EventCount)
	require.Nil(t, page.Next)

	// Bad input.
	for _, p := range []store.ListInstancesParams{
		{TenantID: tenant, Limit: store.MaxListLimit + 1},
		{TenantID: tenant, Limit: -1},
		{TenantID: tenant, Order: "sideways"},
		{TenantID: tenant, Filter: store.InstanceFilter{Statuses: []store.Status{"Exploded"}}},
		{TenantID: tenant, Filter: store.InstanceFilter{CreatedAfter: new(t0), CreatedBefore: new(t0)}},
		{TenantID: tenant, Filter: store.InstanceFilter{InstanceIDs: make([]string, store.MaxFilterIDs+1)}},
	} {
		_, err := h.s.ListInstances(h.ctx(), &p)
		require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", p)
	}

	testListRareTags(t, h)
}

// testListRareTags lists by tag values that one instance in forty has, among
// common ones, on roots and on children (whose tags come with a turn of
// their parent), in both orders, page by page, and counts them.
func testListRareTags(t *testing.T, h *harness) {
	tenant := h.tenant("tagged")
	other := h.tenant("tagged-other")
	for i := range 40 {
		tags := map[string]string{"env": "prod", "customer": fmt.Sprintf("c%02d", i%20)}
		if i == 7 {
			tags["customer"] = "rare"
		}
		_, err := h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{
			TenantID: tenant, InstanceID: fmt.Sprintf("t-%02d", i), Name: "t", Tags: tags, Start: store.Message{Kind: kindStart},
		})
		require.NoError(t, err)
		h.clock.Advance(time.Millisecond)
	}
	_, err := h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{
		TenantID: other, InstanceID: "t-07", Name: "t", Tags: map[string]string{"customer": "rare"}, Start: store.Message{Kind: kindStart},
	})
	require.NoError(t, err)
	h.drain(tenant)
	// t-07 ends before the child starts: with the child's start due, a
	// fetch could keep taking the child instead.
	h.finish(tenant, "t-07", store.StatusCompleted)
	h.enqueue(tenant, "t-00", `"spawn"`, 0)
	item := h.fetchInstance(tenant, "t-00")
	p := turn(item)
	p.Children = []store.ChildStart{{
		InstanceID: "t-00:child", Name: "child", Tags: map[string]string{"customer": "rare", "env": "dev"},
		Start: store.Message{Kind: kindStart}, IfTaken: store.Message{Kind: "child_failed"},
	}}
	h.ack(p)

	cases := []struct {
		name string
		f    store.InstanceFilter
		want []string
	}{
		{"rare", store.InstanceFilter{Tags: map[string]string{"customer": "rare"}}, []string{"t-07", "t-00:child"}},
		{"rare and common", store.InstanceFilter{Tags: map[string]string{"customer": "rare", "env": "prod"}}, []string{"t-07"}},
		{"rare, other key first", store.InstanceFilter{Tags: map[string]string{"customer": "rare", "a": "b"}}, nil},
		{"rare child", store.InstanceFilter{Tags: map[string]string{"env": "dev"}}, []string{"t-00:child"}},
		{"rare and status", store.InstanceFilter{Tags: map[string]string{"customer": "rare"}, Statuses: []store.Status{store.StatusRunning}}, []string{"t-00:child"}},
		{"two of forty", store.InstanceFilter{Tags: map[string]string{"customer": "c03"}}, []string{"t-03", "t-23"}},
		{"common", store.InstanceFilter{Tags: map[string]string{"env": "prod"}}, func() []string {
			var ids []string
			for i := range 40 {
				ids = append(ids, fmt.Sprintf("t-%02d", i))
			}
			return ids
		}()},
		{"unknown value", store.InstanceFilter{Tags: map[string]string{"customer": "nobody"}}, nil},
	}
	for _, tc := range cases {
		for _, order := range []store.Order{store.OrderCreatedDesc, store.OrderCreatedAsc, store.OrderUpdatedDesc} {
			require.ElementsMatch(t, tc.want, h.list(tenant, tc.f, order), "%s, %s", tc.name, order)
		}
		count, err := h.s.CountInstances(h.ctx(), &store.CountInstancesParams{TenantID: tenant, Filter: tc.f})
		require.NoError(t, err)
		require.Equal(t, int64(len(tc.want)), count.Total, "count of %s", tc.name)
	}
	// Creation order, newest first, through the tag.
	require.Equal(t, []string{"t-00:child", "t-07"},
		h.list(tenant, store.InstanceFilter{Tags: map[string]string{"customer": "rare"}}, store.OrderCreatedDesc))

	// Deleted instances take their tags with them.
	_, err = h.deleteInstance(tenant, "t-07", false)
	require.NoError(t, err)
	require.Equal(t, []string{"t-00:child"}, h.list(tenant, store.InstanceFilter{Tags: map[string]string{"customer": "rare"}}, store.OrderCreatedDesc))
	require.Equal(t, []string{"t-07"}, h.list(other, store.InstanceFilter{Tags: map[string]string{"customer": "rare"}}, store.OrderCreatedDesc))
}

// A position is a place in the keyset order, not a row: a page goes on
// after it whether or not its instance still exists, in either order.
func testListPositions(t *testing.T, h *harness) {
	a := h.tenant("tenant-a")
	for i := range 10 {
		h.start(a, fmt.Sprintf("a-%02d", i))
		h.clock.Advance(time.Millisecond)
	}
	page, err := h.s.ListInstances(h.ctx(), &store.ListInstancesParams{TenantID: a, Limit: 4})
	require.NoError(t, err)
	require.Len(t, page.Instances, 4)
	require.Equal(t, "a-06", page.Instances[3].InstanceID)
	require.Equal(t, &store.InstancePosition{OrderKey: page.Instances[3].CreatedAt.UnixMilli(), InstanceID: "a-06"}, page.Next)

	_, err = h.deleteInstance(a, "a-06", true)
	require.NoError(t, err)
	next, err := h.s.ListInstances(h.ctx(), &store.ListInstancesParams{TenantID: a, Limit: 4, After: page.Next})
	require.NoError(t, err)
	require.Equal(t, []string{"a-05", "a-04", "a-03", "a-02"}, instanceIDs(next.Instances))

	asc, err := h.s.ListInstances(h.ctx(), &store.ListInstancesParams{TenantID: a, Limit: 100, After: page.Next, Order: store.OrderCreatedAsc})
	require.NoError(t, err)
	require.Equal(t, []string{"a-07", "a-08", "a-09"}, instanceIDs(asc.Instances))
	require.Nil(t, asc.Next)
}

func instanceIDs(ins []store.Instance) []string {
	ids := make([]string, len(ins))
	for i, in := range ins {
		ids[i] = in.InstanceID
	}
	return ids
}

// A 5,000-instance tenant is walked with pages of 7 while instances are
// created and deleted: every instance that exists throughout is seen
// exactly once, and nothing is seen twice.
func testListPaginationUnderChurn(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	const stable = 5000
	for i := range stable {
		_, err := h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{
			TenantID: tenant, InstanceID: fmt.Sprintf("s-%05d", i), Name: "s", Start: store.Message{Kind: kindStart},
		})
		require.NoError(t, err)
		if i%50 == 0 {
			h.clock.Advance(time.Millisecond) // many share a creation time: ties break by id
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	churnErr := make(chan error, 1)
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			id := fmt.Sprintf("churn-%05d", i)
			_, err := h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{
				TenantID: tenant, InstanceID: id, Name: "c", Start: store.Message{Kind: kindStart},
			})
			if err == nil {
				_, err = h.s.DeleteInstance(h.ctx(), &store.DeleteInstanceParams{TenantID: tenant, InstanceID: id, Force: true})
			}
			if err != nil && !errors.Is(err, h.ctx().Err()) {
				churnErr <- err
				return
			}
		}
	})
	seen := map[string]int{}
	var after *store.InstancePosition
	for {
		page, err := h.s.ListInstances(h.ctx(), &store.ListInstancesParams{TenantID: tenant, Limit: 7, After: after})
		require.NoError(t, err)
		for _, in := range page.Instances {
			seen[in.InstanceID]++
		}
		if page.Next == nil {
			break
		}
		after = page.Next
	}
	stop.Store(true)
	wg.Wait()
	close(churnErr)
	require.NoError(t, <-churnErr)
	for i := range stable {
		id := fmt.Sprintf("s-%05d", i)
		require.Equal(t, 1, seen[id], "instance %s", id)
	}
	for id, n := range seen {
		require.Equal(t, 1, n, "instance %s seen %d times", id, n)
	}
	// Starts and deletes racing each other left the counts exact.
	h.requireCounts(tenant, map[store.Status]int64{store.StatusRunning: stable})
}
