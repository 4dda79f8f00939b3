package api

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
)

func TestLimitChecks(t *testing.T) {
	t.Parallel()
	l := store.Limits{MaxPayloadBytes: 100}
	tests := []struct {
		name     string
		err      error
		resource string // empty: allowed
		limit    int64
	}{
		{"payload at limit", checkPayload(l, 100), "", 0},
		{"payload over limit", checkPayload(l, 101), tenancy.ResourcePayloadBytes, 100},
		{"default payload limit", checkPayload(store.Limits{}, 1<<20+1), tenancy.ResourcePayloadBytes, 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.resource == "" {
				require.NoError(t, tt.err)
				return
			}
			require.ErrorIs(t, tt.err, tenancy.ErrResourceExhausted)
			var ex *tenancy.ExhaustedError
			require.ErrorAs(t, tt.err, &ex)
			require.Equal(t, tt.resource, ex.Resource)
			require.Equal(t, tt.limit, ex.Limit)
			require.Zero(t, ex.RetryAfter)
		})
	}
	require.Equal(t, tenancy.Rate{PerSecond: 100, Burst: 200}, requestRate(store.Limits{}))
	require.Equal(t, tenancy.Rate{PerSecond: 5, Burst: 200}, requestRate(store.Limits{RequestsPerSecond: 5, Burst: -1}))
}
