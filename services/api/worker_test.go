package api_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/engine"
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
	require.LessOrEqual(t, len(res.Msg.Tasks), 1, "a poll without max_tasks leased more than one task")
	if len(res.Msg.Tasks) == 0 {
		return nil
	}
	return res.Msg.Tasks[0]
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
	require.Empty(t, res.Msg.Tasks)
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
}

// TestPollLeasesSeveralTasks: a poll with max_tasks leases up to that many
// tasks, each with a token of its own, and only those in the response's
// tasks; without max_tasks it leases one, in task as well.
func TestPollLeasesSeveralTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme", nil, testsystem.EchoDef)
	e.dispatch()
	c := e.clients(e.token(acme, tenancy.RoleClient, tenancy.RoleWorker))
	ctx := t.Context()

	const instances = 6
	for i := range instances {
		_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: fmt.Sprintf("b-%d", i), Input: []byte(`{}`)}))
		require.NoError(t, err)
	}
	// Every instance's task is queued before the first poll.
	for i := range instances {
		testwait.Until(t, 30*time.Second, "the activity of b-"+strconv.Itoa(i)+" scheduled", func() bool {
			h, err := c.client.GetHistory(ctx, req(&orchardv1.GetHistoryRequest{InstanceId: fmt.Sprintf("b-%d", i)}))
			require.NoError(t, err)
			return slices.ContainsFunc(h.Msg.Events, func(ev *orchardv1.HistoryEvent) bool { return ev.Kind == string(engine.KindActivityScheduled) })
		})
	}
	pollN := func(max *int32) *orchardv1.PollActivityTaskResponse {
		res, err := c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{
			TaskQueue: "q", Wait: durationpb.New(100 * time.Millisecond), MaxTasks: max,
		}))
		require.NoError(t, err)
		return res.Msg
	}
	seen := map[string]bool{}
	tokens := map[string]bool{}
	take := func(tasks []*orchardv1.ActivityTask) {
		for _, task := range tasks {
			require.False(t, seen[task.InstanceId], "%s's task leased twice", task.InstanceId)
			seen[task.InstanceId] = true
			tokens[task.TaskToken] = true
			require.True(t, task.LeaseExpiresAt.AsTime().After(time.Now()))
		}
	}
	four := int32(4)
	batch := pollN(&four)
	require.Len(t, batch.Tasks, 4)
	//lint:ignore SA1019 what workers that predate max_tasks read
	require.Nil(t, batch.GetTask(), "task is only for polls without max_tasks")
	take(batch.Tasks)
	one := pollN(nil)
	require.Len(t, one.Tasks, 1, "without max_tasks, one task")
	//lint:ignore SA1019 what workers that predate max_tasks read
	require.Equal(t, one.Tasks[0].TaskToken, one.GetTask().GetTaskToken(), "without max_tasks, the task also in task")
	take(one.Tasks)
	many := int32(64)
	last := pollN(&many)
	require.Len(t, last.Tasks, 1, "the one task left")
	take(last.Tasks)
	require.Len(t, tokens, instances)
	require.Empty(t, pollN(&many).Tasks)

	// Each task is completed on its own token.
	for token := range tokens {
		_, err := c.worker.CompleteActivityTask(ctx, req(&orchardv1.CompleteActivityTaskRequest{TaskToken: token, Result: []byte(`{"r":1}`)}))
		require.NoError(t, err)
	}
	for i := range instances {
		require.Equal(t, orchardv1.InstanceStatus_INSTANCE_STATUS_COMPLETED, c.waitDone(t, fmt.Sprintf("b-%d", i)).Status)
	}
}
