package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
)

// TestLongPolls: WaitForCompletion and PollActivityTask end at their wait,
// before the caller's own deadline, and as soon as the caller goes away,
// leaving no goroutine behind. Not parallel: it counts goroutines.
func TestLongPolls(t *testing.T) {
	e := newEnv(t)
	acme := e.tenant("acme", nil, testsystem.WaiterDef)
	tr := &http.Transport{}
	c := e.clientsOn(&http.Client{Transport: tr}, e.token(acme, tenancy.RoleClient, tenancy.RoleWorker))
	ctx := t.Context()
	_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "waiter", InstanceId: "w"}))
	require.NoError(t, err)
	// Warm up the pools (HTTP, database) before taking the baseline.
	_, err = c.client.WaitForCompletion(ctx, req(&orchardv1.WaitForCompletionRequest{InstanceId: "w", Timeout: durationpb.New(0)}))
	require.NoError(t, err)
	_, err = c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", Wait: durationpb.New(0)}))
	require.NoError(t, err)
	tr.CloseIdleConnections()
	baseline := goleak.IgnoreCurrent()

	// At the wait: the current state, not done.
	start := time.Now()
	res, err := c.client.WaitForCompletion(ctx, req(&orchardv1.WaitForCompletionRequest{InstanceId: "w", Timeout: durationpb.New(150 * time.Millisecond)}))
	require.NoError(t, err)
	require.False(t, res.Msg.Done)
	require.Equal(t, orchardv1.InstanceStatus_INSTANCE_STATUS_RUNNING, res.Msg.Instance.Status)
	require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
	polled, err := c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", Wait: durationpb.New(150 * time.Millisecond)}))
	require.NoError(t, err)
	require.Empty(t, polled.Msg.Tasks)

	// Before the caller's deadline, when it is the nearer one. The deadline
	// travels as Connect's timeout header and the caller's own context has
	// none, so what is judged is the server's answer, not how fast a loaded
	// machine carries it back.
	withDeadline := req(&orchardv1.WaitForCompletionRequest{InstanceId: "w", Timeout: durationpb.New(time.Minute)})
	withDeadline.Header().Set("Connect-Timeout-Ms", "300")
	start = time.Now()
	res, err = c.client.WaitForCompletion(ctx, withDeadline)
	require.NoError(t, err)
	require.False(t, res.Msg.Done)
	require.Less(t, time.Since(start), time.Minute, "the poll ended at the caller's deadline, not at its own wait")

	// The caller goes away: the server's poll ends too.
	for name, call := range map[string]func(context.Context) error{
		"WaitForCompletion": func(ctx context.Context) error {
			_, err := c.client.WaitForCompletion(ctx, req(&orchardv1.WaitForCompletionRequest{InstanceId: "w", Timeout: durationpb.New(time.Minute)}))
			return err
		},
		"PollActivityTask": func(ctx context.Context) error {
			_, err := c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", Wait: durationpb.New(time.Minute)}))
			return err
		},
	} {
		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- call(cctx) }()
		require.Eventually(t, func() bool { return e.API.ActiveLongPolls() == 1 }, 10*time.Second, time.Millisecond, name)
		cancel()
		requireCode(t, <-errc, connect.CodeCanceled)
		require.Eventually(t, func() bool { return e.API.ActiveLongPolls() == 0 }, 10*time.Second, time.Millisecond, name)
	}
	tr.CloseIdleConnections()
	goleak.VerifyNone(t, baseline)
}
