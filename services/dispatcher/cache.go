package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/store"
)

// errInvalidDefinition: a stored definition no longer parses (a newer engine
// rejects what an older one accepted). The instances pinned to it fail.
var errInvalidDefinition = errors.New("stored definition is invalid")

type definitionKey struct{ tenant, name, version string }

// definitionCache keeps compiled definitions by tenant, name and version.
// Versions are immutable, so entries never go stale; the cache only bounds
// its size. Concurrent misses of one version read and compile it once.
type definitionCache struct {
	store store.Definitions
	defs  *otter.Cache[definitionKey, *engine.Definition]
}

func newDefinitionCache(s store.Definitions, size int) *definitionCache {
	return &definitionCache{store: s, defs: otter.Must(&otter.Options[definitionKey, *engine.Definition]{MaximumSize: size})}
}

// get returns the compiled definition: ErrNotFound (wrapped) when none is
// registered, errInvalidDefinition when it does not parse, another error
// when it could not be read.
func (c *definitionCache) get(ctx context.Context, tenant, name, version string) (*engine.Definition, error) {
	if version == "" {
		return nil, fmt.Errorf("definition %s without a version: %w", name, store.ErrNotFound)
	}
	return c.defs.Get(ctx, definitionKey{tenant, name, version}, otter.LoaderFunc[definitionKey, *engine.Definition](
		func(ctx context.Context, k definitionKey) (*engine.Definition, error) {
			stored, err := c.store.GetDefinition(ctx, &store.GetDefinitionParams{TenantID: k.tenant, Name: k.name, Version: k.version})
			if err != nil {
				return nil, err
			}
			def, err := engine.ParseDefinition(stored.Document)
			if err != nil {
				return nil, fmt.Errorf("%w: %s version %s: %v", errInvalidDefinition, k.name, k.version, err)
			}
			return def, nil
		}))
}

// maxCachedTenants bounds the memory of a dispatcher's tenant limits.
const maxCachedTenants = 100_000

// policyCache keeps tenants' limits for a while, at most maxCachedTenants
// of them; concurrent misses of one tenant read it once.
type policyCache struct {
	store  store.Store
	limits *otter.Cache[string, store.Limits]
}

func newPolicyCache(s store.Store, ttl time.Duration) *policyCache {
	return &policyCache{store: s, limits: otter.Must(&otter.Options[string, store.Limits]{
		MaximumSize:      maxCachedTenants,
		ExpiryCalculator: otter.ExpiryWriting[string, store.Limits](ttl),
	})}
}

// tenantLimits returns a tenant's limits in force, read again once they are
// older than the cache's TTL.
func (c *policyCache) tenantLimits(ctx context.Context, tenant string) (store.Limits, error) {
	return c.limits.Get(ctx, tenant, otter.LoaderFunc[string, store.Limits](func(ctx context.Context, tenant string) (store.Limits, error) {
		t, err := c.store.GetTenant(ctx, &store.GetTenantParams{TenantID: tenant})
		if err != nil {
			return store.Limits{}, err
		}
		return t.Limits.Effective(), nil
	}))
}

// stop ends the caches' expiry goroutines.
func (c *policyCache) stop() { c.limits.StopAllGoroutines() }

// aheadBytes bounds the memory of a dispatcher's items ahead, by their
// histories' payloads; an item of more than a sixteenth of it is not kept.
const aheadBytes = 32 << 20

type instanceKey struct{ tenant, instance string }

// aheadCache keeps, for the instances this dispatcher's acks left running,
// the item of their next turn but for its messages (store.Next), for the
// completions of this process to run that turn before their write
// (store.EagerLease.Ahead). An item is given once: the turn it serves
// leaves the next one, and a turn that did not run from it (another
// message came first, or another process took the instance) leaves this
// one stale, which the store finds out (the turn is then void).
type aheadCache struct {
	items *otter.Cache[instanceKey, *store.OrchestrationItem]
}

func newAheadCache() *aheadCache {
	return &aheadCache{items: otter.Must(&otter.Options[instanceKey, *store.OrchestrationItem]{
		MaximumWeight: aheadBytes,
		Weigher:       func(_ instanceKey, it *store.OrchestrationItem) uint32 { return uint32(itemBytes(it)) },
	})}
}

// itemBytes is about what an item holds in memory.
func itemBytes(it *store.OrchestrationItem) int {
	n := 256 + len(it.Instance.Input)
	for _, ev := range it.History {
		n += 64 + len(ev.Kind) + len(ev.Payload)
	}
	return n
}

// put keeps the next turn's item of a turn whose ack committed (ack.Acked),
// fetched as it.
func (c *aheadCache) put(it *store.OrchestrationItem, ack *store.AckOrchestrationItemParams) {
	if c == nil {
		return
	}
	key := instanceKey{it.Lease.TenantID, it.Lease.InstanceID}
	next, ok := ack.Next(it)
	if !ok || itemBytes(next) > aheadBytes/16 {
		c.items.Invalidate(key)
		return
	}
	c.items.Set(key, next)
}

// take gives the item kept for an instance on its execution, once.
func (c *aheadCache) take(tenant, instance string, execution int64) *store.OrchestrationItem {
	if c == nil {
		return nil
	}
	it, ok := c.items.Invalidate(instanceKey{tenant, instance})
	if !ok || it.Instance.CurrentExecutionID != execution {
		return nil
	}
	return it
}

// drop forgets an instance.
func (c *aheadCache) drop(tenant, instance string) {
	if c != nil {
		c.items.Invalidate(instanceKey{tenant, instance})
	}
}
