package api

import (
	"context"
	"time"

	"github.com/maypok86/otter/v2"

	"github.com/orchardhq/orchard/pkg/store"
)

// maxCachedTenants bounds the tenant cache's memory.
const maxCachedTenants = 100_000

// tenantCache keeps tenants' rows for a short while, so that admitting a
// call costs no database round trip. Lookups of unknown tenants are cached
// too (tokens are verified first, so only a signer can name tenants). It
// holds at most maxCachedTenants entries, and concurrent misses of one
// tenant read it once.
type tenantCache struct {
	st    store.Tenants
	cache *otter.Cache[string, cachedTenant]
}

// cachedTenant is a tenant's row, or the error (not found) of its lookup.
type cachedTenant struct {
	t   *store.Tenant
	err error
}

func newTenantCache(st store.Tenants, ttl time.Duration, size int) *tenantCache {
	return &tenantCache{st: st, cache: otter.Must(&otter.Options[string, cachedTenant]{
		MaximumSize:      size,
		ExpiryCalculator: otter.ExpiryWriting[string, cachedTenant](ttl),
	})}
}

// get returns the tenant's row, or an error matching store.ErrNotFound.
func (c *tenantCache) get(ctx context.Context, id string) (*store.Tenant, error) {
	e, err := c.cache.Get(ctx, id, otter.LoaderFunc[string, cachedTenant](func(ctx context.Context, id string) (cachedTenant, error) {
		t, err := c.st.GetTenant(ctx, &store.GetTenantParams{TenantID: id})
		switch {
		case isNotFound(err):
			return cachedTenant{err: err}, nil
		case err != nil:
			return cachedTenant{}, err
		}
		return cachedTenant{t: t}, nil
	}))
	if err != nil {
		return nil, err
	}
	return e.t, e.err
}

// put replaces a tenant's cached row after this server changed it.
func (c *tenantCache) put(t *store.Tenant) {
	c.cache.Set(t.TenantID, cachedTenant{t: t})
}

// forget drops a tenant's cached row.
func (c *tenantCache) forget(id string) {
	c.cache.Invalidate(id)
}

// stop ends the cache's expiry goroutine.
func (c *tenantCache) stop() {
	c.cache.StopAllGoroutines()
}
