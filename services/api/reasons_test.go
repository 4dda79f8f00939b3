package api_test

import (
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
)

// Every error carries a google.rpc.ErrorInfo: the particular reason where
// a code has several causes, the code's name otherwise. Errors from request
// validation, from handlers, from the store and from tenancy alike.
func TestEveryErrorHasAReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme", nil, testsystem.WaiterDef)
	c := e.clients(e.token(acme, tenancy.RoleClient))
	ctx := t.Context()
	_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "waiter", InstanceId: "w"}))
	require.NoError(t, err)

	for name, tc := range map[string]struct {
		call   func() error
		code   connect.Code
		reason string
	}{
		"store: not found": {func() error {
			_, err := c.client.GetInstance(ctx, req(&orchardv1.GetInstanceRequest{InstanceId: "missing"}))
			return err
		}, connect.CodeNotFound, "NOT_FOUND"},
		"store: running without force": {func() error {
			_, err := c.client.DeleteInstance(ctx, req(&orchardv1.DeleteInstanceRequest{InstanceId: "w"}))
			return err
		}, connect.CodeFailedPrecondition, "INSTANCE_RUNNING"},
		"handler: taken id": {func() error {
			_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "waiter", InstanceId: "w", Input: []byte(`1`)}))
			return err
		}, connect.CodeAlreadyExists, "ALREADY_EXISTS"},
		"validation": {func() error {
			_, err := c.client.GetInstance(ctx, req(&orchardv1.GetInstanceRequest{}))
			return err
		}, connect.CodeInvalidArgument, "INVALID_ARGUMENT"},
		"handler: field error": {func() error {
			_, err := c.client.RaiseEvent(ctx, req(&orchardv1.RaiseEventRequest{InstanceId: "w", Name: "go", Payload: []byte(`{`)}))
			return err
		}, connect.CodeInvalidArgument, "INVALID_ARGUMENT"},
		"tenancy: no token": {func() error {
			_, err := e.clients("").client.GetInstance(ctx, req(&orchardv1.GetInstanceRequest{InstanceId: "w"}))
			return err
		}, connect.CodeUnauthenticated, "UNAUTHENTICATED"},
		"tenancy: role": {func() error {
			_, err := e.clients(e.token(acme, tenancy.RoleWorker)).client.GetInstance(ctx, req(&orchardv1.GetInstanceRequest{InstanceId: "w"}))
			return err
		}, connect.CodePermissionDenied, "PERMISSION_DENIED"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.call()
			requireCode(t, err, tc.code)
			requireReason(t, err, tc.reason)
		})
	}
}
