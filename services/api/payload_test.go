package api_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
)

// TestPayloadsAreCheckedAtTheAPI: every JSON payload the API takes (input,
// event, activity result, failure details) is refused with InvalidArgument
// when the engine could not take it as it is (too deep, invalid UTF-8, half
// a surrogate pair); one nested as deep as allowed runs and comes back
// unaltered.
func TestPayloadsAreCheckedAtTheAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme", nil, testsystem.QuickDef, testsystem.EchoDef)
	e.dispatch()
	c := e.clients(e.token(acme, tenancy.RoleClient, tenancy.RoleWorker))
	ctx := t.Context()

	deep := []byte(strings.Repeat("[", 10_000) + strings.Repeat("]", 10_000))
	bad := map[string]struct {
		payload []byte
		message string
	}{
		"ten thousand levels": {deep, "nested more than 128 levels"},
		"invalid UTF-8":       {[]byte("\"caf\xe9\""), "invalid UTF-8 at offset 4"},
		"a lone surrogate":    {[]byte(`{"k":"\udc00"}`), `\udc00 is half of a surrogate pair`},
	}
	_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: "work", Input: []byte(`1`)}))
	require.NoError(t, err)
	task := poll(t, c, "q")
	require.NotNil(t, task)
	for name, tc := range bad {
		_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "quick", InstanceId: "bad", Input: tc.payload}))
		requireCode(t, err, connect.CodeInvalidArgument, "input: not an acceptable JSON document", tc.message)
		_, err = c.client.RaiseEvent(ctx, req(&orchardv1.RaiseEventRequest{InstanceId: "work", Name: "ev", Payload: tc.payload}))
		requireCode(t, err, connect.CodeInvalidArgument, "payload: not an acceptable JSON document", tc.message)
		_, err = c.worker.CompleteActivityTask(ctx, req(&orchardv1.CompleteActivityTaskRequest{TaskToken: task.TaskToken, Result: tc.payload}))
		requireCode(t, err, connect.CodeInvalidArgument, "result: not an acceptable JSON document", tc.message)
		_, err = c.worker.FailActivityTask(ctx, req(&orchardv1.FailActivityTaskRequest{TaskToken: task.TaskToken,
			Failure: &orchardv1.ActivityFailure{Message: "m", Details: tc.payload}}))
		requireCode(t, err, connect.CodeInvalidArgument, "failure.details: not an acceptable JSON document", tc.message)
		t.Logf("%s: refused everywhere", name)
	}
	_, err = c.client.GetInstance(ctx, req(&orchardv1.GetInstanceRequest{InstanceId: "bad"}))
	requireCode(t, err, connect.CodeNotFound)

	// As deep as allowed, with text outside ASCII: accepted, run, unaltered.
	ok := strings.Repeat("[", 128) + `"café 😀 \ud83d\ude00"` + strings.Repeat("]", 128)
	_, err = c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "quick", InstanceId: "deep", Input: []byte(ok)}))
	require.NoError(t, err)
	in := c.waitDone(t, "deep")
	require.Equal(t, orchardv1.InstanceStatus_INSTANCE_STATUS_COMPLETED, in.Status, in.Error)
	require.JSONEq(t, ok, string(in.Output))
	_, err = c.worker.CompleteActivityTask(ctx, req(&orchardv1.CompleteActivityTaskRequest{TaskToken: task.TaskToken, Result: []byte(ok)}))
	require.NoError(t, err)
	in = c.waitDone(t, "work")
	require.Equal(t, orchardv1.InstanceStatus_INSTANCE_STATUS_COMPLETED, in.Status, in.Error)
	require.JSONEq(t, ok, string(in.Output))
}
