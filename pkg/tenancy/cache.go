package tenancy

import (
	"crypto/sha256"
	"slices"
	"time"

	"github.com/maypok86/otter/v2"
)

// Verified tokens are remembered for a short while, so that a client
// sending the same token with every call pays for one signature check, not
// one per call (an Ed25519 verification is most of a call's overhead).
// Tokens that fail verification are never remembered, so a caller sending
// endless distinct bad tokens costs CPU but no memory.
const (
	// verifiedTTL bounds how long a verified token is trusted without a
	// new check; a token never outlives its own expiry in the cache. Only
	// verifiers with fixed keys (PEM, given keys) remember tokens.
	verifiedTTL = time.Minute
	// verifiedMax bounds the cache's memory.
	verifiedMax = 10_000
)

type verifiedToken struct {
	id    Identity
	until time.Time
}

// verifiedCache maps a token's SHA-256 to the identity it proved, for at
// most verifiedMax tokens.
type verifiedCache struct {
	entries *otter.Cache[[32]byte, verifiedToken]
}

func newVerifiedCache() verifiedCache {
	return verifiedCache{entries: otter.Must(&otter.Options[[32]byte, verifiedToken]{
		MaximumSize: verifiedMax,
		// A memory bound on the wall clock; until, on the verifier's
		// clock, decides whether an entry still holds.
		ExpiryCalculator: otter.ExpiryWriting[[32]byte, verifiedToken](verifiedTTL),
	})}
}

func (c *verifiedCache) get(token string, now time.Time) (*Identity, bool) {
	key := sha256.Sum256([]byte(token))
	e, ok := c.entries.GetIfPresent(key)
	if !ok {
		return nil, false
	}
	if !now.Before(e.until) {
		c.entries.Invalidate(key)
		return nil, false
	}
	id := e.id
	id.Roles = slices.Clone(id.Roles)
	return &id, true
}

func (c *verifiedCache) put(token string, id *Identity, now time.Time) {
	until := now.Add(verifiedTTL)
	if id.ExpiresAt.Before(until) {
		until = id.ExpiresAt
	}
	c.entries.Set(sha256.Sum256([]byte(token)), verifiedToken{id: *id, until: until})
}

// len is the number of tokens remembered, for tests.
func (c *verifiedCache) len() int { return c.entries.EstimatedSize() }
