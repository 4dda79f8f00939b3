package crdb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/storetest"
)

// heldBatches makes the first batch of writes a store sends wait, before
// its statement, until release is closed, and records the ids of every
// batch sent.
type heldBatches struct {
	mu      sync.Mutex
	batches [][]string
	entered chan struct{}
	release chan struct{}
}

func newHeldBatches() *heldBatches {
	return &heldBatches{entered: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldBatches) see(ids []string) {
	h.mu.Lock()
	h.batches = append(h.batches, ids)
	first := len(h.batches) == 1
	h.mu.Unlock()
	if first {
		close(h.entered)
		<-h.release
	}
}

func (h *heldBatches) sent() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.batches
}

// holdFirstStartBatch holds s's first batch of starts; the ids are the
// instances'.
func holdFirstStartBatch(s *Store) *heldBatches {
	h := newHeldBatches()
	s.onStartBatch = func(starts []*store.StartOrchestrationParams) {
		ids := make([]string, len(starts))
		for i, p := range starts {
			ids[i] = p.InstanceID
		}
		h.see(ids)
	}
	return h
}

// batchWrites reads orchard.store.batch.writes: the batches and the
// writes they carried, by kind.
func batchWrites(t *testing.T, reader *sdkmetric.ManualReader) map[string][2]int64 {
	t.Helper()
	got := map[string][2]int64{}
	for _, data := range collectMetric(t, reader, "orchard.store.batch.writes") {
		for _, dp := range data.(metricdata.Histogram[int64]).DataPoints {
			kind, _ := dp.Attributes.Value("kind")
			c := got[kind.AsString()]
			got[kind.AsString()] = [2]int64{c[0] + int64(dp.Count), c[1] + dp.Sum}
		}
	}
	return got
}

// pendingStarts counts the starts of tenant waiting for its group's next
// batch.
func pendingStarts(s *Store, tenant string) int {
	s.starts.mu.Lock()
	defer s.starts.mu.Unlock()
	n := 0
	for key, g := range s.starts.groups {
		if key.tenant == tenant {
			n += len(g.pending)
		}
	}
	return n
}

// pendingIn counts the writes waiting for key's next batch in g.
func pendingIn[K comparable, T any](g *groupCommit[K, T], key K) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if grp := g.groups[key]; grp != nil {
		return len(grp.pending)
	}
	return 0
}

// startAsync starts p in a goroutine; the channel gets its error.
func startAsync(ctx context.Context, s *Store, p *store.StartOrchestrationParams) chan error {
	done := make(chan error, 1)
	go func() {
		_, err := s.StartOrchestration(ctx, p)
		done <- err
	}()
	return done
}

// waitPending waits until n writes wait for their group's next batch.
func waitPending(t *testing.T, pending func() int, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return pending() == n }, time.Minute, time.Millisecond,
		"writes waiting for the next batch")
}

// Starts that come while their tenant's statement runs wait for it, then go
// together in one statement, each whole: instance, execution, free lease
// due at once, start message, tags, retention, counters. Another tenant's
// starts do not wait for them.
func TestStartsThatComeMeanwhileGoInOneStatement(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	s := New(testdb.Pool(t, 8), Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	ctx := t.Context()
	h := holdFirstStartBatch(s)
	first := startAsync(ctx, s, &store.StartOrchestrationParams{TenantID: "acme", InstanceID: "first", Name: "n",
		Start: store.Message{Kind: "start"}})
	<-h.entered

	const n = 5
	hour := time.Hour
	keep := store.Retention{Completed: &hour}
	var waiting []chan error
	for i := range n {
		p := &store.StartOrchestrationParams{TenantID: "acme", InstanceID: fmt.Sprintf("b%d", i), Name: "n", Version: "v2",
			Input: []byte(fmt.Sprintf("in%d", i)), Start: store.Message{Kind: "start", Payload: []byte{byte(i)}}}
		if i%2 == 0 {
			p.Tags = map[string]string{"k": fmt.Sprint(i)}
			p.Retention = &keep
			p.Input = nil
		}
		waiting = append(waiting, startAsync(ctx, s, p))
		waitPending(t, func() int { return pendingStarts(s, "acme") }, i+1)
	}

	_, err := s.StartOrchestration(ctx, &store.StartOrchestrationParams{TenantID: "other", InstanceID: "o", Name: "n",
		Start: store.Message{Kind: "start"}})
	require.NoError(t, err, "another tenant's start waited for acme's")

	close(h.release)
	require.NoError(t, <-first)
	for _, w := range waiting {
		require.NoError(t, <-w)
	}
	require.Equal(t, [][]string{{"first"}, {"o"}, {"b0", "b1", "b2", "b3", "b4"}}, h.sent())
	require.Equal(t, map[string][2]int64{"start": {3, 7}}, batchWrites(t, reader), "batches and writes by kind")

	for i := range n {
		id := fmt.Sprintf("b%d", i)
		inst, err := s.GetInstance(ctx, &store.GetInstanceParams{TenantID: "acme", InstanceID: id})
		require.NoError(t, err)
		require.Equal(t, store.StatusRunning, inst.Status)
		require.Equal(t, "v2", inst.Version)
		if i%2 == 0 {
			require.Nil(t, inst.Input)
			require.Equal(t, map[string]string{"k": fmt.Sprint(i)}, inst.Tags)
			require.Equal(t, &keep, inst.Retention)
		} else {
			require.Equal(t, []byte(fmt.Sprintf("in%d", i)), inst.Input)
			require.Empty(t, inst.Tags)
			require.Nil(t, inst.Retention)
		}
		var executions, free, messages int
		var payload []byte
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM executions WHERE tenant_id = 'acme' AND instance_id = $1 AND execution_id = 1),
			(SELECT count(*) FROM instance_leases WHERE tenant_id = 'acme' AND instance_id = $1 AND leased_until = 0
				AND due_at <= $2),
			(SELECT count(*) FROM orchestrator_queue WHERE tenant_id = 'acme' AND instance_id = $1 AND kind = 'start'),
			(SELECT payload FROM orchestrator_queue WHERE tenant_id = 'acme' AND instance_id = $1)`,
			id, time.Now().UnixMilli()).Scan(&executions, &free, &messages, &payload))
		require.Equal(t, []int{1, 1, 1}, []int{executions, free, messages}, id)
		require.Equal(t, []byte{byte(i)}, payload)
	}
	tagged, err := s.ListInstances(ctx, &store.ListInstancesParams{TenantID: "acme",
		Filter: store.InstanceFilter{Tags: map[string]string{"k": "2"}}})
	require.NoError(t, err)
	require.Len(t, tagged.Instances, 1)
	require.Equal(t, "b2", tagged.Instances[0].InstanceID)
	counts, err := s.CountInstances(ctx, &store.CountInstancesParams{TenantID: "acme",
		Filter: store.InstanceFilter{Statuses: []store.Status{store.StatusRunning}}})
	require.NoError(t, err)
	require.Equal(t, int64(n+1), counts.Total)
}

// Two starts of one id never share a statement: the second waits for the
// next, and finds the id taken.
func TestStartsOfOneIDGoInTurn(t *testing.T) {
	t.Parallel()
	s := New(testdb.Pool(t, 8), Options{})
	ctx := t.Context()
	h := holdFirstStartBatch(s)
	first := startAsync(ctx, s, &store.StartOrchestrationParams{TenantID: "acme", InstanceID: "first", Name: "n",
		Start: store.Message{Kind: "start"}})
	<-h.entered
	same := func() chan error {
		return startAsync(ctx, s, &store.StartOrchestrationParams{TenantID: "acme", InstanceID: "twice", Name: "n",
			Start: store.Message{Kind: "start"}})
	}
	a := same()
	waitPending(t, func() int { return pendingStarts(s, "acme") }, 1)
	b := same()
	waitPending(t, func() int { return pendingStarts(s, "acme") }, 2)
	other := startAsync(ctx, s, &store.StartOrchestrationParams{TenantID: "acme", InstanceID: "other", Name: "n",
		Start: store.Message{Kind: "start"}})
	waitPending(t, func() int { return pendingStarts(s, "acme") }, 3)
	close(h.release)

	require.NoError(t, <-first)
	require.NoError(t, <-other)
	errs := []error{<-a, <-b}
	require.Equal(t, [][]string{{"first"}, {"twice", "other"}, {"twice"}}, h.sent())
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], store.ErrAlreadyExists)
}

// A batch admits its starts in their order while the running instances and
// the starts before them stay below the limit; the rest are refused as
// too many running, as one start alone would be.
func TestBatchedStartsKeepTheRunningLimit(t *testing.T) {
	t.Parallel()
	s := New(testdb.Pool(t, 8), Options{})
	ctx := t.Context()
	limit := int64(3)
	start := func(id string) chan error {
		return startAsync(ctx, s, &store.StartOrchestrationParams{TenantID: "acme", InstanceID: id, Name: "n",
			Start: store.Message{Kind: "start"}, MaxRunning: &limit})
	}
	h := holdFirstStartBatch(s)
	first := start("first")
	<-h.entered
	var waiting []chan error
	for i := range 4 {
		waiting = append(waiting, start(fmt.Sprintf("b%d", i)))
		waitPending(t, func() int { return pendingStarts(s, "acme") }, i+1)
	}
	close(h.release)
	require.NoError(t, <-first)
	var created, refused int
	for _, w := range waiting {
		switch err := <-w; {
		case err == nil:
			created++
		case errors.Is(err, store.ErrTooManyRunning):
			refused++
		default:
			t.Fatalf("start: %v", err)
		}
	}
	require.Equal(t, [2]int{2, 2}, [2]int{created, refused})
	require.Len(t, h.sent(), 2)
	for i, want := range []bool{true, true, false, false} {
		_, err := s.GetInstance(ctx, &store.GetInstanceParams{TenantID: "acme", InstanceID: fmt.Sprintf("b%d", i)})
		if want {
			require.NoError(t, err, "b%d came before the limit", i)
		} else {
			require.ErrorIs(t, err, store.ErrNotFound, "b%d came past the limit", i)
		}
	}
}

// A start whose caller goes away while it waits returns at once and is not
// sent; the caller who leads a batch going away fails no other start.
func TestStartsWhoseCallerWentAway(t *testing.T) {
	t.Parallel()
	s := New(testdb.Pool(t, 8), Options{})
	h := holdFirstStartBatch(s)
	leadCtx, cancelLead := context.WithCancel(t.Context())
	first := startAsync(leadCtx, s, &store.StartOrchestrationParams{TenantID: "acme", InstanceID: "first", Name: "n",
		Start: store.Message{Kind: "start"}})
	<-h.entered
	goneCtx, cancelGone := context.WithCancel(t.Context())
	gone := startAsync(goneCtx, s, &store.StartOrchestrationParams{TenantID: "acme", InstanceID: "gone", Name: "n",
		Start: store.Message{Kind: "start"}})
	waitPending(t, func() int { return pendingStarts(s, "acme") }, 1)
	stays := startAsync(t.Context(), s, &store.StartOrchestrationParams{TenantID: "acme", InstanceID: "stays", Name: "n",
		Start: store.Message{Kind: "start"}})
	waitPending(t, func() int { return pendingStarts(s, "acme") }, 2)
	cancelGone()
	require.ErrorIs(t, <-gone, context.Canceled)
	cancelLead()
	close(h.release)

	require.NoError(t, <-first, "the batch it sent ran to its end")
	require.NoError(t, <-stays)
	require.Equal(t, [][]string{{"first"}, {"stays"}}, h.sent())
	_, err := s.GetInstance(t.Context(), &store.GetInstanceParams{TenantID: "acme", InstanceID: "gone"})
	require.ErrorIs(t, err, store.ErrNotFound)
}

// firstHolder holds a start's first turn: ackOf's ack, and what Done said.
type firstHolder struct {
	ackOf  func(it *store.OrchestrationItem) *store.AckOrchestrationItemParams
	dones  int
	acked  bool
	result error
}

func (h *firstHolder) Turn(_ context.Context, it *store.OrchestrationItem) *store.AckOrchestrationItemParams {
	return h.ackOf(it)
}

func (*firstHolder) Ahead(string, string, int64) *store.OrchestrationItem { return nil }

func (h *firstHolder) Done(_ context.Context, acked bool, result error) {
	h.dones++
	h.acked, h.result = acked, result
}

// scheduling is a first turn a start writes itself: it consumes the start
// message, appends an event and schedules a task, and sets a timer after
// timer when timer > 0.
func scheduling(timer time.Duration) func(it *store.OrchestrationItem) *store.AckOrchestrationItemParams {
	return func(it *store.OrchestrationItem) *store.AckOrchestrationItemParams {
		p := &store.AckOrchestrationItemParams{Lease: it.Lease, ExecutionID: 1, Status: store.StatusRunning,
			MessageIDs: []string{it.Messages[0].ID}, History: []store.HistoryEvent{{EventID: 1, Kind: "task_scheduled"}},
			Activities: []store.ActivityTask{{ActivityID: 1, Name: "a", TaskQueue: "q", Attempt: 1}}}
		if timer > 0 {
			p.Messages = []store.OutgoingMessage{{InstanceID: it.Lease.InstanceID, ExecutionID: 1, Delay: timer,
				Message: store.Message{Kind: "timer"}}}
		}
		return p
	}
}

// Starts with first turns go in one statement with the others, each
// written as its turn leaves it: due at its earliest timer, or never, with
// no start message. A batch in which one turn's rows fail is sent again
// without the turns: every start is made, with its start message, due at
// once, and each turn hears that it is void.
func TestFirstTurnsGoInTheBatchOfStarts(t *testing.T) {
	t.Parallel()
	s := New(testdb.Pool(t, 8), Options{})
	ctx := t.Context()
	require.NoError(t, s.CreateTenant(ctx, &store.CreateTenantParams{TenantID: "acme"}))
	type row struct {
		due                     int64
		events, tasks, messages int
		updated                 int64
	}
	rowOf := func(id string) row {
		t.Helper()
		var r row
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT
			(SELECT due_at FROM instance_leases WHERE tenant_id = 'acme' AND instance_id = $1 AND leased_until = 0),
			(SELECT count(*) FROM history WHERE tenant_id = 'acme' AND instance_id = $1),
			(SELECT count(*) FROM worker_queue WHERE tenant_id = 'acme' AND instance_id = $1),
			(SELECT count(*) FROM orchestrator_queue WHERE tenant_id = 'acme' AND instance_id = $1),
			(SELECT updated_at FROM instances WHERE tenant_id = 'acme' AND instance_id = $1)`, id).
			Scan(&r.due, &r.events, &r.tasks, &r.messages, &r.updated))
		return r
	}
	// batch starts blocker, then the starts of ids together in the batch
	// after it, each with a first turn of its holder's (nil: none).
	batch := func(blocker string, ids []string, holders []*firstHolder) {
		t.Helper()
		h := holdFirstStartBatch(s)
		first := startAsync(ctx, s, &store.StartOrchestrationParams{TenantID: "acme", InstanceID: blocker, Name: "n",
			Start: store.Message{Kind: "start"}})
		<-h.entered
		var waiting []chan error
		for i, id := range ids {
			p := &store.StartOrchestrationParams{TenantID: "acme", InstanceID: id, Name: "n", Start: store.Message{Kind: "start"}}
			if holders[i] != nil {
				p.First = &store.EagerLease{Token: uuid.NewString(), Duration: time.Minute, Hold: holders[i]}
			}
			waiting = append(waiting, startAsync(ctx, s, p))
			waitPending(t, func() int { return pendingStarts(s, "acme") }, i+1)
		}
		close(h.release)
		require.NoError(t, <-first)
		for _, w := range waiting {
			require.NoError(t, <-w)
		}
		require.Equal(t, ids, h.sent()[len(h.sent())-1], "the starts did not go together")
		s.onStartBatch = nil
	}

	timed, untimed := &firstHolder{ackOf: scheduling(time.Minute)}, &firstHolder{ackOf: scheduling(0)}
	batch("blocker", []string{"timed", "plain", "untimed"}, []*firstHolder{timed, nil, untimed})
	for _, h := range []*firstHolder{timed, untimed} {
		require.Equal(t, 1, h.dones)
		require.True(t, h.acked)
		require.NoError(t, h.result)
	}
	r := rowOf("timed")
	require.Equal(t, row{due: r.updated + time.Minute.Milliseconds(), events: 1, tasks: 1, messages: 1, updated: r.updated}, r,
		"due at its timer, with its event, task and timer")
	r = rowOf("untimed")
	require.Equal(t, row{due: math.MaxInt64, events: 1, tasks: 1, updated: r.updated}, r, "due never, with its event and task")
	r = rowOf("plain")
	require.Equal(t, row{due: r.updated, messages: 1, updated: r.updated}, r, "due at once, with its start message")

	// Two events with one id: the batch fails, and goes again without the
	// turns.
	bad := &firstHolder{ackOf: func(it *store.OrchestrationItem) *store.AckOrchestrationItemParams {
		p := scheduling(0)(it)
		p.History = append(p.History, p.History[0])
		return p
	}}
	good := &firstHolder{ackOf: scheduling(0)}
	batch("blocker2", []string{"bad", "good", "plain2"}, []*firstHolder{bad, good, nil})
	for _, h := range []*firstHolder{bad, good} {
		require.Equal(t, 1, h.dones)
		require.False(t, h.acked)
		require.ErrorIs(t, h.result, store.ErrNotFound)
	}
	for _, id := range []string{"bad", "good", "plain2"} {
		r := rowOf(id)
		require.Equal(t, row{due: r.updated, messages: 1, updated: r.updated}, r, "%s: due at once, with its start message", id)
	}
	storetest.RequireInvariants(t, s)
}
