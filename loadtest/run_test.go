package loadtest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDriveOffersAnOnOffLoadInItsOnWindowsOnly: arrivals already due when
// Drive starts all run at once, so the open loop's schedule is read with
// no waiting.
func TestDriveOffersAnOnOffLoadInItsOnWindowsOnly(t *testing.T) {
	t.Parallel()
	t0 := time.Now().Add(-time.Minute)
	l := &LoadPlan{Rate: 10, MaxInFlight: 100, OnOff: true, cycle: 2 * time.Second}
	var mu sync.Mutex
	var dues []time.Duration
	Drive(context.Background(), l, t0, t0.Add(10*time.Second), func(_ int64, due time.Time) {
		mu.Lock()
		defer mu.Unlock()
		dues = append(dues, due.Sub(t0))
	})
	require.Len(t, dues, 40, "10/s in [2s, 4s) and [6s, 8s)")
	for _, d := range dues {
		require.True(t, (d >= 2*time.Second && d < 4*time.Second) || (d >= 6*time.Second && d < 8*time.Second), "due at %v", d)
	}

	var steady atomic.Int64
	l.OnOff = false
	Drive(context.Background(), l, t0, t0.Add(10*time.Second), func(int64, time.Time) { steady.Add(1) })
	require.Equal(t, int64(100), steady.Load(), "a load that is not on/off runs throughout")
}

func TestDriveRunsAClosedOnOffLoadOnlyWhileOn(t *testing.T) {
	t.Parallel()
	l := &LoadPlan{InFlight: 2, OnOff: true, cycle: time.Hour}
	// Half an hour into its first window, which is off: nothing runs
	// before the run's end.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var calls atomic.Int64
	Drive(ctx, l, time.Now().Add(-30*time.Minute), time.Now().Add(time.Hour), func(int64, time.Time) { calls.Add(1) })
	require.Zero(t, calls.Load())

	// Half an hour into its second, which is on: it runs until stopped.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	Drive(ctx, l, time.Now().Add(-90*time.Minute), time.Now().Add(time.Hour), func(int64, time.Time) {
		if calls.Add(1) >= 5 {
			cancel()
		}
	})
	require.GreaterOrEqual(t, calls.Load(), int64(5))
}
