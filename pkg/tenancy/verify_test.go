package tenancy_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/tenancy"
)

func TestMintVerifyRoundTrip(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	pub, priv := newEd25519(t)
	minter := newMinter(t, priv, clock.Now)
	v, err := tenancy.NewVerifier(t.Context(), tenancy.VerifierConfig{
		Issuer: testIssuer, Audience: testAudience, PublicKeys: []crypto.PublicKey{pub}, Now: clock.Now,
	})
	require.NoError(t, err)

	tests := []struct {
		name   string
		claims tenancy.Claims
		want   tenancy.Identity
	}{
		{
			name:   "client",
			claims: tenancy.Claims{Tenant: "acme", Subject: "svc-checkout", Roles: []tenancy.Role{tenancy.RoleClient}},
			want:   tenancy.Identity{Tenant: "acme", Subject: "svc-checkout", Roles: []tenancy.Role{tenancy.RoleClient}},
		},
		{
			name:   "worker and admin, duplicates dropped",
			claims: tenancy.Claims{Tenant: "acme", Subject: "pool-1", Roles: []tenancy.Role{tenancy.RoleWorker, tenancy.RoleTenantAdmin, tenancy.RoleWorker}},
			want:   tenancy.Identity{Tenant: "acme", Subject: "pool-1", Roles: []tenancy.Role{tenancy.RoleWorker, tenancy.RoleTenantAdmin}},
		},
		{
			name:   "platform admin without tenant",
			claims: tenancy.Claims{Subject: "ops@orchard", Roles: []tenancy.Role{tenancy.RolePlatformAdmin}},
			want:   tenancy.Identity{Subject: "ops@orchard", Roles: []tenancy.Role{tenancy.RolePlatformAdmin}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tok, err := minter.Mint(tt.claims, time.Hour)
			require.NoError(t, err)
			id, err := v.Verify(t.Context(), tok)
			require.NoError(t, err)
			require.Equal(t, tt.want.Tenant, id.Tenant)
			require.Equal(t, tt.want.Subject, id.Subject)
			require.Equal(t, tt.want.Roles, id.Roles)
			require.Len(t, id.TokenID, 32)
			require.Equal(t, epoch.Add(time.Hour), id.ExpiresAt.UTC())
		})
	}
}

func TestVerifyRejects(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	pub, priv := newEd25519(t)
	_, otherPriv := newEd25519(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	kid, err := tenancy.KeyID(pub)
	require.NoError(t, err)

	v, err := tenancy.NewVerifier(t.Context(), tenancy.VerifierConfig{
		Issuer: testIssuer, Audience: testAudience, PublicKeys: []crypto.PublicKey{pub}, Now: clock.Now,
	})
	require.NoError(t, err)

	with := func(edit func(c jwt.MapClaims)) jwt.MapClaims {
		c := baseClaims()
		edit(c)
		return c
	}
	ed := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodEdDSA, priv, kid, c) }
	valid := ed(baseClaims())
	parts := strings.Split(valid, ".")

	tests := []struct {
		name  string
		token string
		want  error // nil means accepted
	}{
		{"valid", valid, nil},
		{"empty", "", tenancy.ErrTokenMissing},
		{"garbage", "not-a-jwt", tenancy.ErrTokenMalformed},
		{"too long", strings.Repeat("a", tenancy.MaxTokenBytes+1), tenancy.ErrTokenMalformed},
		{"alg none", sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, kid, baseClaims()), tenancy.ErrTokenAlgorithm},
		{"alg none, empty signature, header rewritten", rewriteAlg(t, valid, "none", false), tenancy.ErrTokenAlgorithm},
		{"alg HS256 keyed with the public key", sign(t, jwt.SigningMethodHS256, []byte(pub), kid, baseClaims()), tenancy.ErrTokenAlgorithm},
		{"alg RS256 not configured", sign(t, jwt.SigningMethodRS256, rsaKey, "", baseClaims()), tenancy.ErrTokenAlgorithm},
		{"alg unknown", rewriteAlg(t, valid, "XS999", true), tenancy.ErrTokenAlgorithm},
		{"signed by another key", sign(t, jwt.SigningMethodEdDSA, otherPriv, "", baseClaims()), tenancy.ErrTokenSignature},
		{"signed by another key, our kid", sign(t, jwt.SigningMethodEdDSA, otherPriv, kid, baseClaims()), tenancy.ErrTokenSignature},
		{"payload tampered", parts[0] + "." + strings.Split(ed(with(func(c jwt.MapClaims) { c["tenant"] = "other" })), ".")[1] + "." + parts[2], tenancy.ErrTokenSignature},
		{"wrong issuer", ed(with(func(c jwt.MapClaims) { c["iss"] = "https://evil.test" })), tenancy.ErrTokenIssuer},
		{"missing issuer", ed(with(func(c jwt.MapClaims) { delete(c, "iss") })), tenancy.ErrTokenClaims},
		{"wrong audience", ed(with(func(c jwt.MapClaims) { c["aud"] = []string{"someone-else"} })), tenancy.ErrTokenAudience},
		{"audience among others", ed(with(func(c jwt.MapClaims) { c["aud"] = []string{"x", testAudience} })), nil},
		{"missing audience", ed(with(func(c jwt.MapClaims) { delete(c, "aud") })), tenancy.ErrTokenClaims},
		{"expired beyond leeway", ed(with(func(c jwt.MapClaims) { c["exp"] = epoch.Add(-31 * time.Second).Unix() })), tenancy.ErrTokenExpired},
		{"expired within leeway", ed(with(func(c jwt.MapClaims) { c["exp"] = epoch.Add(-29 * time.Second).Unix() })), nil},
		{"missing exp", ed(with(func(c jwt.MapClaims) { delete(c, "exp") })), tenancy.ErrTokenClaims},
		{"exp of wrong type", ed(with(func(c jwt.MapClaims) { c["exp"] = "tomorrow" })), tenancy.ErrTokenMalformed},
		{"not yet valid beyond leeway", ed(with(func(c jwt.MapClaims) { c["nbf"] = epoch.Add(31 * time.Second).Unix() })), tenancy.ErrTokenNotYetValid},
		{"not yet valid within leeway", ed(with(func(c jwt.MapClaims) { c["nbf"] = epoch.Add(29 * time.Second).Unix() })), nil},
		{"issued in the future", ed(with(func(c jwt.MapClaims) { c["iat"] = epoch.Add(time.Minute).Unix() })), tenancy.ErrTokenNotYetValid},
		{"missing tenant", ed(with(func(c jwt.MapClaims) { delete(c, "tenant") })), tenancy.ErrTokenClaims},
		{"missing tenant with platform admin and client", ed(with(func(c jwt.MapClaims) {
			delete(c, "tenant")
			c["roles"] = []string{"platform-admin", "client"}
		})), tenancy.ErrTokenClaims},
		{"platform admin without tenant", ed(with(func(c jwt.MapClaims) {
			delete(c, "tenant")
			c["roles"] = []string{"platform-admin"}
		})), nil},
		{"unknown role", ed(with(func(c jwt.MapClaims) { c["roles"] = []string{"client", "superuser"} })), tenancy.ErrTokenClaims},
		{"role of wrong case", ed(with(func(c jwt.MapClaims) { c["roles"] = []string{"Client"} })), tenancy.ErrTokenClaims},
		{"no roles", ed(with(func(c jwt.MapClaims) { c["roles"] = []string{} })), tenancy.ErrTokenClaims},
		{"roles missing", ed(with(func(c jwt.MapClaims) { delete(c, "roles") })), tenancy.ErrTokenClaims},
		{"roles not a list", ed(with(func(c jwt.MapClaims) { c["roles"] = "client" })), tenancy.ErrTokenMalformed},
		{"missing subject", ed(with(func(c jwt.MapClaims) { delete(c, "sub") })), tenancy.ErrTokenClaims},
		{"tenant with a newline", ed(with(func(c jwt.MapClaims) { c["tenant"] = "acme\nadmin" })), tenancy.ErrTokenClaims},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, err := v.Verify(t.Context(), tt.token)
			if tt.want == nil {
				require.NoError(t, err)
				require.NotNil(t, id)
				return
			}
			require.Nil(t, id)
			require.ErrorIs(t, err, tenancy.ErrUnauthenticated)
			require.ErrorIs(t, err, tt.want)
			for _, reason := range allReasons {
				if reason != tt.want {
					require.NotErrorIs(t, err, reason)
				}
			}
			for _, part := range strings.Split(tt.token, ".") {
				if len(part) >= 8 {
					require.NotContains(t, err.Error(), part, "error text quotes the token")
				}
			}
		})
	}
}

var allReasons = []error{
	tenancy.ErrTokenMissing, tenancy.ErrTokenMalformed, tenancy.ErrTokenAlgorithm, tenancy.ErrTokenKey,
	tenancy.ErrTokenSignature, tenancy.ErrTokenExpired, tenancy.ErrTokenNotYetValid, tenancy.ErrTokenIssuer,
	tenancy.ErrTokenAudience, tenancy.ErrTokenClaims,
}

// rewriteAlg replaces a signed token's alg header, keeping or dropping its
// signature.
func rewriteAlg(t *testing.T, token, alg string, keepSig bool) string {
	t.Helper()
	parts := strings.Split(token, ".")
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"` + alg + `","typ":"JWT"}`))
	if !keepSig {
		return header + "." + parts[1] + "."
	}
	return header + "." + parts[1] + "." + parts[2]
}

func TestVerifyAlgorithmsWhenConfigured(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	edPub, edPriv := newEd25519(t)

	tests := []struct {
		name    string
		algs    []string
		keys    []crypto.PublicKey
		token   string
		want    error
		wantCfg bool // NewVerifier itself refuses
	}{
		{name: "RS256 allowed", algs: []string{tenancy.AlgRS256}, keys: []crypto.PublicKey{&rsaKey.PublicKey},
			token: sign(t, jwt.SigningMethodRS256, rsaKey, "", baseClaims())},
		{name: "ES256 allowed", algs: []string{tenancy.AlgES256}, keys: []crypto.PublicKey{&ecKey.PublicKey},
			token: sign(t, jwt.SigningMethodES256, ecKey, "", baseClaims())},
		{name: "EdDSA refused when only RS256 allowed", algs: []string{tenancy.AlgRS256}, keys: []crypto.PublicKey{&rsaKey.PublicKey},
			token: sign(t, jwt.SigningMethodEdDSA, edPriv, "", baseClaims()), want: tenancy.ErrTokenAlgorithm},
		{name: "RS384 never", algs: []string{tenancy.AlgRS256}, keys: []crypto.PublicKey{&rsaKey.PublicKey},
			token: sign(t, jwt.SigningMethodRS384, rsaKey, "", baseClaims()), want: tenancy.ErrTokenAlgorithm},
		{name: "mixed keys, EdDSA token", algs: []string{tenancy.AlgEdDSA, tenancy.AlgRS256}, keys: []crypto.PublicKey{&rsaKey.PublicKey, edPub},
			token: sign(t, jwt.SigningMethodEdDSA, edPriv, "", baseClaims())},
		{name: "RSA key without RS256", keys: []crypto.PublicKey{&rsaKey.PublicKey}, wantCfg: true},
		{name: "HS256 cannot be configured", algs: []string{"HS256"}, keys: []crypto.PublicKey{edPub}, wantCfg: true},
		{name: "none cannot be configured", algs: []string{"none"}, keys: []crypto.PublicKey{edPub}, wantCfg: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := tenancy.NewVerifier(t.Context(), tenancy.VerifierConfig{
				Issuer: testIssuer, Audience: testAudience, Algorithms: tt.algs, PublicKeys: tt.keys, Now: clock.Now,
			})
			if tt.wantCfg {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			id, err := v.Verify(t.Context(), tt.token)
			if tt.want != nil {
				require.ErrorIs(t, err, tt.want)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "acme", id.Tenant)
		})
	}
}

func TestVerifierConfigRejected(t *testing.T) {
	t.Parallel()
	pub, _ := newEd25519(t)
	ok := tenancy.VerifierConfig{Issuer: testIssuer, Audience: testAudience, PublicKeys: []crypto.PublicKey{pub}}
	tests := []struct {
		name string
		edit func(c *tenancy.VerifierConfig)
	}{
		{"no issuer", func(c *tenancy.VerifierConfig) { c.Issuer = "" }},
		{"no audience", func(c *tenancy.VerifierConfig) { c.Audience = "" }},
		{"no key source", func(c *tenancy.VerifierConfig) { c.PublicKeys = nil }},
		{"two key sources", func(c *tenancy.VerifierConfig) { c.JWKSURL = "https://idp.test/jwks" }},
		{"negative leeway", func(c *tenancy.VerifierConfig) { c.Leeway = -time.Second }},
		{"huge leeway", func(c *tenancy.VerifierConfig) { c.Leeway = time.Hour }},
		{"JWKS over plain http", func(c *tenancy.VerifierConfig) { c.PublicKeys, c.JWKSURL = nil, "http://idp.example.com/jwks" }},
		{"missing key file", func(c *tenancy.VerifierConfig) { c.PublicKeys, c.PublicKeyFile = nil, "/nonexistent/keys.pem" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := ok
			tt.edit(&cfg)
			_, err := tenancy.NewVerifier(t.Context(), cfg)
			require.Error(t, err)
		})
	}
	_, err := tenancy.NewVerifier(t.Context(), ok)
	require.NoError(t, err)
}

func TestVerifyLeewayConfigurable(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	pub, priv := newEd25519(t)
	minter := newMinter(t, priv, clock.Now)
	tok, err := minter.Mint(tenancy.Claims{Tenant: "acme", Subject: "s", Roles: []tenancy.Role{tenancy.RoleClient}}, time.Minute)
	require.NoError(t, err)
	tests := []struct {
		leeway time.Duration
		after  time.Duration
		want   error
	}{
		{0, time.Minute + 29*time.Second, nil}, // default 30s
		{0, time.Minute + 30*time.Second, tenancy.ErrTokenExpired},
		{time.Second, time.Minute + 2*time.Second, tenancy.ErrTokenExpired},
		{2 * time.Minute, time.Minute + 90*time.Second, nil},
	}
	for _, tt := range tests {
		t.Run(tt.leeway.String()+"/"+tt.after.String(), func(t *testing.T) {
			t.Parallel()
			now := func() time.Time { return epoch.Add(tt.after) }
			v, err := tenancy.NewVerifier(t.Context(), tenancy.VerifierConfig{
				Issuer: testIssuer, Audience: testAudience, PublicKeys: []crypto.PublicKey{pub}, Leeway: tt.leeway, Now: now,
			})
			require.NoError(t, err)
			_, err = v.Verify(t.Context(), tok)
			if tt.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.want)
			}
		})
	}
}

// A verified token is remembered, but never past its expiry: the second
// call is answered from memory, and once the token expires it is refused
// like any expired token.
func TestVerifiedTokensExpire(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	pub, priv := newEd25519(t)
	minter := newMinter(t, priv, clock.Now)
	v, err := tenancy.NewVerifier(t.Context(), tenancy.VerifierConfig{
		Issuer: testIssuer, Audience: testAudience, PublicKeys: []crypto.PublicKey{pub}, Now: clock.Now,
	})
	require.NoError(t, err)
	tok, err := minter.Mint(tenancy.Claims{Tenant: "acme", Subject: "s", Roles: []tenancy.Role{tenancy.RoleClient}}, 2*time.Minute)
	require.NoError(t, err)

	first, err := v.Verify(t.Context(), tok)
	require.NoError(t, err)
	again, err := v.Verify(t.Context(), tok)
	require.NoError(t, err)
	require.Equal(t, first, again)
	// Each caller gets its own copy.
	again.Roles = nil
	third, err := v.Verify(t.Context(), tok)
	require.NoError(t, err)
	require.Equal(t, first.Roles, third.Roles)

	clock.Advance(90 * time.Second) // past the cache's minute, within the token's life
	_, err = v.Verify(t.Context(), tok)
	require.NoError(t, err)
	clock.Advance(time.Minute) // past expiry and the 30 s leeway
	_, err = v.Verify(t.Context(), tok)
	require.ErrorIs(t, err, tenancy.ErrTokenExpired)
}
