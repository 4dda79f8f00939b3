package api_test

import (
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
)

// Every listing takes only the page tokens it issued, for its caller's
// tenant and criteria: a token of another listing, of another tenant,
// altered, or not a token at all is an InvalidArgument naming page_token,
// never a page of something else.
func TestPageTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.tenant("tenant-a", nil, testsystem.EchoDef), e.tenant("tenant-b", nil, testsystem.EchoDef)
	ca, cb := e.all(a), e.all(b)
	admin := e.clients(e.token("", tenancy.RolePlatformAdmin))
	ctx := t.Context()
	for _, c := range []*clients{ca, cb} {
		for _, id := range []string{"i1", "i2"} {
			_, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", InstanceId: id}))
			require.NoError(t, err)
		}
		for _, v := range []string{"1", "2"} {
			_, err := c.defs.RegisterDefinition(ctx, req(&orchardv1.RegisterDefinitionRequest{
				Document: []byte(`{"name":"quick","version":"` + v + `","steps":[{"return":0}]}`)}))
			require.NoError(t, err)
		}
	}

	// A listing's call with a page token; tokens of the listings below.
	type listing struct {
		call  func(token string) (next string, err error)
		owner string // the tenant its tokens are bound to; "" across tenants
	}
	listings := map[string]listing{
		"ListInstances": {owner: a, call: func(tok string) (string, error) {
			r, err := ca.client.ListInstances(ctx, req(&orchardv1.ListInstancesRequest{PageSize: 1, PageToken: tok}))
			if err != nil {
				return "", err
			}
			return r.Msg.NextPageToken, nil
		}},
		"ListDefinitions": {owner: a, call: func(tok string) (string, error) {
			r, err := ca.defs.ListDefinitions(ctx, req(&orchardv1.ListDefinitionsRequest{PageSize: 1, PageToken: tok}))
			if err != nil {
				return "", err
			}
			return r.Msg.NextPageToken, nil
		}},
		"ListTenants": {call: func(tok string) (string, error) {
			r, err := admin.admin.ListTenants(ctx, req(&orchardv1.ListTenantsRequest{PageSize: 1, PageToken: tok}))
			if err != nil {
				return "", err
			}
			return r.Msg.NextPageToken, nil
		}},
		"GetUsage": {call: func(tok string) (string, error) {
			r, err := admin.admin.GetUsage(ctx, req(&orchardv1.AdminServiceGetUsageRequest{PageSize: 1, PageToken: tok}))
			if err != nil {
				return "", err
			}
			return r.Msg.NextPageToken, nil
		}},
	}
	// Listings with nothing to page here still judge the tokens they get.
	judges := map[string]func(token string) error{
		"ListAuditRecords": func(tok string) error {
			_, err := ca.tenant.ListAuditRecords(ctx, req(&orchardv1.ListAuditRecordsRequest{PageToken: tok}))
			return err
		},
		"AdminService.ListAuditRecords": func(tok string) error {
			_, err := admin.admin.ListAuditRecords(ctx, req(&orchardv1.AdminServiceListAuditRecordsRequest{Page: &orchardv1.ListAuditRecordsRequest{PageToken: tok}}))
			return err
		},
		"ListJanitorRuns": func(tok string) error {
			_, err := admin.admin.ListJanitorRuns(ctx, req(&orchardv1.ListJanitorRunsRequest{PageToken: tok}))
			return err
		},
	}
	tokens := map[string]string{}
	for name, l := range listings {
		next, err := l.call("")
		require.NoError(t, err, name)
		require.NotEmpty(t, next, name)
		// The token works where it was issued.
		_, err = l.call(next)
		require.NoError(t, err, name)
		tokens[name] = next
		judges[name] = func(tok string) error { _, err := l.call(tok); return err }
	}
	// Tenant B's tokens of the tenant-bound listings.
	otherTenant := map[string]string{}
	for name, call := range map[string]func() (string, error){
		"ListInstances": func() (string, error) {
			r, err := cb.client.ListInstances(ctx, req(&orchardv1.ListInstancesRequest{PageSize: 1}))
			return r.Msg.GetNextPageToken(), err
		},
		"ListDefinitions": func() (string, error) {
			r, err := cb.defs.ListDefinitions(ctx, req(&orchardv1.ListDefinitionsRequest{PageSize: 1}))
			return r.Msg.GetNextPageToken(), err
		},
	} {
		tok, err := call()
		require.NoError(t, err, name)
		require.NotEmpty(t, tok, name)
		otherTenant[name] = tok
	}

	for name, judge := range judges {
		bad := map[string]string{
			"not a token":     "garbage",
			"no signature":    "eyJxIjoiIn0",
			"empty signature": "eyJxIjoiIn0.",
		}
		for issuer, tok := range tokens {
			if issuer != name {
				bad["a token of "+issuer] = tok
			}
		}
		if tok, ok := tokens[name]; ok {
			bad["altered signature"] = tok[:len(tok)-2] + flip(tok[len(tok)-2:])
			bad["altered payload"] = flip(tok[:1]) + tok[1:]
		}
		if tok, ok := otherTenant[name]; ok {
			bad["another tenant's token"] = tok
		}
		for what, tok := range bad {
			err := judge(tok)
			require.Error(t, err, "%s given %s", name, what)
			requireCode(t, err, connect.CodeInvalidArgument, "page_token")
		}
	}
}

// flip changes every character of s to another base64url character.
func flip(s string) string {
	out := []byte(s)
	for i, c := range out {
		if c == 'A' {
			out[i] = 'B'
		} else {
			out[i] = 'A'
		}
	}
	return string(out)
}
