package tenancy_test

import (
	"crypto"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/tenancy"
)

// BenchmarkVerify measures token verification with PEM keys, the cost every
// API request pays: a token seen for the first time (an EdDSA signature
// check), and the same token again (remembered for up to a minute).
func BenchmarkVerify(b *testing.B) {
	pub, priv := newEd25519(b)
	now := func() time.Time { return epoch }
	v, err := tenancy.NewVerifier(b.Context(), tenancy.VerifierConfig{
		Issuer: testIssuer, Audience: testAudience, PublicKeys: []crypto.PublicKey{pub}, Now: now,
	})
	require.NoError(b, err)
	minter := newMinter(b, priv, now)
	mint := func() string {
		tok, err := minter.Mint(tenancy.Claims{Tenant: "acme", Subject: "svc", Roles: []tenancy.Role{tenancy.RoleClient, tenancy.RoleWorker}}, time.Hour)
		require.NoError(b, err)
		return tok
	}
	ctx := b.Context()
	b.Run("new", func(b *testing.B) {
		toks := make([]string, 4096)
		for i := range toks {
			toks[i] = mint()
		}
		v, err := tenancy.NewVerifier(b.Context(), tenancy.VerifierConfig{
			Issuer: testIssuer, Audience: testAudience, PublicKeys: []crypto.PublicKey{pub}, Now: now,
		})
		require.NoError(b, err)
		n := 0
		b.ReportAllocs()
		for b.Loop() {
			if n == len(toks) { // every token seen: a fresh verifier
				b.StopTimer()
				v, err = tenancy.NewVerifier(b.Context(), tenancy.VerifierConfig{
					Issuer: testIssuer, Audience: testAudience, PublicKeys: []crypto.PublicKey{pub}, Now: now,
				})
				require.NoError(b, err)
				n = 0
				b.StartTimer()
			}
			if _, err := v.Verify(ctx, toks[n]); err != nil {
				b.Fatal(err)
			}
			n++
		}
	})
	b.Run("remembered", func(b *testing.B) {
		tok := mint()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.Verify(ctx, tok); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRateLimiterAllow measures the per-request limiter check.
func BenchmarkRateLimiterAllow(b *testing.B) {
	rl := tenancy.NewRateLimiter(tenancy.RateLimiterConfig{})
	l := tenancy.Rate{PerSecond: 1e5, Burst: 1e6}
	b.ReportAllocs()
	for b.Loop() {
		_ = rl.Allow("acme", l)
	}
}
