package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/store"
)

func (h *harness) register(tenant, name, version, doc string) *store.RegisterDefinitionResult {
	h.t.Helper()
	res, err := h.s.RegisterDefinition(h.ctx(), &store.RegisterDefinitionParams{
		TenantID: tenant, Name: name, Version: version, Document: json.RawMessage(doc),
	})
	require.NoError(h.t, err)
	return res
}

func testDefinitions(t *testing.T, h *harness) {
	acme, other := h.tenant("acme"), h.tenant("other")

	res := h.register(acme, "order", "1", `{"name":"order","version":"1","steps":[{"return":1}]}`)
	require.True(t, res.Created)
	require.Equal(t, h.clock.Now(), res.CreatedAt)

	// Same content again, keys in another order: a no-op.
	h.clock.Advance(time.Second)
	res = h.register(acme, "order", "1", `{"version":"1","steps":[{"return":1}],"name":"order"}`)
	require.False(t, res.Created)
	require.Equal(t, h.clock.Now().Add(-time.Second), res.CreatedAt)

	// Different content for the same version: refused, the first one stays.
	_, err := h.s.RegisterDefinition(h.ctx(), &store.RegisterDefinitionParams{
		TenantID: acme, Name: "order", Version: "1", Document: json.RawMessage(`{"name":"order","version":"1","steps":[{"return":2}]}`),
	})
	require.ErrorIs(t, err, store.ErrAlreadyExists)

	h.clock.Advance(time.Second)
	h.register(acme, "order", "2", `{"name":"order","version":"2","steps":[{"return":2}]}`)
	h.clock.Advance(time.Second)
	h.register(acme, "billing", "7", `{"name":"billing","version":"7","steps":[]}`)
	// Another tenant's version of the same name is its own.
	h.register(other, "order", "9", `{"name":"order","version":"9","steps":[]}`)

	got, err := h.s.GetDefinition(h.ctx(), &store.GetDefinitionParams{TenantID: acme, Name: "order", Version: "1"})
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"order","version":"1","steps":[{"return":1}]}`, string(got.Document))

	latest, err := h.s.GetDefinition(h.ctx(), &store.GetDefinitionParams{TenantID: acme, Name: "order"})
	require.NoError(t, err)
	require.Equal(t, "2", latest.Version)

	_, err = h.s.GetDefinition(h.ctx(), &store.GetDefinitionParams{TenantID: acme, Name: "order", Version: "9"})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = h.s.GetDefinition(h.ctx(), &store.GetDefinitionParams{TenantID: other, Name: "billing"})
	require.ErrorIs(t, err, store.ErrNotFound)

	versions := func(p store.ListDefinitionsParams) []string {
		p.TenantID = acme
		defs, err := h.s.ListDefinitions(h.ctx(), &p)
		require.NoError(t, err)
		var out []string
		for _, d := range defs {
			require.Equal(t, p.WithDocuments, d.Document != nil, "document of %s/%s", d.Name, d.Version)
			out = append(out, d.Name+"/"+d.Version)
		}
		return out
	}
	require.Equal(t, []string{"billing/7", "order/2", "order/1"}, versions(store.ListDefinitionsParams{}))
	require.Equal(t, []string{"order/2", "order/1"}, versions(store.ListDefinitionsParams{Name: "order", WithDocuments: true}))
	// Keyset pages.
	require.Equal(t, []string{"billing/7", "order/2"}, versions(store.ListDefinitionsParams{Limit: 2}))
	require.Equal(t, []string{"order/1"}, versions(store.ListDefinitionsParams{Limit: 2, AfterName: "order", AfterVersion: "2"}))
	require.Equal(t, []string{"order/2", "order/1"}, versions(store.ListDefinitionsParams{AfterName: "billing", AfterVersion: "7"}))

	for _, p := range []store.RegisterDefinitionParams{
		{TenantID: acme, Name: "", Version: "1", Document: json.RawMessage(`{}`)},
		{TenantID: acme, Name: "x", Version: "", Document: json.RawMessage(`{}`)},
		{TenantID: acme, Name: "x", Version: "1", Document: json.RawMessage(`{not json`)},
	} {
		_, err := h.s.RegisterDefinition(h.ctx(), &p)
		require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", p)
	}
	_, err = h.s.ListDefinitions(h.ctx(), &store.ListDefinitionsParams{TenantID: acme, Limit: 5000})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
}

func testTenants(t *testing.T, h *harness) {
	for _, id := range []string{"b", "a", "c"} {
		h.tenant(id)
	}
	require.ErrorIs(t, h.s.CreateTenant(h.ctx(), &store.CreateTenantParams{TenantID: "a"}), store.ErrAlreadyExists)

	a, err := h.s.GetTenant(h.ctx(), &store.GetTenantParams{TenantID: "a"})
	require.NoError(t, err)
	require.Equal(t, store.TenantActive, a.State)
	require.Equal(t, store.Limits{}, a.Limits)
	require.Equal(t, store.RetentionPolicy{}, a.Retention)
	_, err = h.s.GetTenant(h.ctx(), &store.GetTenantParams{TenantID: "nobody"})
	require.ErrorIs(t, err, store.ErrNotFound)

	page, err := h.s.ListTenants(h.ctx(), &store.ListTenantsParams{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, tenantIDs(page))
	page, err = h.s.ListTenants(h.ctx(), &store.ListTenantsParams{AfterTenantID: "b"})
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, tenantIDs(page))

	h.clock.Advance(time.Minute)
	suspended := store.TenantSuspended
	policy := store.RetentionPolicy{
		Default: store.Retention{Completed: new(30 * 24 * time.Hour), Failed: new(90 * 24 * time.Hour)},
		ByName:  map[string]store.Retention{"poller": {Chain: store.ChainRetention{KeepLast: 5, AutoPrune: new(true)}}},
	}
	b, err := h.s.UpdateTenant(h.ctx(), &store.UpdateTenantParams{
		TenantID: "b", State: &suspended, Limits: &store.Limits{RequestsPerSecond: 5}, Retention: &policy,
	})
	require.NoError(t, err)
	require.Equal(t, store.TenantSuspended, b.State)
	require.Equal(t, store.Limits{RequestsPerSecond: 5}, b.Limits)
	require.Equal(t, policy, b.Retention)
	require.Equal(t, h.clock.Now(), b.UpdatedAt)

	// Unset fields stay.
	active := store.TenantActive
	b, err = h.s.UpdateTenant(h.ctx(), &store.UpdateTenantParams{TenantID: "b", State: &active})
	require.NoError(t, err)
	require.Equal(t, store.TenantActive, b.State)
	require.Equal(t, policy, b.Retention)
	require.Equal(t, store.Limits{RequestsPerSecond: 5}, b.Limits)

	bad := "deleted"
	_, err = h.s.UpdateTenant(h.ctx(), &store.UpdateTenantParams{TenantID: "b", State: &bad})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	_, err = h.s.UpdateTenant(h.ctx(), &store.UpdateTenantParams{TenantID: "b", Retention: &store.RetentionPolicy{
		ByName: map[string]store.Retention{"x": {Chain: store.ChainRetention{AutoPrune: new(true)}}},
	}})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	_, err = h.s.UpdateTenant(h.ctx(), &store.UpdateTenantParams{TenantID: "b", Limits: &store.Limits{Burst: -1}})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	_, err = h.s.UpdateTenant(h.ctx(), &store.UpdateTenantParams{TenantID: "nobody", State: &active})
	require.ErrorIs(t, err, store.ErrNotFound)

	// The policy that applies: instance override, else by name, else default.
	// The policy that applies, field by field: instance override, else by
	// name, else default.
	override := &store.Retention{Completed: new(time.Hour)}
	require.Equal(t, store.Retention{
		Completed: new(time.Hour), Failed: new(90 * 24 * time.Hour),
		Chain: store.ChainRetention{KeepLast: 5, AutoPrune: new(true)},
	}, policy.For("poller", override))
	require.Equal(t, store.Retention{
		Completed: new(30 * 24 * time.Hour), Failed: new(90 * 24 * time.Hour),
		Chain: store.ChainRetention{KeepLast: 5, AutoPrune: new(true)},
	}, policy.For("poller", nil))
	require.Equal(t, policy.Default, policy.For("order", nil))
}

func tenantIDs(ts []store.Tenant) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.TenantID)
	}
	return out
}

func testInstanceRetentionOverride(t *testing.T, h *harness) {
	tenant := h.tenant("acme")
	keep := &store.Retention{Chain: store.ChainRetention{KeepLast: 3, AutoPrune: new(true)}}
	_, err := h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{
		TenantID: tenant, InstanceID: "poller", Name: "poller", Retention: keep,
		Start: store.Message{Kind: kindStart},
	})
	require.NoError(t, err)
	require.Equal(t, keep, h.instance(tenant, "poller").Retention)

	h.start(tenant, "plain")
	require.Nil(t, h.instance(tenant, "plain").Retention)

	_, err = h.s.StartOrchestration(h.ctx(), &store.StartOrchestrationParams{
		TenantID: tenant, InstanceID: "bad", Name: "poller", Retention: &store.Retention{Completed: new(-time.Hour)},
		Start: store.Message{Kind: kindStart},
	})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
}
