package crdb

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
)

// Limits written past validation (by hand, or by an older version with
// other fields) read as the defaults, with a warning, and the tenant stays
// readable: the one fallback for stored limits.
func TestStoredLimitsFallBackToDefaults(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	s := New(testdb.Pool(t, 4), Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := t.Context()
	require.NoError(t, s.CreateTenant(ctx, &store.CreateTenantParams{TenantID: "acme"}))
	for _, raw := range []string{`{"burst": -5}`, `{"max_payload": 10}`, `[1]`} {
		exec(t, s, `UPDATE tenants SET limits = $1::JSONB WHERE tenant_id = 'acme'`, raw)
		tn, err := s.GetTenant(ctx, &store.GetTenantParams{TenantID: "acme"})
		require.NoError(t, err, raw)
		require.Equal(t, store.Limits{}, tn.Limits, raw)
		require.Equal(t, store.DefaultLimits(), tn.Limits.Effective(), raw)
	}
	require.Contains(t, logs.String(), "stored limits are invalid")
	require.Contains(t, logs.String(), "tenant=acme")

	exec(t, s, `UPDATE tenants SET limits = '{"burst": 7}' WHERE tenant_id = 'acme'`)
	tn, err := s.GetTenant(ctx, &store.GetTenantParams{TenantID: "acme"})
	require.NoError(t, err)
	require.Equal(t, store.Limits{Burst: 7}, tn.Limits)
}
