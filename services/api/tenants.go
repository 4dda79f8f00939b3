package api

import (
	"context"
	"log/slog"
	"time"

	"github.com/maypok86/otter/v2"

	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
)

// tenantRecord is a tenant's row with its limits parsed.
type tenantRecord struct {
	*store.Tenant
	limits tenancy.Limits
}

// maxCachedTenants bounds the tenant cache's memory.
const maxCachedTenants = 100_000

// tenantCache keeps tenants' rows for a short while, so that admitting a
// call costs no database round trip. Lookups of unknown tenants are cached
// too (tokens are verified first, so only a signer can name tenants). It
// holds at most maxCachedTenants entries, and concurrent misses of one
// tenant read it once.
type tenantCache struct {
	st    store.Tenants
	log   *slog.Logger
	cache *otter.Cache[string, cachedTenant]
}

// cachedTenant is a tenant's record, or the error (not found) of its lookup.
type cachedTenant struct {
	rec *tenantRecord
	err error
}

func newTenantCache(st store.Tenants, ttl time.Duration, size int, log *slog.Logger) *tenantCache {
	return &tenantCache{st: st, log: log, cache: otter.Must(&otter.Options[string, cachedTenant]{
		MaximumSize:      size,
		ExpiryCalculator: otter.ExpiryWriting[string, cachedTenant](ttl),
	})}
}

// get returns the tenant's record, or an error matching store.ErrNotFound.
func (c *tenantCache) get(ctx context.Context, id string) (*tenantRecord, error) {
	e, err := c.cache.Get(ctx, id, otter.LoaderFunc[string, cachedTenant](func(ctx context.Context, id string) (cachedTenant, error) {
		t, err := c.st.GetTenant(ctx, &store.GetTenantParams{TenantID: id})
		switch {
		case isNotFound(err):
			return cachedTenant{err: err}, nil
		case err != nil:
			return cachedTenant{}, err
		}
		return cachedTenant{rec: c.record(ctx, t)}, nil
	}))
	if err != nil {
		return nil, err
	}
	return e.rec, e.err
}

// record parses a tenant's stored limits; limits that do not parse (they
// bypassed validation) are logged and replaced by the defaults.
func (c *tenantCache) record(ctx context.Context, t *store.Tenant) *tenantRecord {
	limits, err := tenancy.ParseLimits(t.Limits)
	if err != nil {
		c.log.WarnContext(ctx, "api: tenant's stored limits are invalid: using the defaults",
			slog.String("tenant", t.TenantID), slog.Any("error", err))
	}
	return &tenantRecord{Tenant: t, limits: limits}
}

// put replaces a tenant's cached row after this server changed it.
func (c *tenantCache) put(ctx context.Context, t *store.Tenant) {
	c.cache.Set(t.TenantID, cachedTenant{rec: c.record(ctx, t)})
}

// forget drops a tenant's cached row.
func (c *tenantCache) forget(id string) {
	c.cache.Invalidate(id)
}

// stop ends the cache's expiry goroutine.
func (c *tenantCache) stop() {
	c.cache.StopAllGoroutines()
}
