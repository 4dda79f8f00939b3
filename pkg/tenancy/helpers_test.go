package tenancy_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/tenancy"
)

const (
	testIssuer   = "https://orchard.test"
	testAudience = "orchard-api"
)

// epoch is the fake clock's start: whole seconds, as JWT times are.
var epoch = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: epoch} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newEd25519(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	return pub, priv
}

func newMinter(t testing.TB, priv ed25519.PrivateKey, now func() time.Time) *tenancy.Minter {
	t.Helper()
	m, err := tenancy.NewMinter(tenancy.MinterConfig{PrivateKey: priv, Issuer: testIssuer, Audience: testAudience, Now: now})
	require.NoError(t, err)
	return m
}

// baseClaims are valid claims at epoch, for tests to alter.
func baseClaims() jwt.MapClaims {
	return jwt.MapClaims{
		"iss":    testIssuer,
		"aud":    []string{testAudience},
		"sub":    "svc-checkout",
		"tenant": "acme",
		"roles":  []string{"client"},
		"iat":    epoch.Unix(),
		"nbf":    epoch.Unix(),
		"exp":    epoch.Add(time.Hour).Unix(),
	}
}

// sign signs claims with any method and key, setting kid when not empty.
func sign(t testing.TB, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}
