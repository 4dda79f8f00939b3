package api

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"

	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
)

// adminService runs the platform. Its calls name their tenants in their
// requests: the only service that does. Its page tokens are bound to the
// empty tenant (a platform admin's token may name none).
type adminService struct{ s *Server }

var _ orchardv1connect.AdminServiceHandler = (*adminService)(nil)

func (a *adminService) CreateTenant(ctx context.Context, req *connect.Request[orchardv1.CreateTenantRequest]) (*connect.Response[orchardv1.CreateTenantResponse], error) {
	m := req.Msg
	update := &store.UpdateTenantParams{TenantID: m.TenantId}
	if m.Limits != nil {
		limits, err := limitsFromProto("limits", m.Limits)
		if err != nil {
			return nil, err
		}
		update.Limits = limits
	}
	if m.RetentionPolicy != nil {
		policy, err := policyFromProto(m.RetentionPolicy)
		if err != nil {
			return nil, err
		}
		update.Retention = &policy
	}
	if err := a.s.store.CreateTenant(ctx, &store.CreateTenantParams{TenantID: m.TenantId}); err != nil {
		return nil, err
	}
	var t *store.Tenant
	var err error
	if update.Limits != nil || update.Retention != nil {
		t, err = a.s.store.UpdateTenant(ctx, update)
	} else {
		t, err = a.s.store.GetTenant(ctx, &store.GetTenantParams{TenantID: m.TenantId})
	}
	if err != nil {
		return nil, err
	}
	a.s.tenants.forget(m.TenantId)
	return connect.NewResponse(&orchardv1.CreateTenantResponse{Tenant: tenantToProto(t)}), nil
}

func (a *adminService) GetTenant(ctx context.Context, req *connect.Request[orchardv1.GetTenantRequest]) (*connect.Response[orchardv1.GetTenantResponse], error) {
	t, err := a.s.store.GetTenant(ctx, &store.GetTenantParams{TenantID: req.Msg.TenantId})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orchardv1.GetTenantResponse{Tenant: tenantToProto(t)}), nil
}

func (a *adminService) ListTenants(ctx context.Context, req *connect.Request[orchardv1.ListTenantsRequest]) (*connect.Response[orchardv1.ListTenantsResponse], error) {
	const procedure = orchardv1connect.AdminServiceListTenantsProcedure
	query := queryDigest()
	size := pageSize(req.Msg.PageSize)
	p := &store.ListTenantsParams{Limit: size}
	if req.Msg.PageToken != "" {
		tok, err := a.s.tokens.openPage(procedure, "", req.Msg.PageToken, query)
		if err != nil {
			return nil, err
		}
		p.AfterTenantID = tok.Key
	}
	tenants, err := a.s.store.ListTenants(ctx, p)
	if err != nil {
		return nil, err
	}
	resp := &orchardv1.ListTenantsResponse{}
	for i := range tenants {
		resp.Tenants = append(resp.Tenants, tenantToProto(&tenants[i]))
	}
	if len(tenants) == size {
		if resp.NextPageToken, err = a.s.tokens.sealPage(procedure, "", pageToken{Query: query, Key: tenants[size-1].TenantID}); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(resp), nil
}

var tenantStateFromProto = map[orchardv1.TenantState]string{
	orchardv1.TenantState_TENANT_STATE_ACTIVE:    store.TenantActive,
	orchardv1.TenantState_TENANT_STATE_SUSPENDED: store.TenantSuspended,
}

func (a *adminService) UpdateTenant(ctx context.Context, req *connect.Request[orchardv1.UpdateTenantRequest]) (*connect.Response[orchardv1.UpdateTenantResponse], error) {
	m := req.Msg
	p := &store.UpdateTenantParams{TenantID: m.TenantId}
	if state, ok := tenantStateFromProto[m.State]; ok {
		p.State = &state
	}
	if m.Limits != nil {
		limits, err := limitsFromProto("limits", m.Limits)
		if err != nil {
			return nil, err
		}
		p.Limits = limits
	}
	t, err := a.s.store.UpdateTenant(ctx, p)
	if err != nil {
		return nil, err
	}
	a.s.tenants.put(t)
	return connect.NewResponse(&orchardv1.UpdateTenantResponse{Tenant: tenantToProto(t)}), nil
}

var roleFromProto = map[orchardv1.Role]tenancy.Role{
	orchardv1.Role_ROLE_CLIENT:       tenancy.RoleClient,
	orchardv1.Role_ROLE_WORKER:       tenancy.RoleWorker,
	orchardv1.Role_ROLE_TENANT_ADMIN: tenancy.RoleTenantAdmin,
}

func (a *adminService) MintToken(ctx context.Context, req *connect.Request[orchardv1.MintTokenRequest]) (*connect.Response[orchardv1.MintTokenResponse], error) {
	if a.s.cfg.Minter == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this server has no signing key: mint tokens with `orchard token`"))
	}
	m := req.Msg
	if _, err := a.s.store.GetTenant(ctx, &store.GetTenantParams{TenantID: m.TenantId}); err != nil {
		return nil, err
	}
	claims := tenancy.Claims{Tenant: m.TenantId, Subject: m.Subject}
	if claims.Subject == "" {
		claims.Subject = m.TenantId
	}
	for _, r := range m.Roles {
		claims.Roles = append(claims.Roles, roleFromProto[r])
	}
	ttl := m.Ttl.AsDuration()
	token, err := a.s.cfg.Minter.Mint(claims, ttl)
	if err != nil {
		return nil, fieldError("ttl", "%v", err)
	}
	return connect.NewResponse(&orchardv1.MintTokenResponse{Token: token, ExpiresAt: timestamp(time.Now().Add(ttl).Truncate(time.Second))}), nil
}

func (a *adminService) GetUsage(ctx context.Context, req *connect.Request[orchardv1.AdminServiceGetUsageRequest]) (*connect.Response[orchardv1.AdminServiceGetUsageResponse], error) {
	const procedure = orchardv1connect.AdminServiceGetUsageProcedure
	m := req.Msg
	query := queryDigest(&orchardv1.AdminServiceGetUsageRequest{TenantIds: m.TenantIds})
	size := pageSize(m.PageSize)
	p := &store.ListUsageParams{TenantIDs: m.TenantIds, Limit: size}
	if m.PageToken != "" {
		tok, err := a.s.tokens.openPage(procedure, "", m.PageToken, query)
		if err != nil {
			return nil, err
		}
		p.AfterTenantID = tok.Key
	}
	usage, err := a.s.store.ListUsage(ctx, p)
	if err != nil {
		return nil, err
	}
	resp := &orchardv1.AdminServiceGetUsageResponse{}
	for i := range usage {
		resp.Tenants = append(resp.Tenants, &orchardv1.TenantUsage{TenantId: usage[i].TenantID, Usage: usageToProto(&usage[i])})
	}
	if len(usage) == size {
		if resp.NextPageToken, err = a.s.tokens.sealPage(procedure, "", pageToken{Query: query, Key: usage[size-1].TenantID}); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(resp), nil
}

func (a *adminService) ListJanitorRuns(ctx context.Context, req *connect.Request[orchardv1.ListJanitorRunsRequest]) (*connect.Response[orchardv1.ListJanitorRunsResponse], error) {
	const procedure = orchardv1connect.AdminServiceListJanitorRunsProcedure
	m := req.Msg
	query := queryDigest(&orchardv1.ListJanitorRunsRequest{TenantId: m.TenantId})
	size := pageSize(m.PageSize)
	p := &store.ListJanitorRunsParams{TenantID: m.TenantId, Limit: size}
	if m.PageToken != "" {
		tok, err := a.s.tokens.openPage(procedure, "", m.PageToken, query)
		if err != nil {
			return nil, err
		}
		p.After = &store.JanitorRunPosition{StartedAt: time.UnixMilli(tok.At), TenantID: tok.Key, RunID: tok.ID}
	}
	runs, err := a.s.store.ListJanitorRuns(ctx, p)
	if err != nil {
		return nil, err
	}
	resp := &orchardv1.ListJanitorRunsResponse{}
	for _, r := range runs {
		resp.Runs = append(resp.Runs, &orchardv1.JanitorRun{
			RunId: r.RunID, TenantId: r.TenantID, StartedAt: timestamp(r.StartedAt), FinishedAt: timestamp(r.FinishedAt),
			InstancesDeleted: r.InstancesDeleted, ExecutionsDeleted: r.ExecutionsDeleted, EventsDeleted: r.EventsDeleted,
			Complete: r.Complete, Error: r.Error, Triggered: r.Triggered,
		})
	}
	if len(runs) == size {
		last := runs[size-1]
		if resp.NextPageToken, err = a.s.tokens.sealPage(procedure, "", pageToken{
			Query: query, At: last.StartedAt.UnixMilli(), Key: last.TenantID, ID: last.RunID,
		}); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(resp), nil
}
