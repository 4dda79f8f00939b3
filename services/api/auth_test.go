package api_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/services/api"
)

func signed(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	require.NoError(t, err)
	return s
}

// TestAuthentication: every way a token can be wrong is Unauthenticated;
// a valid token with the wrong role is PermissionDenied.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme", nil)
	_, otherKey, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	claims := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"iss": testsystem.Issuer, "aud": []string{testsystem.Audience}, "sub": "s", "tenant": acme, "roles": []string{"client"},
			"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		if edit != nil {
			edit(c)
		}
		return c
	}
	mine := func(edit func(jwt.MapClaims)) string {
		// Signed by the server's key through a second minter-equivalent: the
		// raw claims let the test break one thing at a time.
		return signedWithMinterKey(t, e, claims(edit))
	}
	require.NotEmpty(t, mine(nil))
	pub := e.Minter.PublicKey()

	cases := []struct {
		name  string
		token string
		code  connect.Code
	}{
		{"no token", "", connect.CodeUnauthenticated},
		{"malformed", "not.a.jwt", connect.CodeUnauthenticated},
		{"alg none", signed(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims(nil)), connect.CodeUnauthenticated},
		{"HMAC with the public key", signed(t, jwt.SigningMethodHS256, []byte(pub), claims(nil)), connect.CodeUnauthenticated},
		{"wrong key", signed(t, jwt.SigningMethodEdDSA, otherKey, claims(nil)), connect.CodeUnauthenticated},
		{"unknown kid", func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims(nil))
			tok.Header["kid"] = "no-such-key"
			s, err := tok.SignedString(otherKey)
			require.NoError(t, err)
			return s
		}(), connect.CodeUnauthenticated},
		{"expired", mine(func(c jwt.MapClaims) {
			c["exp"] = now.Add(-time.Hour).Unix()
			c["iat"] = now.Add(-2 * time.Hour).Unix()
		}), connect.CodeUnauthenticated},
		{"not yet valid", mine(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Hour).Unix() }), connect.CodeUnauthenticated},
		{"wrong issuer", mine(func(c jwt.MapClaims) { c["iss"] = "https://evil.test" }), connect.CodeUnauthenticated},
		{"wrong audience", mine(func(c jwt.MapClaims) { c["aud"] = []string{"other"} }), connect.CodeUnauthenticated},
		{"missing tenant", mine(func(c jwt.MapClaims) { delete(c, "tenant") }), connect.CodeUnauthenticated},
		{"missing roles", mine(func(c jwt.MapClaims) { delete(c, "roles") }), connect.CodeUnauthenticated},
		{"role too weak", e.token(acme, tenancy.RoleWorker), connect.CodePermissionDenied},
		{"tenant-admin is not client", e.token(acme, tenancy.RoleTenantAdmin), connect.CodePermissionDenied},
		{"platform-admin is not client", e.token("", tenancy.RolePlatformAdmin), connect.CodePermissionDenied},
		{"unknown tenant", e.token("ghost", tenancy.RoleClient), connect.CodePermissionDenied},
		{"valid", mine(nil), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.clients(tc.token).client.CountInstances(t.Context(), req(&orchardv1.CountInstancesRequest{}))
			if tc.code == 0 {
				require.NoError(t, err)
				return
			}
			requireCode(t, err, tc.code)
		})
	}
	// A non-Bearer scheme.
	c := e.clients("", connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, r connect.AnyRequest) (connect.AnyResponse, error) {
			r.Header().Set("Authorization", "Basic "+mine(nil))
			return next(ctx, r)
		}
	})))
	_, err = c.client.CountInstances(t.Context(), req(&orchardv1.CountInstancesRequest{}))
	requireCode(t, err, connect.CodeUnauthenticated)
}

// signedWithMinterKey signs raw claims as the env's minter would.
func signedWithMinterKey(t *testing.T, e *env, claims jwt.MapClaims) string {
	t.Helper()
	return signed(t, jwt.SigningMethodEdDSA, e.Key, claims)
}

// TestRolesPerService: each service takes its role and refuses the others.
func TestRolesPerService(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme", nil)
	ctx := t.Context()
	calls := map[tenancy.Role]func(c *clients) error{
		tenancy.RoleClient: func(c *clients) error {
			_, err := c.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{}))
			return err
		},
		tenancy.RoleWorker: func(c *clients) error {
			_, err := c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{TaskQueue: "q", Wait: nil}))
			return err
		},
		tenancy.RoleTenantAdmin: func(c *clients) error {
			_, err := c.tenant.GetLimits(ctx, req(&orchardv1.GetLimitsRequest{}))
			return err
		},
		tenancy.RolePlatformAdmin: func(c *clients) error {
			_, err := c.admin.ListTenants(ctx, req(&orchardv1.ListTenantsRequest{}))
			return err
		},
	}
	for holder := range calls {
		tenant := acme
		if holder == tenancy.RolePlatformAdmin {
			tenant = ""
		}
		c := e.clients(e.token(tenant, holder))
		for needed, call := range calls {
			if needed == tenancy.RoleWorker && holder == tenancy.RoleWorker {
				continue // a 30s long poll; covered elsewhere
			}
			err := call(c)
			if needed == holder {
				require.NoError(t, err, "%s calling its own service", holder)
			} else {
				requireCode(t, err, connect.CodePermissionDenied)
			}
		}
	}
}

// TestEveryProcedureHasARule walks the services' descriptors: every RPC
// must be in the access table (a new RPC without one fails here), and the
// server refuses a call no rule covers.
func TestEveryProcedureHasARule(t *testing.T) {
	t.Parallel()
	rules := api.AccessRules()
	n := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("orchard.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				procedure := "/" + string(sd.FullName()) + "/" + string(sd.Methods().Get(j).Name())
				require.Contains(t, rules, procedure)
				require.NotEmpty(t, rules[procedure], procedure)
				n++
			}
		}
		return true
	})
	require.Equal(t, len(rules), n, "the access table names procedures that do not exist")
}

// TestSuspendedTenant: a suspended tenant's calls are PermissionDenied,
// except its tenant-admin's reads; resuming lets them through again.
func TestSuspendedTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.TenantCacheTTL = time.Nanosecond })
	acme := e.tenant("acme", nil, testsystem.QuickDef)
	other := e.tenant("other", nil)
	platform := e.clients(e.token("", tenancy.RolePlatformAdmin))
	all := e.all(acme)
	ctx := t.Context()
	_, err := platform.admin.UpdateTenant(ctx, req(&orchardv1.UpdateTenantRequest{TenantId: acme, State: orchardv1.TenantState_TENANT_STATE_SUSPENDED}))
	require.NoError(t, err)

	_, err = all.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "quick"}))
	requireCode(t, err, connect.CodePermissionDenied, "suspended")
	_, err = all.client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{}))
	requireCode(t, err, connect.CodePermissionDenied)
	_, err = all.tenant.SetRetentionPolicy(ctx, req(&orchardv1.SetRetentionPolicyRequest{Policy: &orchardv1.RetentionPolicy{}}))
	requireCode(t, err, connect.CodePermissionDenied)
	_, err = all.defs.RegisterDefinition(ctx, req(&orchardv1.RegisterDefinitionRequest{Document: []byte(testsystem.QuickDef)}))
	requireCode(t, err, connect.CodePermissionDenied)
	_, err = all.tenant.GetLimits(ctx, req(&orchardv1.GetLimitsRequest{}))
	require.NoError(t, err)
	_, err = all.tenant.GetUsage(ctx, req(&orchardv1.GetUsageRequest{}))
	require.NoError(t, err)
	_, err = all.tenant.GetRetentionPolicy(ctx, req(&orchardv1.GetRetentionPolicyRequest{}))
	require.NoError(t, err)
	_, err = all.defs.ListDefinitions(ctx, req(&orchardv1.ListDefinitionsRequest{}))
	require.NoError(t, err)
	// A client-only token of the suspended tenant cannot read definitions.
	_, err = e.clients(e.token(acme, tenancy.RoleClient)).defs.ListDefinitions(ctx, req(&orchardv1.ListDefinitionsRequest{}))
	requireCode(t, err, connect.CodePermissionDenied)
	// Another tenant is unaffected.
	_, err = e.all(other).client.CountInstances(ctx, req(&orchardv1.CountInstancesRequest{}))
	require.NoError(t, err)

	_, err = platform.admin.UpdateTenant(ctx, req(&orchardv1.UpdateTenantRequest{TenantId: acme, State: orchardv1.TenantState_TENANT_STATE_ACTIVE}))
	require.NoError(t, err)
	_, err = all.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "quick"}))
	require.NoError(t, err)
}
