package api_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/services/api"
)

// TestClientService walks every ClientService RPC through its happy path
// and main error codes, with a dispatcher running the instances.
func TestClientService(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme", nil, testsystem.QuickDef, testsystem.WaiterDef, testsystem.LoopDef)
	e.dispatch()
	c := e.clients(e.token(acme, tenancy.RoleClient))
	ctx := t.Context()

	// Start: a picked id, pinned to the latest version; unknown definition.
	started, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{
		Name: "quick", Input: []byte(`{"x":1}`), Tags: map[string]string{"team": "a"},
		Retention: durationpb.New(time.Hour),
	}))
	require.NoError(t, err)
	require.Len(t, started.Msg.InstanceId, 36)
	require.Equal(t, int64(1), started.Msg.ExecutionId)
	_, err = c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "nope"}))
	requireCode(t, err, connect.CodeNotFound, "nope")
	_, err = c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "quick", Version: "9"}))
	requireCode(t, err, connect.CodeNotFound)
	_, err = c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "quick", Input: []byte(`{not json`)}))
	requireCode(t, err, connect.CodeInvalidArgument, "input")

	// WaitForCompletion and GetInstance.
	done := c.waitDone(t, started.Msg.InstanceId)
	require.Equal(t, orchardv1.InstanceStatus_INSTANCE_STATUS_COMPLETED, done.Status)
	require.JSONEq(t, `{"x":1}`, string(done.Output))
	got, err := c.client.GetInstance(ctx, req(&orchardv1.GetInstanceRequest{InstanceId: started.Msg.InstanceId}))
	require.NoError(t, err)
	require.Equal(t, "quick", got.Msg.Instance.Name)
	require.Equal(t, "1", got.Msg.Instance.Version)
	require.Equal(t, map[string]string{"team": "a"}, got.Msg.Instance.Tags)
	require.Equal(t, time.Hour, got.Msg.Instance.Retention.AsDuration())
	require.NotNil(t, got.Msg.Instance.CompletedAt)
	_, err = c.client.GetInstance(ctx, req(&orchardv1.GetInstanceRequest{InstanceId: "missing"}))
	requireCode(t, err, connect.CodeNotFound)
	_, err = c.client.WaitForCompletion(ctx, req(&orchardv1.WaitForCompletionRequest{InstanceId: "missing"}))
	requireCode(t, err, connect.CodeNotFound)

	// RaiseEvent reaches a waiting instance; CancelInstance ends another.
	_, err = c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "waiter", InstanceId: "w1"}))
	require.NoError(t, err)
	_, err = c.client.RaiseEvent(ctx, req(&orchardv1.RaiseEventRequest{InstanceId: "w1", Name: "go", Payload: []byte(`"hi"`)}))
	require.NoError(t, err)
	require.JSONEq(t, `"hi"`, string(c.waitDone(t, "w1").Output))
	_, err = c.client.RaiseEvent(ctx, req(&orchardv1.RaiseEventRequest{InstanceId: "missing", Name: "go"}))
	requireCode(t, err, connect.CodeNotFound)
	// An ended instance refuses events rather than dropping them.
	_, err = c.client.RaiseEvent(ctx, req(&orchardv1.RaiseEventRequest{InstanceId: "w1", Name: "go", Payload: []byte(`"late"`)}))
	requireCode(t, err, connect.CodeFailedPrecondition, "w1", "Completed")
	requireReason(t, err, "INSTANCE_TERMINAL")
	_, err = c.client.RaiseEvent(ctx, req(&orchardv1.RaiseEventRequest{InstanceId: "w1", Name: "go", Payload: []byte(`{`)}))
	requireCode(t, err, connect.CodeInvalidArgument, "payload")

	_, err = c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "waiter", InstanceId: "w2"}))
	require.NoError(t, err)
	// Not terminal: DeleteInstance without force refuses.
	_, err = c.client.DeleteInstance(ctx, req(&orchardv1.DeleteInstanceRequest{InstanceId: "w2"}))
	requireCode(t, err, connect.CodeFailedPrecondition)
	_, err = c.client.CancelInstance(ctx, req(&orchardv1.CancelInstanceRequest{InstanceId: "w2", Reason: "enough"}))
	require.NoError(t, err)
	cancelled := c.waitDone(t, "w2")
	require.Equal(t, orchardv1.InstanceStatus_INSTANCE_STATUS_CANCELLED, cancelled.Status)
	_, err = c.client.CancelInstance(ctx, req(&orchardv1.CancelInstanceRequest{InstanceId: "missing"}))
	requireCode(t, err, connect.CodeNotFound)
	// Cancelling an ended instance does nothing (and queues nothing).
	_, err = c.client.CancelInstance(ctx, req(&orchardv1.CancelInstanceRequest{InstanceId: "w2"}))
	require.NoError(t, err)
	// A deleted instance is not found.
	_, err = c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "waiter", InstanceId: "w3"}))
	require.NoError(t, err)
	_, err = c.client.DeleteInstance(ctx, req(&orchardv1.DeleteInstanceRequest{InstanceId: "w3", Force: true}))
	require.NoError(t, err)
	_, err = c.client.RaiseEvent(ctx, req(&orchardv1.RaiseEventRequest{InstanceId: "w3", Name: "go"}))
	requireCode(t, err, connect.CodeNotFound)

	// GetHistory pages through the current execution.
	var events []*orchardv1.HistoryEvent
	after := int64(0)
	for {
		h, err := c.client.GetHistory(ctx, req(&orchardv1.GetHistoryRequest{InstanceId: "w1", AfterEventId: after, PageSize: 1}))
		require.NoError(t, err)
		require.Equal(t, int64(1), h.Msg.ExecutionId)
		events = append(events, h.Msg.Events...)
		if h.Msg.NextAfterEventId == 0 {
			break
		}
		after = h.Msg.NextAfterEventId
	}
	require.Greater(t, len(events), 1)
	for i, ev := range events {
		require.Equal(t, int64(i+1), ev.EventId)
	}
	_, err = c.client.GetHistory(ctx, req(&orchardv1.GetHistoryRequest{InstanceId: "missing"}))
	requireCode(t, err, connect.CodeNotFound)

	// Continue-as-new: executions, prune, bulk prune.
	_, err = c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "loop", InstanceId: "l1", Input: []byte(`{"n":0}`)}))
	require.NoError(t, err)
	require.JSONEq(t, `3`, string(c.waitDone(t, "l1").Output))
	execs, err := c.client.ListExecutions(ctx, req(&orchardv1.ListExecutionsRequest{InstanceId: "l1"}))
	require.NoError(t, err)
	require.Len(t, execs.Msg.Executions, 4)
	require.Equal(t, orchardv1.InstanceStatus_INSTANCE_STATUS_CONTINUED_AS_NEW, execs.Msg.Executions[0].Status)
	_, err = c.client.ListExecutions(ctx, req(&orchardv1.ListExecutionsRequest{InstanceId: "missing"}))
	requireCode(t, err, connect.CodeNotFound)
	pruned, err := c.client.PruneExecutions(ctx, req(&orchardv1.PruneExecutionsRequest{InstanceId: "l1", Options: &orchardv1.PruneOptions{KeepLast: 2}}))
	require.NoError(t, err)
	require.Equal(t, int64(2), pruned.Msg.Counts.ExecutionsDeleted)
	_, err = c.client.PruneExecutions(ctx, req(&orchardv1.PruneExecutionsRequest{InstanceId: "missing", Options: &orchardv1.PruneOptions{KeepLast: 2}}))
	requireCode(t, err, connect.CodeNotFound)
	bulkPruned, err := c.client.PruneExecutionsBulk(ctx, req(&orchardv1.PruneExecutionsBulkRequest{
		Filter: &orchardv1.InstanceFilter{Name: "loop"}, Options: &orchardv1.PruneOptions{KeepLast: 1},
	}))
	require.NoError(t, err)
	require.True(t, bulkPruned.Msg.Complete)
	require.Nil(t, bulkPruned.Msg.Next)
	require.Equal(t, int64(1), bulkPruned.Msg.Counts.ExecutionsDeleted)

	// ListInstances pages with tokens; CountInstances counts by status.
	seen := map[string]bool{}
	token := ""
	for {
		page, err := c.client.ListInstances(ctx, req(&orchardv1.ListInstancesRequest{
			PageSize: 2, PageToken: token, Order: orchardv1.InstanceOrder_INSTANCE_ORDER_CREATED_ASC,
		}))
		require.NoError(t, err)
		for _, in := range page.Msg.Instances {
			require.False(t, seen[in.InstanceId])
			seen[in.InstanceId] = true
		}
		if token = page.Msg.NextPageToken; token == "" {
			break
		}
	}
	require.Len(t, seen, 4)
	// A token only works with the criteria it was issued for.
	page, err := c.client.ListInstances(ctx, req(&orchardv1.ListInstancesRequest{PageSize: 1}))
	require.NoError(t, err)
	require.NotEmpty(t, page.Msg.NextPageToken)
	_, err = c.client.ListInstances(ctx, req(&orchardv1.ListInstancesRequest{PageSize: 1, PageToken: page.Msg.NextPageToken,
		Filter: &orchardv1.InstanceFilter{Name: "quick"}}))
	requireCode(t, err, connect.CodeInvalidArgument, "page_token")
	_, err = c.client.ListInstances(ctx, req(&orchardv1.ListInstancesRequest{PageToken: page.Msg.NextPageToken + "x"}))
	requireCode(t, err, connect.CodeInvalidArgument, "page_token")

	counts, err := c.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{}))
	require.NoError(t, err)
	require.Equal(t, int64(4), counts.Msg.Total)
	require.Equal(t, int64(3), counts.Msg.ByStatus.Completed)
	require.Equal(t, int64(1), counts.Msg.ByStatus.Cancelled)
	counts, err = c.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{Filter: &orchardv1.InstanceFilter{Tags: map[string]string{"team": "a"}}}))
	require.NoError(t, err)
	require.Equal(t, int64(1), counts.Msg.Total)

	// GetInstanceTree of a root without children.
	tree, err := c.client.GetInstanceTree(ctx, req(&orchardv1.GetInstanceTreeRequest{InstanceId: "w1"}))
	require.NoError(t, err)
	require.Equal(t, []string{"w1"}, tree.Msg.InstanceIds)
	_, err = c.client.GetInstanceTree(ctx, req(&orchardv1.GetInstanceTreeRequest{InstanceId: "missing"}))
	requireCode(t, err, connect.CodeNotFound)

	// DeleteInstance, then NotFound; DeleteInstances resumes until complete.
	del, err := c.client.DeleteInstance(ctx, req(&orchardv1.DeleteInstanceRequest{InstanceId: "w2"}))
	require.NoError(t, err)
	require.Equal(t, int64(1), del.Msg.Counts.InstancesDeleted)
	_, err = c.client.DeleteInstance(ctx, req(&orchardv1.DeleteInstanceRequest{InstanceId: "w2"}))
	requireCode(t, err, connect.CodeNotFound)
	bulk := &orchardv1.DeleteInstancesRequest{CompletedBefore: timestamppb.New(time.Now().Add(time.Minute)), Limit: 1}
	var deleted int64
	for calls := 0; ; calls++ {
		require.Less(t, calls, 10)
		res, err := c.client.DeleteInstances(ctx, req(bulk))
		require.NoError(t, err)
		deleted += res.Msg.Counts.InstancesDeleted
		if res.Msg.Complete {
			require.Nil(t, res.Msg.Next)
			break
		}
		bulk = res.Msg.Next
	}
	require.Equal(t, int64(3), deleted)
	counts, err = c.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{}))
	require.NoError(t, err)
	require.Zero(t, counts.Msg.Total)
}

// TestStartIdempotent: retrying a start with the same id, name and input
// answers with the instance; another name or input is AlreadyExists.
func TestStartIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme", nil, testsystem.QuickDef, testsystem.WaiterDef)
	c := e.grpcClients(e.token(acme, tenancy.RoleClient))
	ctx := t.Context()
	first, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "quick", InstanceId: "i1", Input: []byte(`{"a":1}`)}))
	require.NoError(t, err)
	again, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "quick", InstanceId: "i1", Input: []byte(`{"a":1}`)}))
	require.NoError(t, err)
	require.Equal(t, first.Msg.InstanceId, again.Msg.InstanceId)
	require.True(t, first.Msg.CreatedAt.AsTime().Equal(again.Msg.CreatedAt.AsTime()))
	_, err = c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "quick", InstanceId: "i1", Input: []byte(`{"a":2}`)}))
	requireCode(t, err, connect.CodeAlreadyExists)
	_, err = c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "waiter", InstanceId: "i1", Input: []byte(`{"a":1}`)}))
	requireCode(t, err, connect.CodeAlreadyExists)
	counts, err := c.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{}))
	require.NoError(t, err)
	require.Equal(t, int64(1), counts.Msg.Total)
}

// TestLimits: the running-instance quota and the payload limit answer
// ResourceExhausted for one tenant while another is unaffected; the request
// rate too, with a retry hint.
func TestLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	small := e.tenant("small", &store.Limits{MaxRunningInstances: 2, MaxPayloadBytes: 16}, testsystem.WaiterDef)
	big := e.tenant("big", nil, testsystem.WaiterDef)
	cs, cb := e.clients(e.token(small, tenancy.RoleClient)), e.clients(e.token(big, tenancy.RoleClient))
	ctx := t.Context()
	for range 2 {
		_, err := cs.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "waiter"}))
		require.NoError(t, err)
	}
	_, err := cs.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "waiter"}))
	requireCode(t, err, connect.CodeResourceExhausted, "running_instances")
	for range 3 {
		_, err := cb.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "waiter"}))
		require.NoError(t, err)
	}
	// Payload: over the tenant's limit, under the API's bound.
	_, err = cs.client.RaiseEvent(ctx, req(&orchardv1.RaiseEventRequest{InstanceId: "x", Name: "go", Payload: []byte(`"0123456789abcdef"`)}))
	requireCode(t, err, connect.CodeResourceExhausted, "payload_bytes")
	_, err = cb.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "waiter", Input: []byte(`"0123456789abcdef"`)}))
	require.NoError(t, err)
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	slow := e.tenant("slow", &store.Limits{RequestsPerSecond: 0.01, Burst: 3})
	fast := e.tenant("fast", nil)
	cs, cf := e.clients(e.token(slow, tenancy.RoleClient)), e.clients(e.token(fast, tenancy.RoleClient))
	ctx := t.Context()
	for range 3 {
		_, err := cs.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{}))
		require.NoError(t, err)
	}
	_, err := cs.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{}))
	requireCode(t, err, connect.CodeResourceExhausted, "requests", "retry after")
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	var hint bool
	for _, d := range ce.Details() {
		if d.Type() == "google.rpc.RetryInfo" {
			hint = true
		}
	}
	require.True(t, hint, "no RetryInfo detail")
	for range 10 {
		_, err := cf.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{}))
		require.NoError(t, err)
	}
}

// TestWorkerCallsHaveTheirOwnRequestBudget: a tenant whose other calls are
// past its request rate still polls and completes its tasks, so that
// starting past the rate cannot leave what it started unfinished; its
// worker calls have a bucket of the same rate, not an unlimited one.
func TestWorkerCallsHaveTheirOwnRequestBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Burst 4: registering the definition takes one, the start a second.
	busy := e.tenant("busy", &store.Limits{RequestsPerSecond: 0.01, Burst: 4}, testsystem.EchoDef)
	e.dispatch()
	c := e.all(busy)
	ctx := t.Context()
	_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: "i", Input: []byte(`1`)}))
	require.NoError(t, err)
	for range 2 {
		_, err := c.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{}))
		require.NoError(t, err)
	}
	_, err = c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo"}))
	requireCode(t, err, connect.CodeResourceExhausted, "requests")

	polled, err := c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", Wait: durationpb.New(10 * time.Second)}))
	require.NoError(t, err, "a worker's poll beside exhausted starts")
	require.Len(t, polled.Msg.Tasks, 1)
	_, err = c.worker.CompleteActivityTask(ctx, req(&orchardv1.CompleteActivityTaskRequest{TaskToken: polled.Msg.Tasks[0].TaskToken, Result: []byte(`1`)}))
	require.NoError(t, err, "a worker's completion beside exhausted starts")
	for range 2 {
		_, err := c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", Wait: durationpb.New(0)}))
		require.NoError(t, err)
	}
	_, err = c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", Wait: durationpb.New(0)}))
	requireCode(t, err, connect.CodeResourceExhausted, "requests")
	_, err = c.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{}))
	requireCode(t, err, connect.CodeResourceExhausted, "requests")
}

// TestStartsHaveTheirOwnRate: a tenant past its rate of starts is refused
// its starts, naming them, with a retry hint, over each protocol, while its
// other calls keep the whole request rate; the starts' burst is the
// requests' unless set apart; a start also takes a request.
// (TestRateRefusalReadsNoBody: the refusal reads no body.)
func TestStartsHaveTheirOwnRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	starter := e.tenant("starter", &store.Limits{RequestsPerSecond: 100_000, Burst: 2, StartsPerSecond: 0.001}, testsystem.EchoDef)
	c := e.clients(e.token(starter, tenancy.RoleClient))
	ctx := t.Context()
	for i := range 2 {
		_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: strconv.Itoa(i), Input: []byte(`1`)}))
		require.NoError(t, err)
	}
	for _, pc := range e.protocolClients(e.token(starter, tenancy.RoleClient), asIs) {
		_, err := pc.c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", Input: []byte(`1`)}))
		requireRefusal(t, err, tenancy.ResourceStarts)
	}
	for range 10 {
		_, err := c.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{}))
		require.NoError(t, err, "a read beside exhausted starts")
	}

	// A burst of starts of its own: 3 at once, while requests may come 100
	// at once.
	bounded := e.tenant("bounded", &store.Limits{RequestsPerSecond: 100_000, Burst: 100, StartsPerSecond: 0.001, StartsBurst: 3}, testsystem.EchoDef)
	cs := e.clients(e.token(bounded, tenancy.RoleClient))
	for i := range 3 {
		_, err := cs.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: strconv.Itoa(i), Input: []byte(`1`)}))
		require.NoError(t, err)
	}
	_, err := cs.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", Input: []byte(`1`)}))
	requireRefusal(t, err, tenancy.ResourceStarts)
	requireCode(t, err, connect.CodeResourceExhausted, "starts (limit 3)")

	// A start takes a request too: past the request rate, the start
	// bucket's tokens do not let it through.
	both := e.tenant("both", &store.Limits{RequestsPerSecond: 0.001, Burst: 2, StartsPerSecond: 100_000}, testsystem.EchoDef)
	cb := e.clients(e.token(both, tenancy.RoleClient))
	_, err = cb.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", Input: []byte(`1`)}))
	require.NoError(t, err, "registering took one token, the start the other")
	_, err = cb.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", Input: []byte(`1`)}))
	requireCode(t, err, connect.CodeResourceExhausted, "requests")
}

// definitionReads counts the definition reads of the store it wraps.
type definitionReads struct {
	api.Store
	n atomic.Int64
}

func (d *definitionReads) GetDefinition(ctx context.Context, p *store.GetDefinitionParams) (*store.Definition, error) {
	d.n.Add(1)
	return d.Store.GetDefinition(ctx, p)
}

// TestStartReadsANamedVersionOnce: starts naming a registered version read
// it once; starts of the latest version read it each time (a newer one may
// have been registered); a version not yet registered is not remembered as
// missing, and starts as soon as it is registered.
func TestStartReadsANamedVersionOnce(t *testing.T) {
	t.Parallel()
	var reads *definitionReads
	e := newEnv(t, func(c *api.Config) { reads = &definitionReads{Store: c.Store}; c.Store = reads })
	acme := e.tenant("acme", nil, testsystem.WaiterDef)
	c := e.clients(e.token(acme, tenancy.RoleClient))
	ctx := t.Context()
	start := func(version string) error {
		_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "waiter", Version: version}))
		return err
	}
	for range 3 {
		require.NoError(t, start("1"))
	}
	require.Equal(t, int64(1), reads.n.Load())
	for range 2 {
		require.NoError(t, start(""))
	}
	require.Equal(t, int64(3), reads.n.Load())

	requireCode(t, start("2"), connect.CodeNotFound)
	_, err := e.all(acme).defs.RegisterDefinition(ctx, req(&orchardv1.RegisterDefinitionRequest{
		Document: []byte(strings.Replace(testsystem.WaiterDef, `version: "1"`, `version: "2"`, 1))}))
	require.NoError(t, err)
	require.NoError(t, start("2"))
	// Another tenant's version of the same name is its own.
	other := e.tenant("other", nil)
	_, err = e.clients(e.token(other, tenancy.RoleClient)).client.StartOrchestration(ctx,
		req(&orchardv1.StartOrchestrationRequest{Name: "waiter", Version: "1"}))
	requireCode(t, err, connect.CodeNotFound)
}

// TestCompressesOnlyLargeResponses: a client that accepts gzip gets a small
// answer as it is and a large one compressed, and both read back the same.
func TestCompressesOnlyLargeResponses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme", nil, testsystem.WaiterDef)
	token := e.token(acme, tenancy.RoleClient)
	c := e.clients(token)
	big := `{"pad":"` + strings.Repeat("orchard ", 1024) + `"}`
	for id, input := range map[string]string{"small": `{"x":1}`, "big": big} {
		_, err := c.client.StartOrchestration(t.Context(), req(&orchardv1.StartOrchestrationRequest{Name: "waiter", InstanceId: id, Input: []byte(input)}))
		require.NoError(t, err)
	}
	for id, gzipped := range map[string]bool{"small": false, "big": true} {
		r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.Server.URL+"/orchard.v1.ClientService/GetInstance",
			strings.NewReader(`{"instanceId":"`+id+`"}`))
		require.NoError(t, err)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+token)
		// Asked for explicitly, the transport hands the body over as sent.
		r.Header.Set("Accept-Encoding", "gzip")
		resp, err := e.Server.Client().Do(r)
		require.NoError(t, err)
		body := io.Reader(resp.Body)
		if gzipped {
			require.Equal(t, "gzip", resp.Header.Get("Content-Encoding"), id)
			body, err = gzip.NewReader(resp.Body)
			require.NoError(t, err)
		} else {
			require.Empty(t, resp.Header.Get("Content-Encoding"), id)
		}
		var got struct {
			Instance struct {
				InstanceID string `json:"instanceId"`
			}
		}
		require.NoError(t, json.NewDecoder(body).Decode(&got), id)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode, id)
		require.Equal(t, id, got.Instance.InstanceID)
	}
}
