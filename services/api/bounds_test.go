package api_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"

	"github.com/orchardhq/orchard/internal/testsystem"
)

// TestTimeBoundsAreAppliedAsGiven: a time bound that is present is applied
// as it is, the zero timestamp (0001-01-01) and the Unix epoch included; it
// never widens into "no bound". Nothing ended before either, so nothing is
// counted, listed, deleted or pruned.
func TestTimeBoundsAreAppliedAsGiven(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme", nil, testsystem.QuickDef, testsystem.LoopDef)
	e.dispatch()
	c := e.all(acme)
	ctx := t.Context()
	for _, id := range []string{"q1", "q2"} {
		_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "quick", InstanceId: id, Input: []byte(`1`)}))
		require.NoError(t, err)
		c.waitDone(t, id)
	}
	_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "loop", InstanceId: "chain", Input: []byte(`{"n":0}`)}))
	require.NoError(t, err)
	c.waitDone(t, "chain")

	for name, bound := range map[string]*timestamppb.Timestamp{
		"the zero timestamp": timestamppb.New(time.Time{}),
		"the Unix epoch":     timestamppb.New(time.Unix(0, 0)),
	} {
		t.Run(name, func(t *testing.T) {
			for _, f := range []*orchardv1.InstanceFilter{
				{CompletedBefore: bound}, {CreatedBefore: bound}, {UpdatedBefore: bound},
			} {
				counts, err := c.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{Filter: f}))
				require.NoError(t, err)
				require.Zero(t, counts.Msg.Total, "%v", f)
				list, err := c.client.ListInstances(ctx, req(&orchardv1.ListInstancesRequest{Filter: f}))
				require.NoError(t, err)
				require.Empty(t, list.Msg.Instances, "%v", f)
				del, err := c.client.DeleteInstances(ctx, req(&orchardv1.DeleteInstancesRequest{Filter: f}))
				require.NoError(t, err)
				require.Zero(t, del.Msg.Counts.InstancesDeleted, "%v", f)
			}
			del, err := c.client.DeleteInstances(ctx, req(&orchardv1.DeleteInstancesRequest{CompletedBefore: bound}))
			require.NoError(t, err)
			require.Zero(t, del.Msg.Counts.InstancesDeleted)
			pruned, err := c.client.PruneExecutions(ctx, req(&orchardv1.PruneExecutionsRequest{InstanceId: "chain",
				Options: &orchardv1.PruneOptions{CompletedBefore: bound}}))
			require.NoError(t, err)
			require.Zero(t, pruned.Msg.Counts.ExecutionsDeleted)
			bulk, err := c.client.PruneExecutionsBulk(ctx, req(&orchardv1.PruneExecutionsBulkRequest{
				Filter: &orchardv1.InstanceFilter{InstanceIds: []string{"chain"}}, Options: &orchardv1.PruneOptions{CompletedBefore: bound}}))
			require.NoError(t, err)
			require.Zero(t, bulk.Msg.Counts.ExecutionsDeleted)
		})
	}
	counts, err := c.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{}))
	require.NoError(t, err)
	require.Equal(t, int64(3), counts.Msg.Total, "everything is still there")
	execs, err := c.client.GetInstance(ctx, req(&orchardv1.GetInstanceRequest{InstanceId: "chain"}))
	require.NoError(t, err)
	require.Equal(t, int64(4), execs.Msg.Instance.ExecutionCount)
}
