package tenancy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/tenancy"
)

func TestRateLimiterTripsAndRecovers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		rate      tenancy.Rate
		wantRetry time.Duration
	}{
		{"10 per second, burst 3", tenancy.Rate{PerSecond: 10, Burst: 3}, 100 * time.Millisecond},
		{"half per second, burst 1", tenancy.Rate{PerSecond: 0.5, Burst: 1}, 2 * time.Second},
		// A token every 333.3 ms: the hint is rounded up to the millisecond.
		{"3 per second, burst 1", tenancy.Rate{PerSecond: 3, Burst: 1}, 334 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock()
			rl := tenancy.NewRateLimiter(tenancy.RateLimiterConfig{Now: clock.Now})
			burst := tt.rate.Burst
			for i := range burst {
				require.NoError(t, rl.Allow("acme", tt.rate), "request %d within burst", i)
			}
			err := rl.Allow("acme", tt.rate)
			require.ErrorIs(t, err, tenancy.ErrResourceExhausted)
			var ex *tenancy.ExhaustedError
			require.ErrorAs(t, err, &ex)
			require.Equal(t, tenancy.ResourceRequests, ex.Resource)
			require.Equal(t, int64(burst), ex.Limit)
			require.Equal(t, tt.wantRetry, ex.RetryAfter)

			// Just before the hint, still refused; at it, allowed again.
			clock.Advance(ex.RetryAfter - time.Millisecond)
			require.ErrorIs(t, rl.Allow("acme", tt.rate), tenancy.ErrResourceExhausted)
			clock.Advance(time.Millisecond)
			require.NoError(t, rl.Allow("acme", tt.rate))
			require.ErrorIs(t, rl.Allow("acme", tt.rate), tenancy.ErrResourceExhausted)
		})
	}
}

func TestRateLimiterPerTenant(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	rl := tenancy.NewRateLimiter(tenancy.RateLimiterConfig{Now: clock.Now})
	tight := tenancy.Rate{PerSecond: 1, Burst: 2}
	loose := tenancy.Rate{PerSecond: 1, Burst: 5}

	require.NoError(t, rl.Allow("noisy", tight))
	require.NoError(t, rl.Allow("noisy", tight))
	require.ErrorIs(t, rl.Allow("noisy", tight), tenancy.ErrResourceExhausted)

	// Another tenant is untouched by the first one's exhaustion.
	for range 5 {
		require.NoError(t, rl.Allow("quiet", loose))
	}
	require.ErrorIs(t, rl.Allow("quiet", loose), tenancy.ErrResourceExhausted)
	require.ErrorIs(t, rl.Allow("noisy", tight), tenancy.ErrResourceExhausted)
	require.Equal(t, 2, rl.Len())
}

func TestRateLimiterLimitsChange(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	rl := tenancy.NewRateLimiter(tenancy.RateLimiterConfig{Now: clock.Now})
	before := tenancy.Rate{PerSecond: 1, Burst: 1}
	require.NoError(t, rl.Allow("acme", before))
	err := rl.Allow("acme", before)
	var ex *tenancy.ExhaustedError
	require.ErrorAs(t, err, &ex)
	require.Equal(t, time.Second, ex.RetryAfter)

	// The admin raises the rate tenfold: the same bucket refills faster.
	after := tenancy.Rate{PerSecond: 10, Burst: 1}
	err = rl.Allow("acme", after)
	require.ErrorAs(t, err, &ex)
	require.Equal(t, 100*time.Millisecond, ex.RetryAfter)
	clock.Advance(100 * time.Millisecond)
	require.NoError(t, rl.Allow("acme", after))

	// A larger burst fills over time, up to the new size: tokens saved
	// before the change were capped by the old burst.
	bigger := tenancy.Rate{PerSecond: 10, Burst: 4}
	clock.Advance(time.Second)
	require.NoError(t, rl.Allow("acme", bigger))
	require.ErrorIs(t, rl.Allow("acme", bigger), tenancy.ErrResourceExhausted)
	clock.Advance(time.Second)
	for range 4 {
		require.NoError(t, rl.Allow("acme", bigger))
	}
	require.ErrorIs(t, rl.Allow("acme", bigger), tenancy.ErrResourceExhausted)
}

func TestRateLimiterEvictsIdleTenants(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	rl := tenancy.NewRateLimiter(tenancy.RateLimiterConfig{Now: clock.Now, IdleAfter: time.Minute})
	fast := tenancy.Rate{PerSecond: 100, Burst: 1}
	slow := tenancy.Rate{PerSecond: 0.001, Burst: 1} // refills in 1000s

	for i := range 50 {
		require.NoError(t, rl.Allow(fmt.Sprintf("t%d", i), fast))
	}
	require.NoError(t, rl.Allow("slow", slow))
	require.Equal(t, 51, rl.Len())

	// After IdleAfter, the next request sweeps the idle tenants whose bucket
	// is full again; "slow" is idle but still owes tokens, so it stays and
	// stays limited.
	clock.Advance(2 * time.Minute)
	require.NoError(t, rl.Allow("active", fast))
	require.Equal(t, 2, rl.Len())
	require.ErrorIs(t, rl.Allow("slow", slow), tenancy.ErrResourceExhausted)

	clock.Advance(1000 * time.Second)
	require.NoError(t, rl.Allow("slow", slow))
}

func TestRateLimiterMaxTenants(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	rl := tenancy.NewRateLimiter(tenancy.RateLimiterConfig{Now: clock.Now, MaxTenants: 3})
	l := tenancy.Rate{PerSecond: 1, Burst: 1}
	for i := range 10 {
		clock.Advance(time.Millisecond)
		require.NoError(t, rl.Allow(fmt.Sprintf("t%d", i), l))
		require.LessOrEqual(t, rl.Len(), 3)
	}
	// The most recent tenants are kept: t9 is still limited.
	require.ErrorIs(t, rl.Allow("t9", l), tenancy.ErrResourceExhausted)
}

func TestRateLimiterConcurrent(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	rl := tenancy.NewRateLimiter(tenancy.RateLimiterConfig{Now: clock.Now})
	l := tenancy.Rate{PerSecond: 1, Burst: 100}
	errs := make(chan error, 400)
	for g := range 4 {
		go func() {
			for range 100 {
				errs <- rl.Allow(fmt.Sprintf("t%d", g%2), l)
			}
		}()
	}
	allowed := 0
	for range 400 {
		if <-errs == nil {
			allowed++
		}
	}
	require.Equal(t, 200, allowed, "exactly the burst of each of the two tenants")
}

// TestRateLimiterSpreadsRefusedCallers: requests refused one after another
// are told to come back a token apart, not all at the next token, up to the
// time the bucket takes to fill; once those times have passed, a refusal's
// hint is the next token again.
func TestRateLimiterSpreadsRefusedCallers(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	rl := tenancy.NewRateLimiter(tenancy.RateLimiterConfig{Now: clock.Now})
	r := tenancy.Rate{PerSecond: 10, Burst: 3}
	retryAfter := func() time.Duration {
		t.Helper()
		var ex *tenancy.ExhaustedError
		require.ErrorAs(t, rl.Allow("acme", r), &ex)
		return ex.RetryAfter
	}
	for range 3 {
		require.NoError(t, rl.Allow("acme", r))
	}
	var hints []time.Duration
	for range 5 {
		hints = append(hints, retryAfter())
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{100 * ms, 200 * ms, 300 * ms, 300 * ms, 300 * ms}, hints)

	// The first caller back finds its token.
	clock.Advance(100 * ms)
	require.NoError(t, rl.Allow("acme", r))
	clock.Advance(time.Second)
	for range 3 {
		require.NoError(t, rl.Allow("acme", r))
	}
	require.Equal(t, 100*ms, retryAfter())
}
