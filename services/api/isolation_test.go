package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"

	"github.com/orchardhq/orchard/internal/testsystem"
)

// TestTenantIsolation: tenant B's tokens on tenant A's instances, tasks,
// definitions and page tokens behave as if they did not exist, and leave
// A's objects untouched.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.tenant("tenant-a", nil, testsystem.EchoDef)
	b := e.tenant("tenant-b", nil)
	ca, cb := e.all(a), e.all(b)
	ctx := t.Context()
	_, err := ca.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: "mine"}))
	require.NoError(t, err)
	_, err = ca.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: "mine2"}))
	require.NoError(t, err)
	e.dispatch()
	task := poll(t, ca, "q")
	require.NotNil(t, task)
	page, err := ca.client.ListInstances(ctx, req(&orchardv1.ListInstancesRequest{PageSize: 1}))
	require.NoError(t, err)
	require.NotEmpty(t, page.Msg.NextPageToken)
	defs, err := ca.defs.ListDefinitions(ctx, req(&orchardv1.ListDefinitionsRequest{}))
	require.NoError(t, err)
	require.Len(t, defs.Msg.Definitions, 1)

	id := task.InstanceId
	notFound := map[string]func() error{
		"GetInstance": func() error {
			_, err := cb.client.GetInstance(ctx, req(&orchardv1.GetInstanceRequest{InstanceId: id}))
			return err
		},
		"WaitForCompletion": func() error {
			_, err := cb.client.WaitForCompletion(ctx, req(&orchardv1.WaitForCompletionRequest{InstanceId: id}))
			return err
		},
		"RaiseEvent": func() error {
			_, err := cb.client.RaiseEvent(ctx, req(&orchardv1.RaiseEventRequest{InstanceId: id, Name: "x"}))
			return err
		},
		"CancelInstance": func() error {
			_, err := cb.client.CancelInstance(ctx, req(&orchardv1.CancelInstanceRequest{InstanceId: id}))
			return err
		},
		"GetHistory": func() error {
			_, err := cb.client.GetHistory(ctx, req(&orchardv1.GetHistoryRequest{InstanceId: id}))
			return err
		},
		"ListExecutions": func() error {
			_, err := cb.client.ListExecutions(ctx, req(&orchardv1.ListExecutionsRequest{InstanceId: id}))
			return err
		},
		"GetInstanceTree": func() error {
			_, err := cb.client.GetInstanceTree(ctx, req(&orchardv1.GetInstanceTreeRequest{InstanceId: id}))
			return err
		},
		"DeleteInstance": func() error {
			_, err := cb.client.DeleteInstance(ctx, req(&orchardv1.DeleteInstanceRequest{InstanceId: id, Force: true}))
			return err
		},
		"PruneExecutions": func() error {
			_, err := cb.client.PruneExecutions(ctx, req(&orchardv1.PruneExecutionsRequest{InstanceId: id, Options: &orchardv1.PruneOptions{KeepLast: 1}}))
			return err
		},
		"GetDefinition": func() error {
			_, err := cb.defs.GetDefinition(ctx, req(&orchardv1.GetDefinitionRequest{Name: "echo"}))
			return err
		},
		"StartOrchestration of A's definition": func() error {
			_, err := cb.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo"}))
			return err
		},
	}
	for name, call := range notFound {
		t.Run(name, func(t *testing.T) { requireCode(t, call(), connect.CodeNotFound) })
	}
	invalid := map[string]func() error{
		"ListInstances with A's page token": func() error {
			_, err := cb.client.ListInstances(ctx, req(&orchardv1.ListInstancesRequest{PageSize: 1, PageToken: page.Msg.NextPageToken}))
			return err
		},
		"HeartbeatActivityTask with A's task": func() error {
			_, err := cb.worker.HeartbeatActivityTask(ctx, req(&orchardv1.HeartbeatActivityTaskRequest{TaskToken: task.TaskToken}))
			return err
		},
		"CompleteActivityTask with A's task": func() error {
			_, err := cb.worker.CompleteActivityTask(ctx, req(&orchardv1.CompleteActivityTaskRequest{TaskToken: task.TaskToken}))
			return err
		},
		"FailActivityTask with A's task": func() error {
			_, err := cb.worker.FailActivityTask(ctx, req(&orchardv1.FailActivityTaskRequest{TaskToken: task.TaskToken, Failure: &orchardv1.ActivityFailure{Message: "x"}}))
			return err
		},
	}
	for name, call := range invalid {
		t.Run(name, func(t *testing.T) { requireCode(t, call(), connect.CodeInvalidArgument, "tenant") })
	}
	// Nothing of A's is visible in B's listings, counts, usage or queues.
	list, err := cb.client.ListInstances(ctx, req(&orchardv1.ListInstancesRequest{}))
	require.NoError(t, err)
	require.Empty(t, list.Msg.Instances)
	count, err := cb.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{}))
	require.NoError(t, err)
	require.Zero(t, count.Msg.Total)
	usage, err := cb.tenant.GetUsage(ctx, req(&orchardv1.GetUsageRequest{}))
	require.NoError(t, err)
	require.Zero(t, usage.Msg.Usage.Instances.Running)
	bdefs, err := cb.defs.ListDefinitions(ctx, req(&orchardv1.ListDefinitionsRequest{}))
	require.NoError(t, err)
	require.Empty(t, bdefs.Msg.Definitions)
	bulk, err := cb.client.DeleteInstances(ctx, req(&orchardv1.DeleteInstancesRequest{CompletedBefore: timestamppb.New(time.Now().Add(time.Hour))}))
	require.NoError(t, err)
	require.Zero(t, bulk.Msg.Counts.InstancesDeleted)
	pruned, err := cb.client.PruneExecutionsBulk(ctx, req(&orchardv1.PruneExecutionsBulkRequest{
		Filter: &orchardv1.InstanceFilter{InstanceIds: []string{id}}, Options: &orchardv1.PruneOptions{KeepLast: 1}}))
	require.NoError(t, err)
	require.Zero(t, pruned.Msg.Counts.InstancesProcessed)
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	polled, err := cb.worker.PollActivityTask(pctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", Wait: durationpb.New(50 * time.Millisecond)}))
	require.NoError(t, err)
	require.Empty(t, polled.Msg.Tasks, "B leased A's task")

	// Every RPC that names an instance, a task, a definition or a page
	// token is covered above, so that a new one without a case fails here.
	covered := map[string]bool{
		// Checked by what B sees: nothing of A's.
		"ListInstances": true, "CountInstances": true, "ListDefinitions": true, "DeleteInstances": true, "PollActivityTask": true,
		"PruneExecutionsBulk": true,
	}
	for name := range notFound {
		covered[strings.Fields(name)[0]] = true
	}
	for name := range invalid {
		covered[strings.Fields(name)[0]] = true
	}
	for _, svc := range []string{"ClientService", "WorkerService", "DefinitionService"} {
		sd, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName("orchard.v1." + svc))
		require.NoError(t, err)
		methods := sd.(protoreflect.ServiceDescriptor).Methods()
		for i := range methods.Len() {
			m := methods.Get(i)
			fields := m.Input().Fields()
			names := fields.ByName("instance_id") != nil || fields.ByName("instance_ids") != nil ||
				fields.ByName("task_token") != nil || fields.ByName("page_token") != nil ||
				(svc == "DefinitionService" && fields.ByName("name") != nil) || fields.ByName("filter") != nil
			if names {
				require.True(t, covered[string(m.Name())], "%s.%s names a tenant's object but has no isolation case", svc, m.Name())
			}
		}
	}

	// A's objects are intact and its task still works for A.
	_, err = ca.worker.HeartbeatActivityTask(ctx, req(&orchardv1.HeartbeatActivityTaskRequest{TaskToken: task.TaskToken}))
	require.NoError(t, err)
	in, err := ca.client.GetInstance(ctx, req(&orchardv1.GetInstanceRequest{InstanceId: id}))
	require.NoError(t, err)
	require.Equal(t, orchardv1.InstanceStatus_INSTANCE_STATUS_RUNNING, in.Msg.Instance.Status)
	_, err = ca.worker.CompleteActivityTask(ctx, req(&orchardv1.CompleteActivityTaskRequest{TaskToken: task.TaskToken, Result: []byte(`1`)}))
	require.NoError(t, err)
	require.Equal(t, orchardv1.InstanceStatus_INSTANCE_STATUS_COMPLETED, ca.waitDone(t, id).Status)
}
