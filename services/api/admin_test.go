package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/services/api"
)

// TestAdminService: tenants, tokens, usage across tenants, janitor runs, and
// the janitor's calls on a server without its queue (Unavailable).
func TestAdminService(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.grpcClients(e.token("", tenancy.RolePlatformAdmin))
	ctx := t.Context()
	created, err := p.admin.CreateTenant(ctx, req(&orchardv1.CreateTenantRequest{
		TenantId: "t1", Limits: &orchardv1.Limits{MaxRunningInstances: 5},
		RetentionPolicy: &orchardv1.RetentionPolicy{DefaultRule: &orchardv1.RetentionRule{Completed: durationpb.New(time.Hour)}},
	}))
	require.NoError(t, err)
	require.Equal(t, orchardv1.TenantState_TENANT_STATE_ACTIVE, created.Msg.Tenant.State)
	require.Equal(t, int64(5), created.Msg.Tenant.Limits.MaxRunningInstances)
	require.Equal(t, time.Hour, created.Msg.Tenant.RetentionPolicy.DefaultRule.Completed.AsDuration())
	_, err = p.admin.CreateTenant(ctx, req(&orchardv1.CreateTenantRequest{TenantId: "t1"}))
	requireCode(t, err, connect.CodeAlreadyExists)
	for _, id := range []string{"t2", "t3"} {
		_, err = p.admin.CreateTenant(ctx, req(&orchardv1.CreateTenantRequest{TenantId: id}))
		require.NoError(t, err)
	}
	got, err := p.admin.GetTenant(ctx, req(&orchardv1.GetTenantRequest{TenantId: "t1"}))
	require.NoError(t, err)
	require.Equal(t, "t1", got.Msg.Tenant.TenantId)
	_, err = p.admin.GetTenant(ctx, req(&orchardv1.GetTenantRequest{TenantId: "nope"}))
	requireCode(t, err, connect.CodeNotFound)

	var ids []string
	token := ""
	for {
		page, err := p.admin.ListTenants(ctx, req(&orchardv1.ListTenantsRequest{PageSize: 2, PageToken: token}))
		require.NoError(t, err)
		for _, ten := range page.Msg.Tenants {
			ids = append(ids, ten.TenantId)
		}
		if token = page.Msg.NextPageToken; token == "" {
			break
		}
	}
	require.Equal(t, []string{"t1", "t2", "t3"}, ids)

	updated, err := p.admin.UpdateTenant(ctx, req(&orchardv1.UpdateTenantRequest{TenantId: "t2", Limits: &orchardv1.Limits{Burst: 7}}))
	require.NoError(t, err)
	require.Equal(t, int32(7), updated.Msg.Tenant.Limits.Burst)
	// The engine's limits go through the API too, not only the store.
	engineLimits, err := p.admin.UpdateTenant(ctx, req(&orchardv1.UpdateTenantRequest{TenantId: "t2", Limits: &orchardv1.Limits{
		Burst: 7, MaxValueBytes: 2 << 20, MaxTurnStateBytes: 16 << 20, TurnBudgetMillis: 5000}}))
	require.NoError(t, err)
	require.Equal(t, int64(2<<20), engineLimits.Msg.Tenant.Limits.MaxValueBytes)
	require.Equal(t, int64(16<<20), engineLimits.Msg.Tenant.Limits.MaxTurnStateBytes)
	require.Equal(t, int64(5000), engineLimits.Msg.Tenant.Limits.TurnBudgetMillis)
	_, err = p.admin.UpdateTenant(ctx, req(&orchardv1.UpdateTenantRequest{TenantId: "t2", Limits: &orchardv1.Limits{TurnBudgetMillis: 600_001}}))
	requireCode(t, err, connect.CodeInvalidArgument, "turn_budget_millis")
	require.Equal(t, orchardv1.TenantState_TENANT_STATE_ACTIVE, updated.Msg.Tenant.State)
	_, err = p.admin.UpdateTenant(ctx, req(&orchardv1.UpdateTenantRequest{TenantId: "nope", State: orchardv1.TenantState_TENANT_STATE_SUSPENDED}))
	requireCode(t, err, connect.CodeNotFound)

	// A minted token works against the API.
	minted, err := p.admin.MintToken(ctx, req(&orchardv1.MintTokenRequest{TenantId: "t1",
		Roles: []orchardv1.Role{orchardv1.Role_ROLE_CLIENT, orchardv1.Role_ROLE_TENANT_ADMIN}, Ttl: durationpb.New(time.Hour)}))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Hour), minted.Msg.ExpiresAt.AsTime(), 2*time.Second)
	c := e.clients(minted.Msg.Token)
	_, err = c.defs.RegisterDefinition(ctx, req(&orchardv1.RegisterDefinitionRequest{Document: []byte(testsystem.QuickDef)}))
	require.NoError(t, err)
	_, err = c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "quick"}))
	require.NoError(t, err)
	_, err = p.admin.MintToken(ctx, req(&orchardv1.MintTokenRequest{TenantId: "nope", Roles: []orchardv1.Role{orchardv1.Role_ROLE_CLIENT}, Ttl: durationpb.New(time.Hour)}))
	requireCode(t, err, connect.CodeNotFound)

	usage, err := p.admin.GetUsage(ctx, req(&orchardv1.AdminServiceGetUsageRequest{PageSize: 1}))
	require.NoError(t, err)
	require.Len(t, usage.Msg.Tenants, 1)
	require.Equal(t, "t1", usage.Msg.Tenants[0].TenantId)
	require.Equal(t, int64(1), usage.Msg.Tenants[0].Usage.Instances.Running)
	require.Equal(t, int64(1), usage.Msg.Tenants[0].Usage.QueuedMessages)
	next, err := p.admin.GetUsage(ctx, req(&orchardv1.AdminServiceGetUsageRequest{PageSize: 1, PageToken: usage.Msg.NextPageToken}))
	require.NoError(t, err)
	require.Equal(t, "t2", next.Msg.Tenants[0].TenantId)
	_, err = p.admin.GetUsage(ctx, req(&orchardv1.AdminServiceGetUsageRequest{PageSize: 1, PageToken: usage.Msg.NextPageToken, TenantIds: []string{"t3"}}))
	requireCode(t, err, connect.CodeInvalidArgument, "page_token")

	runs, err := p.admin.ListJanitorRuns(ctx, req(&orchardv1.ListJanitorRunsRequest{}))
	require.NoError(t, err)
	require.Empty(t, runs.Msg.Runs)
	_, err = p.admin.TriggerRetention(ctx, req(&orchardv1.TriggerRetentionRequest{}))
	requireCode(t, err, connect.CodeUnavailable, "janitor")
	_, err = p.admin.EraseTenant(ctx, req(&orchardv1.EraseTenantRequest{TenantId: "t3", ConfirmTenantId: "t2"}))
	requireCode(t, err, connect.CodeInvalidArgument, "confirm")

	// Without a signing key, MintToken is Unimplemented.
	e2 := newEnv(t, func(c *api.Config) { c.Minter = nil })
	_, err = e2.clients(e2.token("", tenancy.RolePlatformAdmin)).admin.MintToken(ctx, req(&orchardv1.MintTokenRequest{
		TenantId: "t1", Roles: []orchardv1.Role{orchardv1.Role_ROLE_CLIENT}, Ttl: durationpb.New(time.Hour)}))
	requireCode(t, err, connect.CodeUnimplemented)
}

// TestTenantAndDefinitionServices: a tenant's retention policy, limits and
// usage; definitions registered, read and listed.
func TestTenantAndDefinitionServices(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme", &store.Limits{Burst: 50})
	c := e.all(acme)
	ctx := t.Context()

	pol, err := c.tenant.GetRetentionPolicy(ctx, req(&orchardv1.GetRetentionPolicyRequest{}))
	require.NoError(t, err)
	require.Nil(t, pol.Msg.Policy.DefaultRule)
	keep := int32(3)
	set, err := c.tenant.SetRetentionPolicy(ctx, req(&orchardv1.SetRetentionPolicyRequest{Policy: &orchardv1.RetentionPolicy{
		DefaultRule: &orchardv1.RetentionRule{Completed: durationpb.New(24 * time.Hour), Failed: durationpb.New(0)},
		RulesByName: map[string]*orchardv1.RetentionRule{"loop": {ContinueAsNew: &orchardv1.ContinueAsNewRetention{KeepLast: &keep}}},
	}}))
	require.NoError(t, err)
	require.Equal(t, 24*time.Hour, set.Msg.Policy.DefaultRule.Completed.AsDuration())
	require.Equal(t, time.Duration(0), set.Msg.Policy.DefaultRule.Failed.AsDuration())
	// A rule by name is kept as given: its unset fields take the default
	// rule's values when it applies, whatever the default says then.
	loop := set.Msg.Policy.RulesByName["loop"]
	require.Equal(t, int32(3), loop.ContinueAsNew.GetKeepLast())
	require.Nil(t, loop.Completed)
	pol, err = c.tenant.GetRetentionPolicy(ctx, req(&orchardv1.GetRetentionPolicyRequest{}))
	require.NoError(t, err)
	require.Equal(t, 24*time.Hour, pol.Msg.Policy.DefaultRule.Completed.AsDuration())

	limits, err := c.tenant.GetLimits(ctx, req(&orchardv1.GetLimitsRequest{}))
	require.NoError(t, err)
	require.Equal(t, int32(50), limits.Msg.Limits.Burst)
	require.Equal(t, store.DefaultLimits().MaxRunningInstances, limits.Msg.Limits.MaxRunningInstances)

	reg, err := c.defs.RegisterDefinition(ctx, req(&orchardv1.RegisterDefinitionRequest{Document: []byte(testsystem.QuickDef)}))
	require.NoError(t, err)
	require.True(t, reg.Msg.Created)
	require.Equal(t, "quick", reg.Msg.Name)
	reg, err = c.defs.RegisterDefinition(ctx, req(&orchardv1.RegisterDefinitionRequest{Document: []byte(testsystem.QuickDef)}))
	require.NoError(t, err)
	require.False(t, reg.Msg.Created)
	_, err = c.defs.RegisterDefinition(ctx, req(&orchardv1.RegisterDefinitionRequest{Document: []byte(`{"name":"quick","version":"1","steps":[{"return":2}]}`)}))
	requireCode(t, err, connect.CodeAlreadyExists)
	for _, v := range []string{"2", "3"} {
		_, err = c.defs.RegisterDefinition(ctx, req(&orchardv1.RegisterDefinitionRequest{Document: []byte(`{"name":"quick","version":"` + v + `","steps":[{"return":0}]}`)}))
		require.NoError(t, err)
	}
	def, err := c.defs.GetDefinition(ctx, req(&orchardv1.GetDefinitionRequest{Name: "quick"}))
	require.NoError(t, err)
	require.Equal(t, "3", def.Msg.Definition.Version)
	def, err = c.defs.GetDefinition(ctx, req(&orchardv1.GetDefinitionRequest{Name: "quick", Version: "1"}))
	require.NoError(t, err)
	require.Contains(t, string(def.Msg.Definition.Document), `"return"`)
	_, err = c.defs.GetDefinition(ctx, req(&orchardv1.GetDefinitionRequest{Name: "quick", Version: "9"}))
	requireCode(t, err, connect.CodeNotFound)
	var versions []string
	token := ""
	for {
		page, err := c.defs.ListDefinitions(ctx, req(&orchardv1.ListDefinitionsRequest{Name: "quick", PageSize: 2, PageToken: token}))
		require.NoError(t, err)
		for _, d := range page.Msg.Definitions {
			require.Empty(t, d.Document)
			versions = append(versions, d.Version)
		}
		if token = page.Msg.NextPageToken; token == "" {
			break
		}
	}
	require.ElementsMatch(t, []string{"1", "2", "3"}, versions)

	_, err = c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "quick", Version: "1"}))
	require.NoError(t, err)
	usage, err := c.tenant.GetUsage(ctx, req(&orchardv1.GetUsageRequest{}))
	require.NoError(t, err)
	require.Equal(t, int64(1), usage.Msg.Usage.Instances.Running)
	require.Equal(t, int64(1), usage.Msg.Usage.Executions)
	require.NotNil(t, usage.Msg.Usage.MeasuredAt)
}

// TestServerStartStop: Start serves Connect and gRPC health on one port,
// Stop ends a long poll early and drains.
func TestServerStartStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme", nil, testsystem.WaiterDef)
	srv, err := api.New(api.Config{Store: e.Store, Verifier: e.Verifier(t), Addr: "127.0.0.1:0", Logger: quiet()})
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	base := "http://" + srv.Addr()

	// The standard health service, over gRPC: SERVING for the server and
	// each service, NotFound for any other.
	health := grpchealth.NewClient(e.h2c, base, connect.WithGRPC())
	for _, service := range []string{"", "orchard.v1.ClientService", "orchard.v1.AdminService"} {
		res, err := health.Check(t.Context(), &grpchealth.CheckRequest{Service: service})
		require.NoError(t, err)
		require.Equal(t, grpchealth.StatusServing, res.Status, service)
	}
	_, err = health.Check(t.Context(), &grpchealth.CheckRequest{Service: "orchard.v1.NoSuchService"})
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
	watchCtx, cancelWatch := context.WithCancel(t.Context())
	defer cancelWatch()
	watch := health.Watch(watchCtx, &grpchealth.CheckRequest{})
	first := <-watch
	require.NoError(t, first.Err)
	require.Equal(t, grpchealth.StatusServing, first.Response.Status)

	c := e.clientsOn(http.DefaultClient, e.token(acme, tenancy.RoleClient))
	c.client = newClientAt(base, e.token(acme, tenancy.RoleClient))
	_, err = c.client.StartOrchestration(t.Context(), req(&orchardv1.StartOrchestrationRequest{Name: "waiter", InstanceId: "w"}))
	require.NoError(t, err)
	waited := make(chan *orchardv1.WaitForCompletionResponse, 1)
	go func() {
		res, err := c.client.WaitForCompletion(context.Background(), req(&orchardv1.WaitForCompletionRequest{InstanceId: "w", Timeout: durationpb.New(time.Minute)}))
		if err == nil {
			waited <- res.Msg
		}
		close(waited)
	}()
	// Stop once the wait is in flight: it answers at once, not done.
	require.Eventually(t, func() bool { return srv.ActiveLongPolls() == 1 }, 10*time.Second, time.Millisecond)
	// Drain reports NOT_SERVING (checks and watches) while calls still run.
	srv.Drain()
	res, err := health.Check(t.Context(), &grpchealth.CheckRequest{Service: "orchard.v1.WorkerService"})
	require.NoError(t, err)
	require.Equal(t, grpchealth.StatusNotServing, res.Status)
	changed := <-watch
	require.NoError(t, changed.Err)
	require.Equal(t, grpchealth.StatusNotServing, changed.Response.Status)
	_, err = c.client.GetInstance(t.Context(), req(&orchardv1.GetInstanceRequest{InstanceId: "w"}))
	require.NoError(t, err, "a draining server still answers until it stops")
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, srv.Stop(stopCtx))
	require.Less(t, time.Since(start), 5*time.Second)
	msg := <-waited
	require.NotNil(t, msg, "the long poll failed instead of answering")
	require.False(t, msg.Done)
	// The open watch ended with the server instead of holding it up.
	for ev := range watch {
		require.Error(t, ev.Err, "no status change after NOT_SERVING")
	}
}
