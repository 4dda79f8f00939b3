package dispatcher

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/store"
)

// Every status a turn can decide is kept as its own store status, and every
// store status is one a turn can decide: a status added on either side
// without the other fails here.
func TestStoreStatusCoversEveryEngineStatus(t *testing.T) {
	t.Parallel()
	seen := map[store.Status]engine.Status{}
	for _, s := range engine.Statuses() {
		st, ok := storeStatus[s]
		require.True(t, ok, "engine status %s has no store status", s)
		require.True(t, st.Valid(), "engine status %s maps to unknown store status %q", s, st)
		prev, dup := seen[st]
		require.False(t, dup, "engine statuses %s and %s both map to %s", prev, s, st)
		seen[st] = s
	}
	require.Len(t, storeStatus, len(engine.Statuses()))
	for _, st := range store.Statuses() {
		require.Contains(t, seen, st, "store status %s is never decided", st)
	}
}
