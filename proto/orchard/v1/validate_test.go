package orchardv1_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"buf.build/go/protovalidate"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
)

// newValidator builds a validator that compiles the rules of every message
// of package orchard.v1 up front, so a rule that does not compile (a bad
// CEL expression, a contradictory bound) fails here rather than on the
// first request that uses it.
func newValidator(t *testing.T) protovalidate.Validator {
	t.Helper()
	var descs []protoreflect.MessageDescriptor
	protoregistry.GlobalTypes.RangeMessages(func(mt protoreflect.MessageType) bool {
		if d := mt.Descriptor(); d.ParentFile().Package() == "orchard.v1" {
			descs = append(descs, d)
		}
		return true
	})
	require.GreaterOrEqual(t, len(descs), 50, "the orchard.v1 messages are registered")
	v, err := protovalidate.New(
		protovalidate.WithMessageDescriptors(descs...),
		protovalidate.WithDisableLazy(),
	)
	require.NoError(t, err)
	return v
}

func TestValidationRules(t *testing.T) {
	t.Parallel()
	v := newValidator(t)

	bigPayload := make([]byte, 256*1024+1)
	tests := []struct {
		name string
		msg  proto.Message
		// violations are "field path: rule id" of every expected
		// violation; none for a valid message.
		violations []string
	}{
		{
			name: "start: minimal",
			msg:  &orchardv1.StartOrchestrationRequest{Name: "order"},
		},
		{
			name: "start: everything set",
			msg: &orchardv1.StartOrchestrationRequest{
				Name:       "billing/invoice.v2",
				Version:    "1.4.0+build.7",
				Input:      []byte(`{"amount": 12}`),
				Tags:       map[string]string{"customer": "acme", "region": "eu-west-1"},
				InstanceId: "invoice:2024-07@acme",
				Retention:  durationpb.New(30 * 24 * time.Hour),
			},
		},
		{
			name: "start: payload of exactly 256 KiB",
			msg:  &orchardv1.StartOrchestrationRequest{Name: "order", Input: bigPayload[:256*1024]},
		},
		{
			name:       "start: payload over 256 KiB",
			msg:        &orchardv1.StartOrchestrationRequest{Name: "order", Input: bigPayload},
			violations: []string{"input: bytes.max_len"},
		},
		{
			name:       "start: name missing",
			msg:        &orchardv1.StartOrchestrationRequest{},
			violations: []string{"name: string.min_len", "name: string.pattern"},
		},
		{
			name:       "start: instance id with a space",
			msg:        &orchardv1.StartOrchestrationRequest{Name: "order", InstanceId: "order 1"},
			violations: []string{"instance_id: string.pattern"},
		},
		{
			name:       "start: instance id too long",
			msg:        &orchardv1.StartOrchestrationRequest{Name: "order", InstanceId: strings.Repeat("a", 201)},
			violations: []string{"instance_id: string.max_len"},
		},
		{
			name:       "start: negative retention",
			msg:        &orchardv1.StartOrchestrationRequest{Name: "order", Retention: durationpb.New(-time.Second)},
			violations: []string{"retention: duration.gte_lte"},
		},
		{
			name: "start: too many tags, bad key",
			msg: &orchardv1.StartOrchestrationRequest{
				Name: "order",
				Tags: func() map[string]string {
					m := map[string]string{"bad key": "v"}
					for i := range 32 {
						m[strings.Repeat("k", i+1)] = "v"
					}
					return m
				}(),
			},
			violations: []string{"tags: map.max_pairs", `tags["bad key"]: string.pattern`},
		},
		{
			name:       "raise event: bad instance id charset",
			msg:        &orchardv1.RaiseEventRequest{InstanceId: "order#1", Name: "approved"},
			violations: []string{"instance_id: string.pattern"},
		},
		{
			name:       "get instance: empty id",
			msg:        &orchardv1.GetInstanceRequest{},
			violations: []string{"instance_id: string.min_len", "instance_id: string.pattern"},
		},
		{
			name: "wait: 60 seconds",
			msg:  &orchardv1.WaitForCompletionRequest{InstanceId: "a", Timeout: durationpb.New(time.Minute)},
		},
		{
			name:       "wait: over 60 seconds",
			msg:        &orchardv1.WaitForCompletionRequest{InstanceId: "a", Timeout: durationpb.New(61 * time.Second)},
			violations: []string{"timeout: duration.gte_lte"},
		},
		{
			name: "list: page of 1000 with a filter",
			msg: &orchardv1.ListInstancesRequest{
				PageSize: 1000,
				Order:    orchardv1.InstanceOrder_INSTANCE_ORDER_UPDATED_ASC,
				Filter: &orchardv1.InstanceFilter{
					Statuses:     []orchardv1.InstanceStatus{orchardv1.InstanceStatus_INSTANCE_STATUS_FAILED},
					NamePrefix:   "billing/",
					CreatedAfter: timestamppb.New(time.Unix(1000, 0)),
					RootsOnly:    true,
				},
			},
		},
		{
			name:       "list: page of 5000",
			msg:        &orchardv1.ListInstancesRequest{PageSize: 5000},
			violations: []string{"page_size: int32.gte_lte"},
		},
		{
			name:       "list: undefined order",
			msg:        &orchardv1.ListInstancesRequest{Order: 42},
			violations: []string{"order: enum.defined_only"},
		},
		{
			name: "list: unspecified and undefined statuses",
			msg: &orchardv1.ListInstancesRequest{Filter: &orchardv1.InstanceFilter{
				Statuses: []orchardv1.InstanceStatus{orchardv1.InstanceStatus_INSTANCE_STATUS_UNSPECIFIED, 9},
			}},
			violations: []string{"filter.statuses[0]: enum.not_in", "filter.statuses[1]: enum.defined_only"},
		},
		{
			name: "list: inverted created range",
			msg: &orchardv1.ListInstancesRequest{Filter: &orchardv1.InstanceFilter{
				CreatedAfter:  timestamppb.New(time.Unix(2000, 0)),
				CreatedBefore: timestamppb.New(time.Unix(1000, 0)),
			}},
			violations: []string{"filter: instance_filter.created_range"},
		},
		{
			name: "bulk delete: an empty filter selects everything",
			msg:  &orchardv1.DeleteInstancesRequest{Filter: &orchardv1.InstanceFilter{}},
		},
		{
			name:       "bulk delete: no criterion",
			msg:        &orchardv1.DeleteInstancesRequest{Limit: 10},
			violations: []string{": delete_instances.criterion"},
		},
		{
			name:       "prune: options missing",
			msg:        &orchardv1.PruneExecutionsRequest{InstanceId: "a"},
			violations: []string{"options: required"},
		},
		{
			name:       "prune: no criterion",
			msg:        &orchardv1.PruneExecutionsRequest{InstanceId: "a", Options: &orchardv1.PruneOptions{}},
			violations: []string{"options: prune_options.criterion"},
		},
		{
			name: "poll: default wait",
			msg:  &orchardv1.PollActivityTaskRequest{TaskQueue: "payments"},
		},
		{
			name: "poll: 64 tasks",
			msg:  &orchardv1.PollActivityTaskRequest{TaskQueue: "payments", MaxTasks: new(int32(64))},
		},
		{
			name:       "poll: zero tasks",
			msg:        &orchardv1.PollActivityTaskRequest{TaskQueue: "payments", MaxTasks: new(int32(0))},
			violations: []string{"max_tasks: int32.gte_lte"},
		},
		{
			name:       "poll: too many tasks",
			msg:        &orchardv1.PollActivityTaskRequest{TaskQueue: "payments", MaxTasks: new(int32(65))},
			violations: []string{"max_tasks: int32.gte_lte"},
		},
		{
			name:       "poll: wait too long",
			msg:        &orchardv1.PollActivityTaskRequest{TaskQueue: "payments", Wait: durationpb.New(2 * time.Minute)},
			violations: []string{"wait: duration.gte_lte"},
		},
		{
			name:       "fail task: failure missing",
			msg:        &orchardv1.FailActivityTaskRequest{TaskToken: "t"},
			violations: []string{"failure: required"},
		},
		{
			name:       "register definition: too big",
			msg:        &orchardv1.RegisterDefinitionRequest{Document: bigPayload},
			violations: []string{"document: bytes.max_len"},
		},
		{
			name: "mint token: valid",
			msg: &orchardv1.MintTokenRequest{
				TenantId: "acme",
				Roles:    []orchardv1.Role{orchardv1.Role_ROLE_CLIENT, orchardv1.Role_ROLE_WORKER},
				Ttl:      durationpb.New(24 * time.Hour),
			},
		},
		{
			name: "mint token: unspecified and platform roles",
			msg: &orchardv1.MintTokenRequest{
				TenantId: "acme",
				Roles:    []orchardv1.Role{orchardv1.Role_ROLE_UNSPECIFIED, orchardv1.Role_ROLE_PLATFORM_ADMIN},
				Ttl:      durationpb.New(24 * time.Hour),
			},
			violations: []string{"roles[0]: enum.in", "roles[1]: enum.in"},
		},
		{
			name: "update tenant: cannot set deleting",
			msg: &orchardv1.UpdateTenantRequest{
				TenantId: "acme",
				State:    orchardv1.TenantState_TENANT_STATE_DELETING,
			},
			violations: []string{"state: enum.in"},
		},
		{
			name: "create tenant: limits out of range",
			msg: &orchardv1.CreateTenantRequest{
				TenantId: "acme",
				Limits:   &orchardv1.Limits{RequestsPerSecond: -1, MaxPayloadBytes: 32 << 20},
			},
			violations: []string{"limits.requests_per_second: double.gte_lte", "limits.max_payload_bytes: int64.gte_lte"},
		},
		{
			name: "retention policy: bad name key and negative keep_last",
			msg: &orchardv1.SetRetentionPolicyRequest{Policy: &orchardv1.RetentionPolicy{
				RulesByName: map[string]*orchardv1.RetentionRule{
					"bad name": {Completed: durationpb.New(time.Hour)},
					"order": {ContinueAsNew: &orchardv1.ContinueAsNewRetention{
						KeepLast: proto.Int32(0),
					}},
				},
			}},
			violations: []string{
				`policy.rules_by_name["bad name"]: string.pattern`,
				`policy.rules_by_name["order"].continue_as_new.keep_last: int32.gte_lte`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := v.Validate(tt.msg)
			if len(tt.violations) == 0 {
				require.NoError(t, err)
				return
			}
			var verr *protovalidate.ValidationError
			require.True(t, errors.As(err, &verr), "want a validation error, got %v", err)
			var got []string
			for _, viol := range verr.Violations {
				got = append(got, protovalidate.FieldPathString(viol.Proto.GetField())+": "+viol.Proto.GetRuleId())
			}
			require.ElementsMatch(t, tt.violations, got)
		})
	}
}
