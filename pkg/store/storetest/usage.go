package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/store"
)

// testUsage: usage counts a tenant's instances by status, its executions,
// events and queued messages, and nothing of another tenant's; the
// cross-tenant listing pages by tenant id; janitor runs list (empty until a
// janitor writes some) and reject bad limits.
func testUsage(t *testing.T, h *harness) {
	u, ok := h.s.(store.Usage)
	require.True(t, ok, "the store does not implement store.Usage")
	acme, other := h.tenant("acme"), h.tenant("other")
	h.tenant("zeta")

	h.start(acme, "a1")
	h.start(acme, "a2")
	h.start(other, "o1")
	// One turn on a1: its start message is consumed, one event appended.
	h.ack(turn(h.fetchInstance(acme, "a1")))
	h.enqueue(acme, "a1", `{}`, 0)

	got, err := u.GetUsage(h.ctx(), &store.GetUsageParams{TenantID: acme})
	require.NoError(t, err)
	require.Equal(t, acme, got.TenantID)
	require.Equal(t, map[store.Status]int64{store.StatusRunning: 2}, got.Instances)
	require.Equal(t, int64(2), got.Executions)
	require.Equal(t, int64(1), got.Events)
	// a2's start and a1's event wait in the orchestrator queue.
	require.Equal(t, int64(2), got.QueuedMessages)
	require.Equal(t, h.clock.Now().UTC(), got.MeasuredAt)

	none, err := u.GetUsage(h.ctx(), &store.GetUsageParams{TenantID: "nobody"})
	require.NoError(t, err)
	require.Empty(t, none.Instances)
	require.Zero(t, none.Executions+none.Events+none.QueuedMessages)

	page, err := u.ListUsage(h.ctx(), &store.ListUsageParams{Limit: 2})
	require.NoError(t, err)
	require.Len(t, page, 2)
	require.Equal(t, []string{acme, other}, []string{page[0].TenantID, page[1].TenantID})
	require.Equal(t, int64(1), page[1].Instances[store.StatusRunning])
	page, err = u.ListUsage(h.ctx(), &store.ListUsageParams{AfterTenantID: other})
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, "zeta", page[0].TenantID)
	page, err = u.ListUsage(h.ctx(), &store.ListUsageParams{TenantIDs: []string{other, "nobody"}})
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, other, page[0].TenantID)
	_, err = u.ListUsage(h.ctx(), &store.ListUsageParams{Limit: store.MaxListLimit + 1})
	require.ErrorIs(t, err, store.ErrInvalidArgument)

	runs, err := u.ListJanitorRuns(h.ctx(), &store.ListJanitorRunsParams{})
	require.NoError(t, err)
	require.Empty(t, runs)
	runs, err = u.ListJanitorRuns(h.ctx(), &store.ListJanitorRunsParams{TenantID: acme, Limit: 10,
		After: &store.JanitorRunPosition{StartedAt: h.clock.Now(), TenantID: acme, RunID: "00000000-0000-0000-0000-000000000001"}})
	require.NoError(t, err)
	require.Empty(t, runs)
	_, err = u.ListJanitorRuns(h.ctx(), &store.ListJanitorRunsParams{Limit: -1})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	_, err = u.ListJanitorRuns(h.ctx(), &store.ListJanitorRunsParams{After: &store.JanitorRunPosition{RunID: "not-a-uuid"}})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
}
