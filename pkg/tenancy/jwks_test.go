package tenancy_test

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/tenancy"
)

// jwksServer serves a JWKS that tests can replace, and counts fetches.
type jwksServer struct {
	*httptest.Server
	set     atomic.Pointer[[]byte]
	fetches atomic.Int64
}

func newJWKSServer(t *testing.T, tls bool, keys ...crypto.PublicKey) *jwksServer {
	t.Helper()
	s := &jwksServer{}
	s.serve(t, keys...)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.fetches.Add(1)
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(*s.set.Load())
	})
	if tls {
		s.Server = httptest.NewTLSServer(h)
	} else {
		s.Server = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) serve(t *testing.T, keys ...crypto.PublicKey) {
	t.Helper()
	set, err := tenancy.JWKS(keys...)
	require.NoError(t, err)
	s.set.Store(&set)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestJWKSRotation(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	pub1, priv1 := newEd25519(t)
	pub2, priv2 := newEd25519(t)
	srv := newJWKSServer(t, true, pub1)

	v, err := tenancy.NewVerifier(t.Context(), tenancy.VerifierConfig{
		Issuer: testIssuer, Audience: testAudience, Now: clock.Now,
		JWKSURL:    srv.URL + "/.well-known/jwks.json",
		HTTPClient: srv.Client(),
		// Only the unknown-kid refresh runs in this test, once.
		JWKSRefreshInterval:  time.Hour,
		JWKSUnknownKIDPeriod: time.Hour,
		Logger:               quietLogger(),
	})
	require.NoError(t, err)
	require.EqualValues(t, 1, srv.fetches.Load(), "keys fetched at start")

	claims := tenancy.Claims{Tenant: "acme", Subject: "svc", Roles: []tenancy.Role{tenancy.RoleClient}}
	tok1, err := newMinter(t, priv1, clock.Now).Mint(claims, time.Hour)
	require.NoError(t, err)
	tok2, err := newMinter(t, priv2, clock.Now).Mint(claims, time.Hour)
	require.NoError(t, err)

	id, err := v.Verify(t.Context(), tok1)
	require.NoError(t, err)
	require.Equal(t, "acme", id.Tenant)
	require.EqualValues(t, 1, srv.fetches.Load(), "a known kid needs no fetch")

	// The identity provider rotates to key 2 and drops key 1.
	srv.serve(t, pub2)
	_, err = v.Verify(t.Context(), tok2)
	require.NoError(t, err, "an unknown kid refreshes the set")
	require.EqualValues(t, 2, srv.fetches.Load())

	// Key 1 is gone after the refresh, and the next unknown kid finds the
	// refresh budget spent: refused at once, without another fetch.
	_, err = v.Verify(t.Context(), tok1)
	require.ErrorIs(t, err, tenancy.ErrUnauthenticated)
	require.ErrorIs(t, err, tenancy.ErrTokenKey)
	forged := sign(t, jwt.SigningMethodEdDSA, priv2, "no-such-kid", baseClaims())
	_, err = v.Verify(t.Context(), forged)
	require.ErrorIs(t, err, tenancy.ErrTokenKey)
	require.NotContains(t, err.Error(), "no-such-kid", "kid is token content")
	require.EqualValues(t, 2, srv.fetches.Load())

	// Key 2 goes on working from the cache.
	_, err = v.Verify(t.Context(), tok2)
	require.NoError(t, err)
}

func TestJWKSVerify(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	edPub, edPriv := newEd25519(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	rsaKid, err := tenancy.KeyID(&rsaKey.PublicKey)
	require.NoError(t, err)
	edKid, err := tenancy.KeyID(edPub)
	require.NoError(t, err)

	tests := []struct {
		name  string
		tls   bool
		algs  []string
		token string
		want  error
	}{
		{name: "EdDSA over http on loopback", token: sign(t, jwt.SigningMethodEdDSA, edPriv, edKid, baseClaims())},
		{name: "EdDSA without kid tries every key", tls: true, token: sign(t, jwt.SigningMethodEdDSA, edPriv, "", baseClaims())},
		{name: "RS256 when configured", tls: true, algs: []string{tenancy.AlgEdDSA, tenancy.AlgRS256},
			token: sign(t, jwt.SigningMethodRS256, rsaKey, rsaKid, baseClaims())},
		{name: "RS256 key published but not configured", tls: true,
			token: sign(t, jwt.SigningMethodRS256, rsaKey, rsaKid, baseClaims()), want: tenancy.ErrTokenAlgorithm},
		{name: "EdDSA token naming the RSA kid", tls: true, algs: []string{tenancy.AlgEdDSA, tenancy.AlgRS256},
			token: sign(t, jwt.SigningMethodEdDSA, edPriv, rsaKid, baseClaims()), want: tenancy.ErrTokenKey},
		{name: "expired", tls: true, token: sign(t, jwt.SigningMethodEdDSA, edPriv, edKid, func() jwt.MapClaims {
			c := baseClaims()
			c["exp"] = epoch.Add(-time.Hour).Unix()
			return c
		}()), want: tenancy.ErrTokenExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newJWKSServer(t, tt.tls, edPub, &rsaKey.PublicKey)
			v, err := tenancy.NewVerifier(t.Context(), tenancy.VerifierConfig{
				Issuer: testIssuer, Audience: testAudience, Algorithms: tt.algs, Now: clock.Now,
				JWKSURL: srv.URL, HTTPClient: srv.Client(), Logger: quietLogger(),
			})
			require.NoError(t, err)
			id, err := v.Verify(t.Context(), tt.token)
			if tt.want != nil {
				require.ErrorIs(t, err, tenancy.ErrUnauthenticated)
				require.ErrorIs(t, err, tt.want)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "acme", id.Tenant)
		})
	}
}
