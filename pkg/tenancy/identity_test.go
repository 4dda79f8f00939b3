package tenancy_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/tenancy"
)

func TestAuthorize(t *testing.T) {
	t.Parallel()
	client := &tenancy.Identity{Tenant: "acme", Subject: "s", Roles: []tenancy.Role{tenancy.RoleClient}}
	worker := &tenancy.Identity{Tenant: "acme", Subject: "w", Roles: []tenancy.Role{tenancy.RoleWorker}}
	platform := &tenancy.Identity{Subject: "ops", Roles: []tenancy.Role{tenancy.RolePlatformAdmin}}
	admin := &tenancy.Identity{Tenant: "acme", Subject: "a", Roles: []tenancy.Role{tenancy.RoleTenantAdmin, tenancy.RoleClient}}

	tests := []struct {
		name  string
		id    *tenancy.Identity // nil: no identity in context
		anyOf []tenancy.Role
		want  error
	}{
		{"client calls a client RPC", client, []tenancy.Role{tenancy.RoleClient}, nil},
		{"worker calls a client RPC", worker, []tenancy.Role{tenancy.RoleClient}, tenancy.ErrPermissionDenied},
		{"any of two roles", worker, []tenancy.Role{tenancy.RoleClient, tenancy.RoleWorker}, nil},
		{"tenant admin holding client too", admin, []tenancy.Role{tenancy.RoleClient}, nil},
		{"platform admin calls Admin", platform, []tenancy.Role{tenancy.RolePlatformAdmin}, nil},
		{"platform admin has no tenant roles", platform, []tenancy.Role{tenancy.RoleClient, tenancy.RoleWorker, tenancy.RoleTenantAdmin}, tenancy.ErrPermissionDenied},
		{"tenant admin is not platform admin", admin, []tenancy.Role{tenancy.RolePlatformAdmin}, tenancy.ErrPermissionDenied},
		{"no roles named fails closed", client, nil, tenancy.ErrPermissionDenied},
		{"no identity", nil, []tenancy.Role{tenancy.RoleClient}, tenancy.ErrUnauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			if tt.id != nil {
				ctx = tenancy.WithIdentity(ctx, tt.id)
			}
			got, err := tenancy.Authorize(ctx, tt.anyOf...)
			if tt.want != nil {
				require.ErrorIs(t, err, tt.want)
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			require.Same(t, tt.id, got)
		})
	}
}

func TestIdentityFrom(t *testing.T) {
	t.Parallel()
	_, ok := tenancy.IdentityFrom(context.Background())
	require.False(t, ok)
	_, ok = tenancy.IdentityFrom(tenancy.WithIdentity(context.Background(), nil))
	require.False(t, ok, "a nil identity is no identity")

	id := &tenancy.Identity{Tenant: "acme", Subject: "s", Roles: []tenancy.Role{tenancy.RoleWorker}}
	got, ok := tenancy.IdentityFrom(tenancy.WithIdentity(context.Background(), id))
	require.True(t, ok)
	require.Same(t, id, got)
	require.True(t, got.Has(tenancy.RoleWorker))
	require.False(t, got.Has(tenancy.RoleClient))

	var none *tenancy.Identity
	require.False(t, none.Has(tenancy.RoleClient))
	require.ErrorIs(t, none.RequireAny(tenancy.RoleClient), tenancy.ErrUnauthenticated)
}

// A refusal says which token to use instead, and nothing of the caller's.
func TestRequireAnySaysWhatToDo(t *testing.T) {
	t.Parallel()
	worker := &tenancy.Identity{Tenant: "acme", Subject: "w-7", Roles: []tenancy.Role{tenancy.RoleWorker}}
	require.EqualError(t, worker.RequireAny(tenancy.RoleClient),
		"permission denied: this call needs a token with the role client: use a client token")
	require.EqualError(t, worker.RequireAny(tenancy.RoleClient, tenancy.RoleTenantAdmin, tenancy.RolePlatformAdmin),
		"permission denied: this call needs a token with one of the roles client, tenant-admin, platform-admin: use a client, tenant-admin or platform-admin token")
}

func TestRoleKnown(t *testing.T) {
	t.Parallel()
	for _, r := range []tenancy.Role{tenancy.RoleClient, tenancy.RoleWorker, tenancy.RoleTenantAdmin, tenancy.RolePlatformAdmin} {
		require.True(t, r.Known(), r)
	}
	for _, r := range []tenancy.Role{"", "admin", "Client", "platform_admin"} {
		require.False(t, r.Known(), r)
	}
}
