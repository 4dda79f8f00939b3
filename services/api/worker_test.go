package api_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
)

// poll polls q once for a task, waiting up to a second.
func poll(t *testing.T, c *clients, q string) *orchardv1.ActivityTask {
	t.Helper()
	res, err := c.worker.PollActivityTask(t.Context(), req(&orchardv1.PollActivityTaskRequest{
		TaskQueue: q, Wait: durationpb.New(5 * time.Second), WorkerIdentity: "test-worker",
	}))
	require.NoError(t, err)
	return res.Msg.Task
}

// TestWorkerService: poll, heartbeat, complete and fail through the API, with
// a dispatcher scheduling the activities; a lost lease is
// FailedPrecondition; an altered token is InvalidArgument.
func TestWorkerService(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme", nil, testsystem.EchoDef)
	e.dispatch()
	c := e.clients(e.token(acme, tenancy.RoleClient, tenancy.RoleWorker))
	ctx := t.Context()

	_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: "ok", Input: []byte(`{"v":1}`)}))
	require.NoError(t, err)
	task := poll(t, c, "q")
	require.NotNil(t, task)
	require.Equal(t, "ok", task.InstanceId)
	require.Equal(t, "work", task.Name)
	require.Equal(t, int32(1), task.Attempt)
	require.JSONEq(t, `{"v":1}`, string(task.Input))
	hb, err := c.worker.HeartbeatActivityTask(ctx, req(&orchardv1.HeartbeatActivityTaskRequest{TaskToken: task.TaskToken, LeaseDuration: durationpb.New(time.Minute)}))
	require.NoError(t, err)
	require.True(t, hb.Msg.LeaseExpiresAt.AsTime().After(time.Now().Add(50*time.Second)))
	_, err = c.worker.HeartbeatActivityTask(ctx, req(&orchardv1.HeartbeatActivityTaskRequest{TaskToken: task.TaskToken + "x"}))
	requireCode(t, err, connect.CodeInvalidArgument, "task_token")
	_, err = c.worker.CompleteActivityTask(ctx, req(&orchardv1.CompleteActivityTaskRequest{TaskToken: task.TaskToken, Result: []byte(`{`)}))
	requireCode(t, err, connect.CodeInvalidArgument, "result")
	_, err = c.worker.CompleteActivityTask(ctx, req(&orchardv1.CompleteActivityTaskRequest{TaskToken: task.TaskToken, Result: []byte(`{"r":2}`)}))
	require.NoError(t, err)
	require.JSONEq(t, `{"r":2}`, string(c.waitDone(t, "ok").Output))
	// The task is gone: its token's lease is lost.
	_, err = c.worker.HeartbeatActivityTask(ctx, req(&orchardv1.HeartbeatActivityTaskRequest{TaskToken: task.TaskToken}))
	requireCode(t, err, connect.CodeFailedPrecondition)
	_, err = c.worker.CompleteActivityTask(ctx, req(&orchardv1.CompleteActivityTaskRequest{TaskToken: task.TaskToken}))
	requireCode(t, err, connect.CodeFailedPrecondition)

	// A non-retryable failure fails the instance.
	_, err = c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: "bad"}))
	require.NoError(t, err)
	task = poll(t, c, "q")
	require.NotNil(t, task)
	_, err = c.worker.FailActivityTask(ctx, req(&orchardv1.FailActivityTaskRequest{TaskToken: task.TaskToken,
		Failure: &orchardv1.ActivityFailure{Message: "boom", Kind: "InvalidInput"}}))
	require.NoError(t, err)
	failed := c.waitDone(t, "bad")
	require.Equal(t, orchardv1.InstanceStatus_INSTANCE_STATUS_FAILED, failed.Status)
	require.Contains(t, failed.Error, "boom")
	_, err = c.worker.FailActivityTask(ctx, req(&orchardv1.FailActivityTaskRequest{TaskToken: task.TaskToken,
		Failure: &orchardv1.ActivityFailure{Message: "again"}}))
	requireCode(t, err, connect.CodeFailedPrecondition)

	// Cancelling the instance removes its task: the holder's heartbeat fails.
	_, err = c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: "cancel-me"}))
	require.NoError(t, err)
	task = poll(t, c, "q")
	require.NotNil(t, task)
	_, err = c.client.CancelInstance(ctx, req(&orchardv1.CancelInstanceRequest{InstanceId: "cancel-me"}))
	require.NoError(t, err)
	c.waitDone(t, "cancel-me")
	_, err = c.worker.HeartbeatActivityTask(ctx, req(&orchardv1.HeartbeatActivityTaskRequest{TaskToken: task.TaskToken}))
	requireCode(t, err, connect.CodeFailedPrecondition)

	// An empty queue: the poll ends at its wait with no task.
	start := time.Now()
	res, err := c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "empty", Wait: durationpb.New(100 * time.Millisecond)}))
	require.NoError(t, err)
	require.Nil(t, res.Msg.Task)
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
}
