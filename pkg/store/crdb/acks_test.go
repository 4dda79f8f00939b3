package crdb

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
)

// holdFirstAckBatch holds s's first batch of acks; the ids are the turns'
// instances.
func holdFirstAckBatch(s *Store) *heldBatches {
	h := newHeldBatches()
	s.onAckBatch = func(turns []*store.AckOrchestrationItemParams) {
		ids := make([]string, len(turns))
		for i, t := range turns {
			ids[i] = t.Lease.InstanceID
		}
		h.see(ids)
	}
	return h
}

// leaseNew starts instance id and leases it for its first turn.
func leaseNew(t *testing.T, s *Store, tenant, id string) *store.OrchestrationItem {
	t.Helper()
	ctx := t.Context()
	_, err := s.StartOrchestration(ctx, &store.StartOrchestrationParams{TenantID: tenant, InstanceID: id, Name: "n",
		Start: store.Message{Kind: "start"}})
	require.NoError(t, err)
	item, err := s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: tenant, LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Equal(t, id, item.Lease.InstanceID)
	return item
}

// firstTurn is the ack of an instance's first turn: it consumes the start
// message, appends an event, and ends the instance when end is set.
func firstTurn(item *store.OrchestrationItem, end bool) *store.AckOrchestrationItemParams {
	ack := &store.AckOrchestrationItemParams{Lease: item.Lease, ExecutionID: 1, Status: store.StatusRunning,
		MessageIDs: []string{item.Messages[0].ID}, History: []store.HistoryEvent{{EventID: 1, Kind: "started"}}}
	if end {
		ack.Status, ack.Output = store.StatusCompleted, []byte(`"out"`)
		ack.History = append(ack.History, store.HistoryEvent{EventID: 2, Kind: "completed"})
	}
	return ack
}

// ackAsync acks turns in one call in a goroutine; the channel gets the
// turns' outcomes, or the call's error alone.
func ackAsync(ctx context.Context, s *Store, turns ...*store.AckOrchestrationItemParams) chan []error {
	done := make(chan []error, 1)
	go func() {
		results, err := s.AckOrchestrationItems(ctx, &store.AckOrchestrationItemsParams{Turns: turns})
		if err != nil {
			results = []error{err}
		}
		done <- results
	}()
	return done
}

// Acks that come while their tenant's ack commits wait for it, then go
// together in one transaction, each turn whole (history, status, output,
// message consumed, lease released or dropped), each with its own outcome;
// another tenant's ack does not wait for them.
func TestAcksThatComeMeanwhileGoInOneTransaction(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	s := New(testdb.Pool(t, 8), Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	ctx := t.Context()
	items := map[string]*store.OrchestrationItem{}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		items[id] = leaseNew(t, s, "acme", id)
	}
	other := leaseNew(t, s, "other", "o")
	h := holdFirstAckBatch(s)
	first := ackAsync(ctx, s, firstTurn(items["a"], false))
	<-h.entered

	two := ackAsync(ctx, s, firstTurn(items["b"], true), firstTurn(items["c"], false))
	waitPending(t, func() int { return pendingIn(s.acks, "acme") }, 1)
	one := ackAsync(ctx, s, firstTurn(items["d"], true))
	waitPending(t, func() int { return pendingIn(s.acks, "acme") }, 2)
	stolen := firstTurn(items["e"], false)
	stolen.Lease.Token = "00000000-0000-4000-8000-000000000000"
	lost := ackAsync(ctx, s, stolen)
	waitPending(t, func() int { return pendingIn(s.acks, "acme") }, 3)

	require.NoError(t, s.AckOrchestrationItem(ctx, firstTurn(other, true)), "another tenant's ack waited for acme's")

	close(h.release)
	require.Equal(t, []error{nil}, <-first)
	require.Equal(t, []error{nil, nil}, <-two)
	require.Equal(t, []error{nil}, <-one)
	got := <-lost
	require.Len(t, got, 1)
	require.ErrorIs(t, got[0], store.ErrLeaseLost)
	require.Equal(t, [][]string{{"a"}, {"o"}, {"b", "c", "d", "e"}}, h.sent())
	require.Equal(t, map[string][2]int64{"start": {6, 6}, "ack": {3, 6}}, batchWrites(t, reader),
		"batches and writes by kind")

	for id, ended := range map[string]bool{"a": false, "b": true, "c": false, "d": true, "e": false} {
		inst, err := s.GetInstance(ctx, &store.GetInstanceParams{TenantID: "acme", InstanceID: id})
		require.NoError(t, err)
		var events, messages, leased int
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM history WHERE tenant_id = 'acme' AND instance_id = $1),
			(SELECT count(*) FROM orchestrator_queue WHERE tenant_id = 'acme' AND instance_id = $1),
			(SELECT count(*) FROM instance_leases WHERE tenant_id = 'acme' AND instance_id = $1 AND leased_until > 0)`,
			id).Scan(&events, &messages, &leased))
		switch {
		case id == "e":
			require.Equal(t, store.StatusRunning, inst.Status, id)
			require.Equal(t, []int{0, 1, 1}, []int{events, messages, leased}, "%s: its lease kept, nothing written", id)
		case ended:
			require.Equal(t, store.StatusCompleted, inst.Status, id)
			require.Equal(t, []byte(`"out"`), inst.Output, id)
			require.Equal(t, []int{2, 0, 0}, []int{events, messages, leased}, id)
		default:
			require.Equal(t, store.StatusRunning, inst.Status, id)
			require.Equal(t, []int{1, 0, 0}, []int{events, messages, leased}, id)
		}
	}
}

// Two acks of one instance never share a transaction: the second waits
// for the next, and finds the lease gone.
func TestAcksOfOneInstanceGoInTurn(t *testing.T) {
	t.Parallel()
	s := New(testdb.Pool(t, 8), Options{})
	ctx := t.Context()
	lead, item := leaseNew(t, s, "acme", "lead"), leaseNew(t, s, "acme", "x")
	h := holdFirstAckBatch(s)
	first := ackAsync(ctx, s, firstTurn(lead, false))
	<-h.entered
	once := ackAsync(ctx, s, firstTurn(item, false))
	waitPending(t, func() int { return pendingIn(s.acks, "acme") }, 1)
	again := ackAsync(ctx, s, firstTurn(item, true))
	waitPending(t, func() int { return pendingIn(s.acks, "acme") }, 2)
	close(h.release)
	require.Equal(t, []error{nil}, <-first)
	require.Equal(t, []error{nil}, <-once)
	got := <-again
	require.Len(t, got, 1)
	require.ErrorIs(t, got[0], store.ErrLeaseLost)
	require.Equal(t, [][]string{{"lead"}, {"x"}, {"x"}}, h.sent())
	inst, err := s.GetInstance(ctx, &store.GetInstanceParams{TenantID: "acme", InstanceID: "x"})
	require.NoError(t, err)
	require.Equal(t, store.StatusRunning, inst.Status, "the second ack wrote nothing")
}

// An ack that cannot commit fails its own call only: when a batch of
// several calls fails, each goes again on its own.
func TestAFailingAckFailsItsCallAlone(t *testing.T) {
	t.Parallel()
	s := New(testdb.Pool(t, 8), Options{})
	ctx := t.Context()
	lead, good, bad := leaseNew(t, s, "acme", "lead"), leaseNew(t, s, "acme", "good"), leaseNew(t, s, "acme", "bad")
	// An event the history already holds: the append fails on its key.
	_, err := s.pool.Exec(ctx, `INSERT INTO history (tenant_id, instance_id, execution_id, event_id, kind, payload, created_at)
		VALUES ('acme', 'bad', 1, 1, 'started', NULL, 0)`)
	require.NoError(t, err)
	h := holdFirstAckBatch(s)
	first := ackAsync(ctx, s, firstTurn(lead, false))
	<-h.entered
	fails := ackAsync(ctx, s, firstTurn(bad, false))
	waitPending(t, func() int { return pendingIn(s.acks, "acme") }, 1)
	goes := ackAsync(ctx, s, firstTurn(good, true))
	waitPending(t, func() int { return pendingIn(s.acks, "acme") }, 2)
	close(h.release)
	require.Equal(t, []error{nil}, <-first)
	require.Equal(t, []error{nil}, <-goes)
	got := <-fails
	require.Len(t, got, 1)
	require.Error(t, got[0])
	require.NotErrorIs(t, got[0], store.ErrLeaseLost)
	require.Equal(t, [][]string{{"lead"}, {"bad", "good"}, {"bad"}, {"good"}}, h.sent())
	inst, err := s.GetInstance(ctx, &store.GetInstanceParams{TenantID: "acme", InstanceID: "good"})
	require.NoError(t, err)
	require.Equal(t, store.StatusCompleted, inst.Status)
}

// A committed ack reports what it wrote to its instance's row, and with
// the instance as its turn was fetched that is the instance a read returns
// right after: a turn that goes on, one that ends its instance, and one
// that continues as new. A turn whose lease was lost reports nothing.
func TestAnAckReportsWhatItWrote(t *testing.T) {
	t.Parallel()
	s := New(testdb.Pool(t, 4), Options{})
	ctx := t.Context()
	goesOn, ends := leaseNew(t, s, "acme", "a"), leaseNew(t, s, "acme", "b")
	continues, lost := leaseNew(t, s, "acme", "c"), leaseNew(t, s, "acme", "d")
	next := firstTurn(continues, false)
	next.Status = store.StatusContinuedAsNew
	next.ContinueAsNew = &store.ContinueAsNew{Input: []byte(`"again"`), Start: store.Message{Kind: "start"}}
	stolen := firstTurn(lost, true)
	stolen.Lease.Token = "00000000-0000-4000-8000-000000000000"
	turns := []*store.AckOrchestrationItemParams{firstTurn(goesOn, false), firstTurn(ends, true), next, stolen}
	results, err := s.AckOrchestrationItems(ctx, &store.AckOrchestrationItemsParams{Turns: turns})
	require.NoError(t, err)
	require.Equal(t, []error{nil, nil, nil}, results[:3])
	require.ErrorIs(t, results[3], store.ErrLeaseLost)
	for i, item := range []*store.OrchestrationItem{goesOn, ends, continues} {
		acked, ok := turns[i].AckedInstance(item.Instance)
		require.True(t, ok, item.Lease.InstanceID)
		read, err := s.GetInstance(ctx, &store.GetInstanceParams{TenantID: "acme", InstanceID: item.Lease.InstanceID})
		require.NoError(t, err)
		require.Equal(t, *read, acked, item.Lease.InstanceID)
	}
	require.False(t, turns[1].Acked.CompletedAt.IsZero())
	require.Nil(t, turns[3].Acked)
	_, ok := turns[3].AckedInstance(lost.Instance)
	require.False(t, ok)
}
