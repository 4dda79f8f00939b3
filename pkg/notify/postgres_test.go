package notify

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// receive waits for a hint on s, with a deadline.
func receive(t *testing.T, s *Subscription, what string) {
	t.Helper()
	select {
	case <-s.C:
	case <-time.After(30 * time.Second):
		t.Fatalf("no hint: %s", what)
	}
}

// Two processes' notifiers on one database: a hint sent in one reaches the
// subscribers of the other, and its own at once, once; the hints its own
// subscribers took stay in it.
func TestPostgresCarriesHintsBetweenProcesses(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, 4)
	api, disp := openPostgres(t, pool), openPostgres(t, pool)
	work := disp.Subscribe(Topic{Kind: Orchestrations})
	q := Topic{Kind: Tasks, TenantID: "a", Key: "q|1"}
	poll1, poll2 := api.Subscribe(q), api.Subscribe(q)
	remote1, remote2 := disp.Subscribe(q), disp.Subscribe(q)

	api.Notify(context.Background(), Topic{Kind: Orchestrations, TenantID: "a"})
	receive(t, work, "the start reached the other process's dispatcher")

	disp.Notify(context.Background(), q, q, q, q)
	require.Equal(t, []bool{true, true}, woken(remote1, remote2), "in its own process at once")
	receive(t, poll1, "four tasks: the first poller of the other process")
	receive(t, poll2, "four tasks: the second poller of the other process")
	require.Equal(t, []bool{false, false}, woken(remote1, remote2), "its own hints do not come back")
}

// A hint that woke a waiter in its own process is not sent to the others:
// n hints wake about n waiters, not n in each process. Ended hints go to
// every process, since they wake every waiter of the instance.
func TestPostgresSendsOnlyTheHintsNoOneHereHeard(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, 4)
	here, there := openPostgres(t, pool), openPostgres(t, pool)
	q := Topic{Kind: Tasks, TenantID: "a", Key: "q"}
	poll, remote := here.Subscribe(q), there.Subscribe(q)
	ended := Topic{Kind: Ended, TenantID: "a", Key: "i"}
	waitHere, waitThere := here.Subscribe(ended), there.Subscribe(ended)

	here.Notify(context.Background(), q)
	require.Equal(t, []bool{true}, woken(poll), "one task: the poller of its own process")
	// Sent after the task's hint, so heard after it, had it been sent.
	here.Notify(context.Background(), ended)
	require.Equal(t, []bool{true}, woken(waitHere))
	receive(t, waitThere, "an end reaches the other process's waiters too")
	require.Equal(t, []bool{false}, woken(remote), "a task taken here woke the other process's poller too")

	here.Notify(context.Background(), q, q)
	require.Equal(t, []bool{true}, woken(poll))
	receive(t, remote, "two tasks: the one no poller here took")
}

func TestPostgresPayloads(t *testing.T) {
	t.Parallel()
	p := &Postgres{origin: "me"}
	q := Topic{Kind: Tasks, TenantID: "a", Key: "q"}
	o := Topic{Kind: Orchestrations, TenantID: "a"}
	require.Equal(t, []string{"me|2|3|a|q", "me|1|1|a|"}, p.payloads([]Topic{q, o, q, o, q}))
	other := &Postgres{origin: "you"}
	got, n, ok := other.parsePayload("me|2|3|a|q|x")
	require.True(t, ok)
	require.Equal(t, Topic{Kind: Tasks, TenantID: "a", Key: "q|x"}, got)
	require.Equal(t, 3, n)
	for _, bad := range []string{"me|2|3|a|q", "you|9|1|a|", "you|1|0|a|", "you|1|a|", "you|x|1|a|"} {
		_, _, ok := p.parsePayload(bad)
		require.False(t, ok, bad)
	}
}

// openPostgres is one process's notifier on pool, closed when the test ends.
func openPostgres(t *testing.T, pool *pgxpool.Pool) *Postgres {
	p, err := NewPostgres(t.Context(), pool, nil)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}
