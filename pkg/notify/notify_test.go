package notify

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// woken says which subscriptions hold a hint, consuming them.
func woken(subs ...*Subscription) []bool {
	out := make([]bool, len(subs))
	for i, s := range subs {
		select {
		case <-s.C:
			out[i] = true
		default:
		}
	}
	return out
}

func TestTaskHintsWakeOnePollerEach(t *testing.T) {
	t.Parallel()
	l := NewLocal()
	q := Topic{Kind: Tasks, TenantID: "a", Key: "q"}
	s1, s2, other := l.Subscribe(q), l.Subscribe(q), l.Subscribe(Topic{Kind: Tasks, TenantID: "b", Key: "q"})
	l.Notify(t.Context(), q)
	got := woken(s1, s2, other)
	require.Equal(t, 1, count(got), "one task, one poller: %v", got)
	require.False(t, got[2], "another tenant's queue hears nothing")
	l.Notify(t.Context(), q, q)
	require.Equal(t, []bool{true, true, false}, woken(s1, s2, other), "two tasks, two pollers")
	l.Notify(t.Context(), q, q, q)
	require.Equal(t, []bool{true, true, false}, woken(s1, s2, other), "three tasks: every poller, once")
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func TestAnUnconsumedHintPassesOnAtClose(t *testing.T) {
	t.Parallel()
	l := NewLocal()
	q := Topic{Kind: Tasks, TenantID: "a", Key: "q"}
	s1 := l.Subscribe(q)
	l.Notify(t.Context(), q)
	s2 := l.Subscribe(q)
	// s1 found the task on its own and leaves with the hint unread.
	s1.Close()
	require.Equal(t, []bool{true}, woken(s2))
	s2.Close()
	require.Zero(t, l.Subscribers())
	var none *Subscription
	none.Close() // a nil subscription closes as nothing
}

func TestEndedHintsWakeEveryWaiterOfTheInstance(t *testing.T) {
	t.Parallel()
	l := NewLocal()
	i := Topic{Kind: Ended, TenantID: "a", Key: "i-1"}
	s1, s2, other := l.Subscribe(i), l.Subscribe(i), l.Subscribe(Topic{Kind: Ended, TenantID: "a", Key: "i-2"})
	l.Notify(t.Context(), i)
	require.Equal(t, []bool{true, true, false}, woken(s1, s2, other))
}

func TestAWildcardHearsEveryTenant(t *testing.T) {
	t.Parallel()
	l := NewLocal()
	all, a := l.Subscribe(Topic{Kind: Orchestrations}), l.Subscribe(Topic{Kind: Orchestrations, TenantID: "a"})
	l.Notify(t.Context(), Topic{Kind: Orchestrations, TenantID: "b"})
	require.Equal(t, []bool{true, false}, woken(all, a))
	l.Notify(t.Context(), Topic{Kind: Orchestrations, TenantID: "a"})
	require.Equal(t, []bool{true, true}, woken(all, a))
	l.Notify(t.Context())
	require.Equal(t, []bool{false, false}, woken(all, a))
}
