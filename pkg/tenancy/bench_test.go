package tenancy_test

import (
	"crypto"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/tenancy"
)

// BenchmarkVerify measures one EdDSA token verification with PEM keys, the
// cost every API request pays.
func BenchmarkVerify(b *testing.B) {
	pub, priv := newEd25519(b)
	now := func() time.Time { return epoch }
	v, err := tenancy.NewVerifier(b.Context(), tenancy.VerifierConfig{
		Issuer: testIssuer, Audience: testAudience, PublicKeys: []crypto.PublicKey{pub}, Now: now,
	})
	require.NoError(b, err)
	tok, err := newMinter(b, priv, now).Mint(tenancy.Claims{Tenant: "acme", Subject: "svc", Roles: []tenancy.Role{tenancy.RoleClient, tenancy.RoleWorker}}, time.Hour)
	require.NoError(b, err)
	ctx := b.Context()
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(ctx, tok); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "verifications/s")
}

// BenchmarkRateLimiterAllow measures the per-request limiter check.
func BenchmarkRateLimiterAllow(b *testing.B) {
	rl := tenancy.NewRateLimiter(tenancy.RateLimiterConfig{})
	l := tenancy.Limits{RequestsPerSecond: 1e5, Burst: 1e6}
	b.ReportAllocs()
	for b.Loop() {
		_ = rl.Allow("acme", l)
	}
}
