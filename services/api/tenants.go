package api

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
)

// tenantRecord is a tenant's row with its limits parsed.
type tenantRecord struct {
	*store.Tenant
	limits tenancy.Limits
}

// tenantCache keeps tenants' rows for a short while, so that admitting a
// call costs no database round trip. Lookups of unknown tenants are cached
// too (tokens are verified first, so only a signer can name tenants).
type tenantCache struct {
	st  store.Tenants
	ttl time.Duration
	log *slog.Logger

	mu sync.Mutex
	m  map[string]cachedTenant
}

type cachedTenant struct {
	rec     *tenantRecord
	err     error
	expires time.Time
}

func newTenantCache(st store.Tenants, ttl time.Duration, log *slog.Logger) *tenantCache {
	return &tenantCache{st: st, ttl: ttl, log: log, m: map[string]cachedTenant{}}
}

// get returns the tenant's record, or an error matching store.ErrNotFound.
func (c *tenantCache) get(ctx context.Context, id string) (*tenantRecord, error) {
	now := time.Now()
	c.mu.Lock()
	e, ok := c.m[id]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.rec, e.err
	}
	t, err := c.st.GetTenant(ctx, &store.GetTenantParams{TenantID: id})
	if err != nil && !isNotFound(err) {
		return nil, err
	}
	var rec *tenantRecord
	if err == nil {
		rec = c.record(ctx, t)
	}
	c.mu.Lock()
	c.m[id] = cachedTenant{rec: rec, err: err, expires: now.Add(c.ttl)}
	c.mu.Unlock()
	return rec, err
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
	rec := c.record(ctx, t)
	c.mu.Lock()
	c.m[t.TenantID] = cachedTenant{rec: rec, expires: time.Now().Add(c.ttl)}
	c.mu.Unlock()
}

// forget drops a tenant's cached row.
func (c *tenantCache) forget(id string) {
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}
