package tenancy

import (
	"crypto/sha256"
	"slices"
	"sync"
	"time"
)

// Verified tokens are remembered for a short while, so that a client
// sending the same token with every call pays for one signature check, not
// one per call (an Ed25519 verification is most of a call's overhead).
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

// verifiedCache maps a token's SHA-256 to the identity it proved.
type verifiedCache struct {
	mu      sync.Mutex
	entries map[[32]byte]verifiedToken
}

func (c *verifiedCache) get(token string, now time.Time) (*Identity, bool) {
	key := sha256.Sum256([]byte(token))
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return nil, false
	}
	if !now.Before(e.until) {
		delete(c.entries, key)
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
	key := sha256.Sum256([]byte(token))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[[32]byte]verifiedToken{}
	}
	if len(c.entries) >= verifiedMax {
		// Drop the expired ones; if none, an arbitrary tenth.
		n := 0
		for k, e := range c.entries {
			if !now.Before(e.until) || n < verifiedMax/10 {
				delete(c.entries, k)
				n++
			}
		}
	}
	c.entries[key] = verifiedToken{id: *id, until: until}
}
