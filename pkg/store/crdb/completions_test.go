package crdb

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
)

// holdFirstCompletionBatch holds s's first batch of task completions; the
// ids are the tasks' as the callers wrote them.
func holdFirstCompletionBatch(s *Store) *heldBatches {
	h := newHeldBatches()
	s.onCompletionBatch = func(completions []*store.AckWorkItemParams) {
		ids := make([]string, len(completions))
		for i, p := range completions {
			ids[i] = p.Lease.ID
		}
		h.see(ids)
	}
	return h
}

// scheduleTasks starts instance id, acks its first turn with n activities
// on task queue "q", and leases their tasks.
func scheduleTasks(t *testing.T, s *Store, tenant, id string, n int) []*store.WorkItem {
	t.Helper()
	ctx := t.Context()
	_, err := s.StartOrchestration(ctx, &store.StartOrchestrationParams{TenantID: tenant, InstanceID: id, Name: "n",
		Start: store.Message{Kind: "start"}})
	require.NoError(t, err)
	item, err := s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: tenant, LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Equal(t, id, item.Lease.InstanceID)
	ack := &store.AckOrchestrationItemParams{Lease: item.Lease, ExecutionID: 1, Status: store.StatusRunning,
		MessageIDs: []string{item.Messages[0].ID}}
	for i := range n {
		ack.History = append(ack.History, store.HistoryEvent{EventID: int64(i + 1), Kind: "scheduled"})
		ack.Activities = append(ack.Activities, store.ActivityTask{ActivityID: int64(i + 1), Name: "a", TaskQueue: "q", Attempt: 1})
	}
	require.NoError(t, s.AckOrchestrationItem(ctx, ack))
	tasks, err := s.FetchWorkItems(ctx, &store.FetchWorkItemsParams{TenantID: tenant, TaskQueue: "q", LeaseDuration: time.Minute, Max: n})
	require.NoError(t, err)
	require.Len(t, tasks, n)
	return tasks
}

func completeAsync(ctx context.Context, s *Store, lease store.WorkLease, payload string) chan error {
	done := make(chan error, 1)
	go func() {
		done <- s.AckWorkItem(ctx, &store.AckWorkItemParams{Lease: lease, Result: &store.Message{Kind: "done", Payload: []byte(payload)}})
	}()
	return done
}

// Completions that come while their tenant's statement runs wait for it,
// then go together in one statement, each with its own outcome: a task
// under another token is lost, the others deliver their results and make
// their instances due (two of one instance included). A task id written in
// capitals is the same task. Another tenant's completions do not wait.
func TestCompletionsThatComeMeanwhileGoInOneStatement(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	s := New(testdb.Pool(t, 8), Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	ctx := t.Context()
	lead := scheduleTasks(t, s, "acme", "lead", 1)
	two := scheduleTasks(t, s, "acme", "two", 2)
	one := scheduleTasks(t, s, "acme", "one", 1)
	lost := scheduleTasks(t, s, "acme", "lost", 1)
	other := scheduleTasks(t, s, "other", "o", 1)

	h := holdFirstCompletionBatch(s)
	first := completeAsync(ctx, s, lead[0].Lease, "lead")
	<-h.entered
	upper := two[1].Lease
	upper.ID = strings.ToUpper(upper.ID)
	stolen := lost[0].Lease
	stolen.Token = uuid.NewString()
	var waiting []chan error
	for i, lease := range []store.WorkLease{two[0].Lease, upper, one[0].Lease, stolen} {
		waiting = append(waiting, completeAsync(ctx, s, lease, fmt.Sprint(i)))
		waitPending(t, func() int { return pendingIn(s.completions, "acme") }, i+1)
	}
	require.NoError(t, <-completeAsync(ctx, s, other[0].Lease, "o"), "another tenant's completion waited for acme's")

	close(h.release)
	require.NoError(t, <-first)
	for i, w := range waiting[:3] {
		require.NoError(t, <-w, i)
	}
	require.ErrorIs(t, <-waiting[3], store.ErrLeaseLost)
	require.Equal(t, [][]string{{lead[0].Lease.ID}, {other[0].Lease.ID},
		{two[0].Lease.ID, upper.ID, one[0].Lease.ID, stolen.ID}}, h.sent())
	// The five starts of scheduleTasks went one by one, and so did the
	// acks of their turns.
	require.Equal(t, map[string][2]int64{"start": {5, 5}, "ack": {5, 5}, "completion": {3, 6}}, batchWrites(t, reader),
		"batches and writes by kind")

	results := map[string][]string{}
	for range 3 {
		item, err := s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: "acme", LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.NotNil(t, item, "an instance with a result was not due")
		for _, m := range item.Messages {
			require.Equal(t, "done", m.Kind)
			results[item.Lease.InstanceID] = append(results[item.Lease.InstanceID], string(m.Payload))
		}
	}
	none, err := s.FetchOrchestrationItem(ctx, &store.FetchOrchestrationItemParams{TenantID: "acme", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Nil(t, none, "an instance whose task was lost was made due")
	require.ElementsMatch(t, []string{"0", "1"}, results["two"])
	require.Equal(t, map[string]int{"lead": 1, "two": 2, "one": 1}, map[string]int{
		"lead": len(results["lead"]), "two": len(results["two"]), "one": len(results["one"])})
	require.NotContains(t, results, "lost", "a task under another token delivered a result")
	require.ErrorIs(t, s.AckWorkItem(ctx, &store.AckWorkItemParams{Lease: one[0].Lease, Result: &store.Message{Kind: "done"}}),
		store.ErrLeaseLost, "a completed task completed again")
}

// Two completions of one task never share a statement: the second waits
// for the next, and finds the task gone.
func TestCompletionsOfOneTaskGoInTurn(t *testing.T) {
	t.Parallel()
	s := New(testdb.Pool(t, 8), Options{})
	ctx := t.Context()
	lead := scheduleTasks(t, s, "acme", "lead", 1)
	task := scheduleTasks(t, s, "acme", "twice", 1)[0]
	h := holdFirstCompletionBatch(s)
	first := completeAsync(ctx, s, lead[0].Lease, "lead")
	<-h.entered
	a := completeAsync(ctx, s, task.Lease, "a")
	waitPending(t, func() int { return pendingIn(s.completions, "acme") }, 1)
	b := completeAsync(ctx, s, task.Lease, "b")
	waitPending(t, func() int { return pendingIn(s.completions, "acme") }, 2)
	close(h.release)

	require.NoError(t, <-first)
	require.NoError(t, <-a)
	require.ErrorIs(t, <-b, store.ErrLeaseLost)
	require.Equal(t, [][]string{{lead[0].Lease.ID}, {task.Lease.ID}, {task.Lease.ID}}, h.sent())
}
