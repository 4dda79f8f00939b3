package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
)

// errInvalidDefinition: a stored definition no longer parses (a newer engine
// rejects what an older one accepted). The instances pinned to it fail.
var errInvalidDefinition = errors.New("stored definition is invalid")

type definitionKey struct{ tenant, name, version string }

// definitionCache keeps compiled definitions by tenant, name and version.
// Versions are immutable, so entries never go stale; the cache only bounds
// its size, dropping an arbitrary entry when full.
type definitionCache struct {
	store store.Definitions
	size  int

	mu   sync.Mutex
	defs map[definitionKey]*engine.Definition
}

func newDefinitionCache(s store.Definitions, size int) *definitionCache {
	return &definitionCache{store: s, size: size, defs: map[definitionKey]*engine.Definition{}}
}

// get returns the compiled definition: ErrNotFound (wrapped) when none is
// registered, errInvalidDefinition when it does not parse, another error
// when it could not be read.
func (c *definitionCache) get(ctx context.Context, tenant, name, version string) (*engine.Definition, error) {
	key := definitionKey{tenant, name, version}
	c.mu.Lock()
	def, ok := c.defs[key]
	c.mu.Unlock()
	if ok {
		return def, nil
	}
	if version == "" {
		return nil, fmt.Errorf("definition %s without a version: %w", name, store.ErrNotFound)
	}
	stored, err := c.store.GetDefinition(ctx, &store.GetDefinitionParams{TenantID: tenant, Name: name, Version: version})
	if err != nil {
		return nil, err
	}
	def, err = engine.ParseDefinition(stored.Document)
	if err != nil {
		return nil, fmt.Errorf("%w: %s version %s: %v", errInvalidDefinition, name, version, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.defs) >= c.size {
		for k := range c.defs {
			delete(c.defs, k)
			break
		}
	}
	c.defs[key] = def
	return def, nil
}

// policyCache keeps tenants' limits for a while.
type policyCache struct {
	store store.Store
	clock store.Clock
	ttl   time.Duration

	mu       sync.Mutex
	policies map[string]cachedPolicy
}

type cachedPolicy struct {
	policy  store.RetentionPolicy
	limits  tenancy.Limits
	expires time.Time
}

func newPolicyCache(s store.Store, clock store.Clock, ttl time.Duration) *policyCache {
	return &policyCache{store: s, clock: clock, ttl: ttl, policies: map[string]cachedPolicy{}}
}

// retention returns the retention that governs an instance: its own
// override, else its tenant's policy for its name. The policy is read from
// the database, not the cache: a rule set just before a chain runs must
// apply to its next continue-as-new, and this is read only at
// continue-as-new and at a chain's end.
func (c *policyCache) retention(ctx context.Context, tenant, name, instanceID string) (store.Retention, error) {
	inst, err := c.store.GetInstance(ctx, &store.GetInstanceParams{TenantID: tenant, InstanceID: instanceID})
	if err != nil {
		return store.Retention{}, err
	}
	t, err := c.store.GetTenant(ctx, &store.GetTenantParams{TenantID: tenant})
	if err != nil {
		return store.Retention{}, err
	}
	return t.Retention.For(name, inst.Retention), nil
}

// limits returns a tenant's limits.
func (c *policyCache) limits(ctx context.Context, tenant string) (tenancy.Limits, error) {
	p, err := c.tenant(ctx, tenant)
	return p.limits, err
}

// tenant returns a tenant's cached policy and limits, reading them again
// once they are older than the cache's TTL.
func (c *policyCache) tenant(ctx context.Context, tenant string) (cachedPolicy, error) {
	now := c.clock.Now()
	c.mu.Lock()
	p, ok := c.policies[tenant]
	c.mu.Unlock()
	if ok && !now.After(p.expires) {
		return p, nil
	}
	t, err := c.store.GetTenant(ctx, &store.GetTenantParams{TenantID: tenant})
	if err != nil {
		return cachedPolicy{}, err
	}
	// Limits that do not parse fall back to the defaults: a bad row must
	// not stop the tenant's orchestrations.
	limits, err := tenancy.ParseLimits(t.Limits)
	if err != nil {
		limits = tenancy.DefaultLimits()
	}
	p = cachedPolicy{policy: t.Retention, limits: limits.Effective(), expires: now.Add(c.ttl)}
	c.mu.Lock()
	c.policies[tenant] = p
	c.mu.Unlock()
	return p, nil
}
