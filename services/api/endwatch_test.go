package api

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/notify"
	"github.com/orchardhq/orchard/pkg/store"
)

// The end watches are bounded in number and age, a watch is taken once,
// and stop closes what is left; every watch closed is one the notifier and
// the handoff no longer hold.
func TestEndWatchesBounds(t *testing.T) {
	t.Parallel()
	hub, handoff := notify.NewLocal(), notify.NewHandoff(0)
	held := func() int {
		waits, _ := handoff.EndWaits()
		require.Equal(t, hub.Subscribers(), waits)
		return waits
	}
	w := newEndWatches(hub, handoff, time.Hour, 2)
	for _, id := range []string{"a", "b", "c"} {
		w.keep("t", id, w.watch("t", id))
	}
	require.Equal(t, 2, w.len(), "past the bound a start keeps no watch")
	require.Equal(t, 2, held())
	require.Nil(t, w.take("t", "c"))
	require.Nil(t, w.take("u", "a"), "a watch is its tenant's")
	a := w.take("t", "a")
	require.NotNil(t, a)
	require.Nil(t, w.take("t", "a"), "a watch is taken once")
	ended := &store.Instance{TenantID: "t", InstanceID: "a", Status: store.StatusCompleted, Output: []byte("out")}
	handoff.Ended(&store.Instance{TenantID: "u", InstanceID: "a"})
	handoff.Ended(ended)
	hub.Notify(context.Background(), notify.Topic{Kind: notify.Ended, TenantID: "t", Key: "a"})
	require.Len(t, a.sub.C, 1, "the watch hears its instance's end")
	require.Same(t, ended, a.end.Instance(), "and gets the instance as it ended")
	_, bytes := handoff.EndWaits()
	require.Equal(t, 3, bytes, "an end is its instance's, of its tenant")
	a.close()
	_, bytes = handoff.EndWaits()
	require.Zero(t, bytes, "a closed watch lets go of its instance")
	w.drop(w.watch("t", "d"))
	require.Equal(t, 1, held())
	w.stop()
	require.Zero(t, held())
	w.keep("t", "e", w.watch("t", "e"))
	require.Zero(t, w.len(), "a stopped server keeps no watch")
	require.Zero(t, held())

	// Expired watches are closed by the next start.
	w = newEndWatches(hub, handoff, 0, 10)
	w.keep("t", "a", w.watch("t", "a"))
	w.keep("t", "b", w.watch("t", "b"))
	require.Equal(t, 1, w.len())
	require.Nil(t, w.take("t", "a"))
	require.Equal(t, 1, held())
	w.stop()
	require.Zero(t, held())

	var none *endWatches
	require.Nil(t, none.watch("t", "a"))
	none.keep("t", "a", nil)
	require.Nil(t, none.take("t", "a"))
	none.stop()
}
