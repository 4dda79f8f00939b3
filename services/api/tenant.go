package api

import (
	"context"

	"connectrpc.com/connect"

	"github.com/orchardhq/orchard/pkg/store"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
)

type tenantService struct{ s *Server }

var _ orchardv1connect.TenantServiceHandler = (*tenantService)(nil)

// fresh reads the calling tenant's row from the store, not the cache: the
// tenant reads what it just changed.
func (t *tenantService) fresh(ctx context.Context) (*store.Tenant, error) {
	return t.s.store.GetTenant(ctx, &store.GetTenantParams{TenantID: tenantOf(ctx).TenantID})
}

func (t *tenantService) GetRetentionPolicy(ctx context.Context, _ *connect.Request[orchardv1.GetRetentionPolicyRequest]) (*connect.Response[orchardv1.GetRetentionPolicyResponse], error) {
	ten, err := t.fresh(ctx)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.GetRetentionPolicyResponse{Policy: policyToProto(ten.Retention)}), nil
}

func (t *tenantService) SetRetentionPolicy(ctx context.Context, req *connect.Request[orchardv1.SetRetentionPolicyRequest]) (*connect.Response[orchardv1.SetRetentionPolicyResponse], error) {
	policy, err := policyFromProto(req.Msg.Policy)
	if err != nil {
		return nil, err
	}
	ten, err := t.s.store.UpdateTenant(ctx, &store.UpdateTenantParams{TenantID: tenantOf(ctx).TenantID, Retention: &policy})
	if err != nil {
		return nil, err
	}
	t.s.tenants.put(ten)
	return connect.NewResponse(&orchardv1.SetRetentionPolicyResponse{Policy: policyToProto(ten.Retention)}), nil
}

func (t *tenantService) GetLimits(ctx context.Context, _ *connect.Request[orchardv1.GetLimitsRequest]) (*connect.Response[orchardv1.GetLimitsResponse], error) {
	return connect.NewResponse(&orchardv1.GetLimitsResponse{Limits: limitsToProto(tenantOf(ctx).Limits.Effective())}), nil
}

func (t *tenantService) GetUsage(ctx context.Context, _ *connect.Request[orchardv1.GetUsageRequest]) (*connect.Response[orchardv1.GetUsageResponse], error) {
	u, err := t.s.store.GetUsage(ctx, &store.GetUsageParams{TenantID: tenantOf(ctx).TenantID})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.GetUsageResponse{Usage: usageToProto(u)}), nil
}
