package api

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/notify"
)

// The end watches are bounded in number and age, a watch is taken once,
// and stop closes what is left; every subscription closed is one the
// notifier no longer holds.
func TestEndWatchesBounds(t *testing.T) {
	t.Parallel()
	hub := notify.NewLocal()
	w := newEndWatches(hub, time.Hour, 2)
	for _, id := range []string{"a", "b", "c"} {
		w.keep("t", id, w.watch("t", id))
	}
	require.Equal(t, 2, w.len(), "past the bound a start keeps no watch")
	require.Equal(t, 2, hub.Subscribers())
	require.Nil(t, w.take("t", "c"))
	require.Nil(t, w.take("u", "a"), "a watch is its tenant's")
	a := w.take("t", "a")
	require.NotNil(t, a)
	require.Nil(t, w.take("t", "a"), "a watch is taken once")
	hub.Notify(context.Background(), notify.Topic{Kind: notify.Ended, TenantID: "t", Key: "a"})
	require.Len(t, a.C, 1, "the watch hears its instance's end")
	a.Close()
	w.drop(w.watch("t", "d"))
	require.Equal(t, 1, hub.Subscribers())
	w.stop()
	require.Zero(t, hub.Subscribers())
	w.keep("t", "e", w.watch("t", "e"))
	require.Zero(t, w.len(), "a stopped server keeps no watch")
	require.Zero(t, hub.Subscribers())

	// Expired watches are closed by the next start.
	w = newEndWatches(hub, 0, 10)
	w.keep("t", "a", w.watch("t", "a"))
	w.keep("t", "b", w.watch("t", "b"))
	require.Equal(t, 1, w.len())
	require.Nil(t, w.take("t", "a"))
	require.Equal(t, 1, hub.Subscribers())
	w.stop()
	require.Zero(t, hub.Subscribers())

	var none *endWatches
	require.Nil(t, none.watch("t", "a"))
	none.keep("t", "a", nil)
	require.Nil(t, none.take("t", "a"))
	none.stop()
}
