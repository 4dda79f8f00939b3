package api

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
)

// countingTenants counts the tenant reads that reach the store.
type countingTenants struct {
	store.Tenants
	reads atomic.Int64
}

func (c *countingTenants) GetTenant(ctx context.Context, p *store.GetTenantParams) (*store.Tenant, error) {
	c.reads.Add(1)
	return c.Tenants.GetTenant(ctx, p)
}

// Lookups of ever new tenant names (unknown ones are cached too) keep the
// cache at its size; concurrent misses of one tenant read it once.
func TestTenantCacheIsBoundedAndReadsOnce(t *testing.T) {
	t.Parallel()
	st := &countingTenants{Tenants: crdb.New(testdb.Pool(t, 8), crdb.Options{})}
	require.NoError(t, st.Tenants.(*crdb.Store).CreateTenant(t.Context(), &store.CreateTenantParams{TenantID: "acme"}))
	const size = 50
	c := newTenantCache(st, time.Minute, size)
	defer c.stop()

	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			rec, err := c.get(t.Context(), "acme")
			if err == nil && rec.TenantID != "acme" {
				err = fmt.Errorf("got tenant %q", rec.TenantID)
			}
			require.NoError(t, err)
		})
	}
	wg.Wait()
	require.EqualValues(t, 1, st.reads.Load(), "20 concurrent lookups of one tenant read it once")

	for i := range 10 * size {
		_, err := c.get(t.Context(), fmt.Sprintf("unknown-%d", i))
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	c.cache.CleanUp()
	require.LessOrEqual(t, c.cache.EstimatedSize(), size)
}
