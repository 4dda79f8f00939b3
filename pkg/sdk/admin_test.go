package sdk_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/sdk"
	"github.com/orchardhq/orchard/pkg/tenancy"
)

func (s *system) adminClient() *sdk.AdminClient {
	s.t.Helper()
	return sdk.NewAdminClient(s.URL, sdk.WithToken(s.Token(s.t, "", tenancy.RolePlatformAdmin)), sdk.WithRetryPolicy(fastRetries))
}

func (s *system) tenantClient() *sdk.TenantClient {
	return sdk.NewTenantClient(s.URL, sdk.WithToken(s.token(tenancy.RoleTenantAdmin)), sdk.WithRetryPolicy(fastRetries))
}

func ptr[T any](v T) *T { return &v }

func TestSystemTenantClient(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	tc := s.tenantClient()
	ctx := t.Context()

	p, err := tc.RetentionPolicy(ctx)
	require.NoError(t, err)
	require.Equal(t, sdk.RetentionPolicy{}, *p, "a new tenant keeps everything")

	want := sdk.RetentionPolicy{
		Default: sdk.RetentionRule{Completed: ptr(720 * time.Hour), Failed: ptr(2160 * time.Hour), KeepLast: ptr(3), AutoPrune: ptr(true)},
		ByName:  map[string]sdk.RetentionRule{"loop": {Completed: ptr(time.Duration(0))}},
	}
	got, err := tc.SetRetentionPolicy(ctx, want)
	require.NoError(t, err)
	require.Equal(t, 720*time.Hour, *got.Default.Completed)
	require.Equal(t, 3, *got.Default.KeepLast)
	require.True(t, *got.Default.AutoPrune)
	require.Nil(t, got.Default.Cancelled)
	require.Equal(t, time.Duration(0), *got.ByName["loop"].Completed, "0: delete at the next janitor run")
	read, err := tc.RetentionPolicy(ctx)
	require.NoError(t, err)
	require.Equal(t, got, read)

	_, err = tc.SetRetentionPolicy(ctx, sdk.RetentionPolicy{Default: sdk.RetentionRule{AutoPrune: ptr(true)}})
	require.ErrorIs(t, err, sdk.ErrInvalidArgument, "auto-prune needs keep-last")

	limits, err := tc.Limits(ctx)
	require.NoError(t, err)
	require.Positive(t, limits.RequestsPerSecond, "defaults filled in")

	s.register(s.client(tenancy.RoleTenantAdmin), testsystem.WaiterDef)
	_, err = s.client(tenancy.RoleClient).Start(ctx, "waiter", nil, sdk.WithInstanceID("u"))
	require.NoError(t, err)
	u, err := tc.Usage(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), u.Instances.Total)
	require.Equal(t, int64(1), u.Instances.ByStatus[sdk.StatusRunning])
	require.Equal(t, int64(1), u.Executions)

	_, err = sdk.NewTenantClient(s.URL, sdk.WithToken(s.token(tenancy.RoleClient))).Limits(ctx)
	require.ErrorIs(t, err, sdk.ErrPermissionDenied, "the tenant-admin role is needed")
}

func TestSystemAdminClient(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	ac := s.adminClient()
	ctx := t.Context()

	created, err := ac.CreateTenant(ctx, "globex", sdk.WithLimits(sdk.Limits{MaxRunningInstances: 10}),
		sdk.WithRetentionPolicy(sdk.RetentionPolicy{Default: sdk.RetentionRule{Completed: ptr(time.Hour)}}))
	require.NoError(t, err)
	require.Equal(t, "globex", created.ID)
	require.Equal(t, sdk.TenantActive, created.State)
	require.Equal(t, int64(10), created.Limits.MaxRunningInstances)
	require.Equal(t, time.Hour, *created.RetentionPolicy.Default.Completed)
	_, err = ac.CreateTenant(ctx, "globex")
	require.ErrorIs(t, err, sdk.ErrAlreadyExists)
	for i := range 3 {
		_, err = ac.CreateTenant(ctx, fmt.Sprint("t-", i))
		require.NoError(t, err)
	}

	var ids []string
	for ten, err := range ac.ListTenants(ctx, sdk.WithPageSize(2)) {
		require.NoError(t, err)
		ids = append(ids, ten.ID)
	}
	require.Equal(t, []string{tenant, "globex", "t-0", "t-1", "t-2"}, ids)

	suspended, err := ac.SuspendTenant(ctx, "globex")
	require.NoError(t, err)
	require.Equal(t, sdk.TenantSuspended, suspended.State)
	got, err := ac.GetTenant(ctx, "globex")
	require.NoError(t, err)
	require.Equal(t, sdk.TenantSuspended, got.State)
	resumed, err := ac.ResumeTenant(ctx, "globex")
	require.NoError(t, err)
	require.Equal(t, sdk.TenantActive, resumed.State)
	limited, err := ac.SetLimits(ctx, "globex", sdk.Limits{Burst: 7})
	require.NoError(t, err)
	require.Equal(t, sdk.Limits{Burst: 7}, limited.Limits, "all limits replaced")
	_, err = ac.GetTenant(ctx, "nobody")
	require.ErrorIs(t, err, sdk.ErrNotFound)

	tok, err := ac.MintToken(ctx, tenant, []sdk.Role{sdk.RoleClient, sdk.RoleTenantAdmin}, time.Hour, sdk.WithSubject("ci"))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Hour), tok.ExpiresAt, time.Minute)
	c := sdk.NewClient(s.URL, sdk.WithToken(tok.Token))
	_, err = c.Get(ctx, "nothing")
	require.ErrorIs(t, err, sdk.ErrNotFound, "the minted token is accepted")
	_, err = ac.MintToken(ctx, tenant, []sdk.Role{"root"}, time.Hour)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	_, err = ac.MintToken(ctx, tenant, []sdk.Role{sdk.RoleClient}, time.Second)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument, "a TTL under a minute")

	var usage []string
	for u, err := range ac.Usage(ctx, []string{tenant, "globex"}) {
		require.NoError(t, err)
		require.NotNil(t, u.Usage)
		usage = append(usage, u.TenantID)
	}
	require.Equal(t, []string{tenant, "globex"}, usage)

	_, err = sdk.NewAdminClient(s.URL, sdk.WithToken(s.token(tenancy.RoleTenantAdmin))).GetTenant(ctx, tenant)
	require.ErrorIs(t, err, sdk.ErrPermissionDenied, "a tenant token cannot run the platform")
}
