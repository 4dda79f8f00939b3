package tenancy

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The verified-token cache holds at most verifiedMax tokens, however many
// distinct valid ones arrive.
func TestVerifiedCacheIsBounded(t *testing.T) {
	t.Parallel()
	c := newVerifiedCache()
	now := time.Now()
	id := &Identity{Tenant: "acme", Subject: "s", Roles: []Role{RoleClient}, ExpiresAt: now.Add(time.Hour)}
	for i := range 3 * verifiedMax {
		c.put(fmt.Sprintf("token-%d", i), id, now)
	}
	c.entries.CleanUp()
	require.LessOrEqual(t, c.len(), verifiedMax)
	require.Positive(t, c.len())
}

// A caller that sends a million distinct bad tokens leaves nothing behind:
// no token that fails verification is remembered, and the heap does not grow
// with their number.
func TestDistinctBadTokensDoNotGrowMemory(t *testing.T) {
	t.Parallel()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	v, err := NewVerifier(t.Context(), VerifierConfig{Issuer: "https://orchard.test", Audience: "orchard", PublicKeys: []crypto.PublicKey{pub}})
	require.NoError(t, err)

	// A well-formed token signed with an algorithm the verifier refuses,
	// naming another tenant each time: it is parsed, then turned away.
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	sig := base64.RawURLEncoding.EncodeToString(make([]byte, 32))
	bad := func(i int) string {
		claims := fmt.Sprintf(`{"iss":"https://orchard.test","aud":"orchard","sub":"s","tenant":"t%d","roles":["client"],"exp":%d}`,
			i, time.Now().Add(time.Hour).Unix())
		return header + "." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + "." + sig
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	n := 1_000_000
	if raceEnabled {
		n = 50_000 // the same path, within the suite's time
	}
	for i := range 1000 { // warm up
		_, err := v.Verify(t.Context(), bad(i))
		require.ErrorIs(t, err, ErrUnauthenticated)
	}
	before := heap()
	for i := range n {
		if _, err := v.Verify(t.Context(), bad(i)); err == nil {
			t.Fatalf("bad token %d verified", i)
		}
	}
	after := heap()
	require.Zero(t, v.verified.len(), "no bad token is remembered")
	// An entry per token would be tens of bytes each: tens of MB.
	require.Less(t, int64(after)-int64(before), int64(2<<20), "heap grew from %d to %d bytes over %d tokens", before, after, n)
}
