package api_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"

	"github.com/orchardhq/orchard/internal/testsystem"
)

// TestValidation: requests that break the protos' rules are
// InvalidArgument naming the field, before any handler runs.
func TestValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme", nil, testsystem.QuickDef)
	c := e.all(acme)
	platform := e.clients(e.token("", "platform-admin"))
	ctx := t.Context()
	big := append(append([]byte(`"`), bytes.Repeat([]byte("a"), 262144)...), '"')
	now := time.Now()
	cases := []struct {
		name  string
		call  func() error
		field string
	}{
		{"oversized input", func() error {
			_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "quick", Input: big}))
			return err
		}, "input"},
		{"oversized event", func() error {
			_, err := c.client.RaiseEvent(ctx, req(&orchardv1.RaiseEventRequest{InstanceId: "i", Name: "e", Payload: big}))
			return err
		}, "payload"},
		{"oversized result", func() error {
			_, err := c.worker.CompleteActivityTask(ctx, req(&orchardv1.CompleteActivityTaskRequest{TaskToken: "t", Result: big}))
			return err
		}, "result"},
		{"bad instance id", func() error {
			_, err := c.client.GetInstance(ctx, req(&orchardv1.GetInstanceRequest{InstanceId: "has space"}))
			return err
		}, "instance_id"},
		{"empty instance id", func() error {
			_, err := c.client.GetInstance(ctx, req(&orchardv1.GetInstanceRequest{}))
			return err
		}, "instance_id"},
		{"long instance id", func() error {
			_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "quick", InstanceId: strings.Repeat("x", 201)}))
			return err
		}, "instance_id"},
		{"page size out of range", func() error {
			_, err := c.client.ListInstances(ctx, req(&orchardv1.ListInstancesRequest{PageSize: 1001}))
			return err
		}, "page_size"},
		{"negative page size", func() error {
			_, err := c.client.GetHistory(ctx, req(&orchardv1.GetHistoryRequest{InstanceId: "i", PageSize: -1}))
			return err
		}, "page_size"},
		{"bad status filter", func() error {
			_, err := c.client.ListInstances(ctx, req(&orchardv1.ListInstancesRequest{Filter: &orchardv1.InstanceFilter{
				Statuses: []orchardv1.InstanceStatus{orchardv1.InstanceStatus_INSTANCE_STATUS_UNSPECIFIED}}}))
			return err
		}, "statuses"},
		{"inverted time range", func() error {
			_, err := c.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{Filter: &orchardv1.InstanceFilter{
				CreatedAfter: timestamppb.New(now), CreatedBefore: timestamppb.New(now.Add(-time.Hour))}}))
			return err
		}, "created_after"},
		{"roots only with a parent", func() error {
			_, err := c.client.ListInstances(ctx, req(&orchardv1.ListInstancesRequest{Filter: &orchardv1.InstanceFilter{RootsOnly: true, ParentInstanceId: "p"}}))
			return err
		}, "roots_only"},
		{"forged page token", func() error {
			_, err := c.client.ListInstances(ctx, req(&orchardv1.ListInstancesRequest{PageToken: "eyJxIjoiIn0.AAAA"}))
			return err
		}, "page_token"},
		{"forged definitions page token", func() error {
			_, err := c.defs.ListDefinitions(ctx, req(&orchardv1.ListDefinitionsRequest{PageToken: "garbage"}))
			return err
		}, "page_token"},
		{"bulk delete without criteria", func() error {
			_, err := c.client.DeleteInstances(ctx, req(&orchardv1.DeleteInstancesRequest{}))
			return err
		}, "instance_ids"},
		{"prune without options", func() error {
			_, err := c.client.PruneExecutions(ctx, req(&orchardv1.PruneExecutionsRequest{InstanceId: "i"}))
			return err
		}, "options"},
		{"prune without criterion", func() error {
			_, err := c.client.PruneExecutions(ctx, req(&orchardv1.PruneExecutionsRequest{InstanceId: "i", Options: &orchardv1.PruneOptions{}}))
			return err
		}, "keep_last"},
		{"wait too long", func() error {
			_, err := c.client.WaitForCompletion(ctx, req(&orchardv1.WaitForCompletionRequest{InstanceId: "i", Timeout: durationpb.New(time.Hour)}))
			return err
		}, "timeout"},
		{"lease too short", func() error {
			_, err := c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", LeaseDuration: durationpb.New(time.Millisecond)}))
			return err
		}, "lease_duration"},
		{"poll for zero tasks", func() error {
			_, err := c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", MaxTasks: new(int32(0))}))
			return err
		}, "max_tasks"},
		{"poll for too many tasks", func() error {
			_, err := c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", MaxTasks: new(int32(65))}))
			return err
		}, "max_tasks"},
		{"forged task token", func() error {
			_, err := c.worker.HeartbeatActivityTask(ctx, req(&orchardv1.HeartbeatActivityTaskRequest{TaskToken: "abc.def"}))
			return err
		}, "task_token"},
		{"fail without failure", func() error {
			_, err := c.worker.FailActivityTask(ctx, req(&orchardv1.FailActivityTaskRequest{TaskToken: "t"}))
			return err
		}, "failure"},
		{"empty definition", func() error {
			_, err := c.defs.RegisterDefinition(ctx, req(&orchardv1.RegisterDefinitionRequest{}))
			return err
		}, "document"},
		{"retention too long", func() error {
			_, err := c.tenant.SetRetentionPolicy(ctx, req(&orchardv1.SetRetentionPolicyRequest{Policy: &orchardv1.RetentionPolicy{
				DefaultRule: &orchardv1.RetentionRule{Completed: durationpb.New(4000 * 24 * time.Hour)}}}))
			return err
		}, "completed"},
		{"auto prune without keep_last", func() error {
			yes := true
			_, err := c.tenant.SetRetentionPolicy(ctx, req(&orchardv1.SetRetentionPolicyRequest{Policy: &orchardv1.RetentionPolicy{
				DefaultRule: &orchardv1.RetentionRule{ContinueAsNew: &orchardv1.ContinueAsNewRetention{AutoPrune: &yes}}}}))
			return err
		}, "auto_prune"},
		{"limits out of range", func() error {
			_, err := platform.admin.UpdateTenant(ctx, req(&orchardv1.UpdateTenantRequest{TenantId: acme, Limits: &orchardv1.Limits{RequestsPerSecond: -1}}))
			return err
		}, "requests_per_second"},
		{"mint platform role", func() error {
			_, err := platform.admin.MintToken(ctx, req(&orchardv1.MintTokenRequest{TenantId: acme, Roles: []orchardv1.Role{orchardv1.Role_ROLE_PLATFORM_ADMIN}, Ttl: durationpb.New(time.Hour)}))
			return err
		}, "roles"},
		{"mint without ttl", func() error {
			_, err := platform.admin.MintToken(ctx, req(&orchardv1.MintTokenRequest{TenantId: acme, Roles: []orchardv1.Role{orchardv1.Role_ROLE_CLIENT}}))
			return err
		}, "ttl"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireCode(t, tc.call(), connect.CodeInvalidArgument, tc.field)
		})
	}

	// An invalid definition: every problem as a field violation.
	_, err := c.defs.RegisterDefinition(ctx, req(&orchardv1.RegisterDefinitionRequest{Document: []byte("name: x\nversion: \"1\"\nsteps:\n  - activity: { task_queue: q }\n  - bogus: 1\n")}))
	requireCode(t, err, connect.CodeInvalidArgument, "document")
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	var fields []string
	for _, d := range ce.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		if br, ok := v.(*errdetails.BadRequest); ok {
			for _, fv := range br.FieldViolations {
				fields = append(fields, fv.Field)
			}
		}
	}
	require.GreaterOrEqual(t, len(fields), 2, "field violations: %v", fields)
	for _, f := range fields {
		require.True(t, strings.HasPrefix(f, "document.steps[") || f == "document", f)
	}
}
