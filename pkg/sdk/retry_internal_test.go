package sdk

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
)

// TestRateLimitWaitsGrowFromTheHint: the first retry after a rate limit
// waits the hint and at most half again; each further refusal of the same
// call doubles that, up to MaxBackoff.
func TestRateLimitWaitsGrowFromTheHint(t *testing.T) {
	t.Parallel()
	hint := 2 * time.Millisecond
	p := RetryPolicy{MaxAttempts: 40, MaxBackoff: time.Second}.withDefaults()
	w := p.waits()
	refused := &Error{Code: connect.CodeResourceExhausted, RetryAfter: hint}
	for n := 1; n < p.MaxAttempts; n++ {
		low := min(hint<<min(n-1, 16), p.MaxBackoff)
		wait, ok := w.retryWait(n, refused, notIdempotent)
		require.True(t, ok, "attempt %d", n)
		require.GreaterOrEqual(t, wait, low, "attempt %d", n)
		require.LessOrEqual(t, wait, min(low+low/2, p.MaxBackoff), "attempt %d", n)
	}
	_, ok := w.retryWait(p.MaxAttempts, refused, notIdempotent)
	require.False(t, ok, "attempts are bounded")
}
