package sdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	validatepb "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/orchardhq/orchard/pkg/sdk"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
)

// failingGet answers GetInstance with the error it holds.
type failingGet struct {
	orchardv1connect.UnimplementedClientServiceHandler
	err error
}

func (f *failingGet) GetInstance(context.Context, *connect.Request[orchardv1.GetInstanceRequest]) (*connect.Response[orchardv1.GetInstanceResponse], error) {
	return nil, f.err
}

func withDetails(code connect.Code, msg string, details ...proto.Message) error {
	ce := connect.NewError(code, errors.New(msg))
	for _, d := range details {
		detail, err := connect.NewErrorDetail(d)
		if err != nil {
			panic(err)
		}
		ce.AddDetail(detail)
	}
	return ce
}

// getError makes a GetInstance call that fails with err on the server.
func getError(t *testing.T, err error) error {
	t.Helper()
	ts := serve(t, services{client: &failingGet{err: err}})
	_, got := newClient(t, ts, sdk.WithRetryPolicy(sdk.RetryPolicy{MaxAttempts: 1})).Get(t.Context(), "x")
	require.Error(t, got)
	return got
}

func TestErrorsMatchTheirSentinels(t *testing.T) {
	t.Parallel()
	all := []error{
		sdk.ErrNotFound, sdk.ErrAlreadyExists, sdk.ErrInvalidArgument, sdk.ErrFailedPrecondition, sdk.ErrRunning,
		sdk.ErrSubOrchestration, sdk.ErrLeaseLost, sdk.ErrInstanceTerminal, sdk.ErrUnauthenticated, sdk.ErrPermissionDenied,
		sdk.ErrResourceExhausted, sdk.ErrUnavailable,
	}
	for _, tc := range []struct {
		name string
		err  error
		want []error
	}{
		{"not found", connect.NewError(connect.CodeNotFound, errors.New(`instance "x": not found`)), []error{sdk.ErrNotFound}},
		{"already exists", connect.NewError(connect.CodeAlreadyExists, errors.New("already exists")), []error{sdk.ErrAlreadyExists}},
		{"invalid argument", connect.NewError(connect.CodeInvalidArgument, errors.New("bad")), []error{sdk.ErrInvalidArgument}},
		{"running", withDetails(connect.CodeFailedPrecondition, `instances "a", "b": instance is running`,
			&errdetails.ErrorInfo{Reason: "INSTANCE_RUNNING", Domain: "orchard.dev"}),
			[]error{sdk.ErrFailedPrecondition, sdk.ErrRunning}},
		{"sub-orchestration", withDetails(connect.CodeFailedPrecondition,
			`instance "c" is a child of "p": cannot delete a sub-orchestration: delete its root instance`,
			&errdetails.ErrorInfo{Reason: "SUB_ORCHESTRATION", Domain: "orchard.dev"}),
			[]error{sdk.ErrFailedPrecondition, sdk.ErrSubOrchestration}},
		{"lease lost", withDetails(connect.CodeFailedPrecondition,
			"the task's lease is lost: it was cancelled, its instance deleted, or the lease lapsed",
			&errdetails.ErrorInfo{Reason: "LEASE_LOST", Domain: "orchard.dev"}),
			[]error{sdk.ErrFailedPrecondition, sdk.ErrLeaseLost}},
		{"instance terminal", withDetails(connect.CodeFailedPrecondition, `instance "x" is Completed: instance has ended`,
			&errdetails.ErrorInfo{Reason: "INSTANCE_TERMINAL", Domain: "orchard.dev"}),
			[]error{sdk.ErrFailedPrecondition, sdk.ErrInstanceTerminal}},
		{"the reason decides, not the text", withDetails(connect.CodeFailedPrecondition, "instance is running",
			&errdetails.ErrorInfo{Reason: "SUB_ORCHESTRATION", Domain: "orchard"}),
			[]error{sdk.ErrFailedPrecondition, sdk.ErrSubOrchestration}},
		{"no reason", connect.NewError(connect.CodeFailedPrecondition, errors.New("instance is running")),
			[]error{sdk.ErrFailedPrecondition}},
		{"unauthenticated", connect.NewError(connect.CodeUnauthenticated, errors.New("token expired")), []error{sdk.ErrUnauthenticated}},
		{"permission denied", connect.NewError(connect.CodePermissionDenied, errors.New("role")), []error{sdk.ErrPermissionDenied}},
		{"resource exhausted", connect.NewError(connect.CodeResourceExhausted, errors.New("quota")), []error{sdk.ErrResourceExhausted}},
		{"unavailable", unavailable(), []error{sdk.ErrUnavailable}},
		{"internal", connect.NewError(connect.CodeInternal, errors.New("internal error")), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := getError(t, tc.err)
			for _, s := range all {
				require.Equal(t, contains(tc.want, s), errors.Is(got, s), "errors.Is(%v, %v)", got, s)
			}
			var e *sdk.Error
			require.ErrorAs(t, got, &e)
			require.Equal(t, connect.CodeOf(tc.err), e.Code)
			var ce *connect.Error
			require.ErrorAs(t, got, &ce, "the Connect error stays reachable")
			var info *errdetails.ErrorInfo
			for _, d := range ce.Details() {
				if m, derr := d.Value(); derr == nil {
					if i, ok := m.(*errdetails.ErrorInfo); ok {
						info = i
					}
				}
			}
			require.Equal(t, info.GetReason(), e.Reason, "the ErrorInfo's reason")
		})
	}
}

func contains(errs []error, target error) bool {
	for _, e := range errs {
		if e == target {
			return true
		}
	}
	return false
}

func TestErrorDetails(t *testing.T) {
	t.Parallel()
	t.Run("bad request field violations", func(t *testing.T) {
		t.Parallel()
		got := getError(t, withDetails(connect.CodeInvalidArgument, "document: 2 problems", &errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{
				{Field: "document.steps[0].activity", Description: "unknown field"},
				{Field: "document.name", Description: "required"},
			},
		}))
		var e *sdk.Error
		require.ErrorAs(t, got, &e)
		require.Equal(t, []sdk.FieldViolation{
			{Field: "document.steps[0].activity", Description: "unknown field"},
			{Field: "document.name", Description: "required"},
		}, e.FieldViolations)
		require.Contains(t, e.Error(), "document.name: required")
	})
	t.Run("protovalidate violations", func(t *testing.T) {
		t.Parallel()
		got := getError(t, withDetails(connect.CodeInvalidArgument, "validation error", &validatepb.Violations{
			Violations: []*validatepb.Violation{
				{
					Field: &validatepb.FieldPath{Elements: []*validatepb.FieldPathElement{
						{FieldName: proto.String("filter")},
						{FieldName: proto.String("statuses"), Subscript: &validatepb.FieldPathElement_Index{Index: 2}},
					}},
					RuleId:  proto.String("repeated.items.enum.not_in"),
					Message: proto.String("value must not be in list [0]"),
				},
				{
					Field: &validatepb.FieldPath{Elements: []*validatepb.FieldPathElement{
						{FieldName: proto.String("tags"), Subscript: &validatepb.FieldPathElement_StringKey{StringKey: "k y"}},
					}},
					Message: proto.String("bad key"),
				},
				{RuleId: proto.String("delete_instances.criterion"), Message: proto.String("set instance_ids, completed_before or filter")},
			},
		}))
		var e *sdk.Error
		require.ErrorAs(t, got, &e)
		require.True(t, errors.Is(got, sdk.ErrInvalidArgument))
		require.Equal(t, []sdk.FieldViolation{
			{Field: "filter.statuses[2]", Description: "value must not be in list [0]"},
			{Field: `tags["k y"]`, Description: "bad key"},
			{Field: "delete_instances.criterion", Description: "set instance_ids, completed_before or filter"},
		}, e.FieldViolations)
	})
	t.Run("retry after", func(t *testing.T) {
		t.Parallel()
		got := getError(t, withDetails(connect.CodeResourceExhausted, "rate limit 10 reached",
			&errdetails.QuotaFailure{}, &errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)}))
		var e *sdk.Error
		require.ErrorAs(t, got, &e)
		require.Equal(t, 1500*time.Millisecond, e.RetryAfter)
		require.True(t, errors.Is(got, sdk.ErrResourceExhausted))
		require.Contains(t, e.Error(), "retry after 1.5s")
	})
}

// slowGet answers GetInstance only when the call's context ends.
type slowGet struct {
	orchardv1connect.UnimplementedClientServiceHandler
}

func (slowGet) GetInstance(ctx context.Context, _ *connect.Request[orchardv1.GetInstanceRequest]) (*connect.Response[orchardv1.GetInstanceResponse], error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestContextErrorsStayContextErrors(t *testing.T) {
	t.Parallel()
	ts := serve(t, services{client: slowGet{}})
	c := newClient(t, ts)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err := c.Get(ctx, "x")
	require.ErrorIs(t, err, context.DeadlineExceeded)

	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	_, err = c.Get(ctx, "x")
	require.ErrorIs(t, err, context.Canceled)
}
