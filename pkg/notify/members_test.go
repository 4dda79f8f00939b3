package notify

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/internal/testwait"
	hintsv1 "github.com/orchardhq/orchard/proto/orchard/hints/v1"
	"github.com/orchardhq/orchard/proto/orchard/hints/v1/hintsv1connect"
)

var membersKey = []byte("0123456789abcdef0123456789abcdef")

// openMembers is one process's notifier on pool, waiting for the kinds
// given, with its Handler served on loopback; closed when the test ends.
func openMembers(t *testing.T, pool *pgxpool.Pool, key []byte, waits ...Kind) (*Members, string) {
	t.Helper()
	var handler atomic.Pointer[http.Handler]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := handler.Load()
		if h == nil {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		(*h).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	m, err := NewMembers(t.Context(), pool, MembersConfig{
		// Memberships end by Close or by the test, and calls fail by a
		// member's fault, never by a loaded machine's stall.
		Address: srv.URL, Key: key, Waits: waits, Heartbeat: 20 * time.Millisecond, Expiry: time.Hour, CallTimeout: time.Minute,
	})
	require.NoError(t, err)
	t.Cleanup(m.Close)
	mux := http.NewServeMux()
	mux.Handle(m.Handler())
	var h http.Handler = mux
	handler.Store(&h)
	return m, srv.URL
}

// taskMembers is n members on one database that wait for tasks, the first
// of which knows the others.
func taskMembers(t *testing.T, n int) []*Members {
	t.Helper()
	pool := testdb.Pool(t, 4)
	ms := make([]*Members, n)
	for i := range ms {
		ms[i], _ = openMembers(t, pool, membersKey, Tasks)
	}
	peers(t, ms[0], n-1)
	return ms
}

// peers waits until m sends to n other members.
func peers(t *testing.T, m *Members, n int) {
	t.Helper()
	testwait.Until(t, 30*time.Second, "the membership", func() bool { return m.Peers() == n })
}

// Two processes on one database, as an API and a dispatcher: each hint
// reaches the other's waiters, a task hint as many of them as it counts.
func TestMembersCarryHintsBetweenProcesses(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, 4)
	api, _ := openMembers(t, pool, membersKey, Tasks, Ended)
	disp, _ := openMembers(t, pool, membersKey, Orchestrations)
	peers(t, api, 1)
	peers(t, disp, 1)

	work := disp.Subscribe(Topic{Kind: Orchestrations})
	api.Notify(context.Background(), Topic{Kind: Orchestrations, TenantID: "a"})
	receive(t, work, "a start reaches the dispatcher's idle loop")

	q := Topic{Kind: Tasks, TenantID: "a", Key: "q|1"}
	poll1, poll2 := api.Subscribe(q), api.Subscribe(q)
	ended := Topic{Kind: Ended, TenantID: "a", Key: "i"}
	wait1, wait2 := api.Subscribe(ended), api.Subscribe(ended)
	disp.Notify(context.Background(), q, q, q, ended)
	receive(t, poll1, "three tasks: the first poll")
	receive(t, poll2, "three tasks: the second poll")
	receive(t, wait1, "an end: every wait of the instance")
	receive(t, wait2, "an end: every wait of the instance")
	testwait.Until(t, 30*time.Second, "the hints counted", func() bool {
		return api.Stats().Received == 4 && disp.Stats().Sent == 4
	})
}

// A hint that woke a waiter here is not sent; a member gets only the kinds
// it waits for; an end goes to the others even when it woke waiters here.
func TestMembersSendOnlyWhatNoOneHereHeard(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, 4)
	here, _ := openMembers(t, pool, membersKey, Tasks, Ended)
	disp, _ := openMembers(t, pool, membersKey, Orchestrations)
	api, _ := openMembers(t, pool, membersKey, Tasks, Ended)
	peers(t, here, 2)

	q := Topic{Kind: Tasks, TenantID: "a", Key: "q"}
	poll, remote := here.Subscribe(q), api.Subscribe(q)
	here.Notify(context.Background(), q)
	require.Equal(t, []bool{true}, woken(poll), "one task: the poll in its own process")
	ended := Topic{Kind: Ended, TenantID: "a", Key: "i"}
	waitHere, waitThere := here.Subscribe(ended), api.Subscribe(ended)
	// Sent after the task's hint, so taken after it, had it been sent.
	here.Notify(context.Background(), ended)
	require.Equal(t, []bool{true}, woken(waitHere))
	receive(t, waitThere, "an end reaches the other API's waits too")
	require.Equal(t, []bool{false}, woken(remote), "a task taken here woke the other API's poll too")
	require.Equal(t, int64(1), api.Stats().Received)

	here.Notify(context.Background(), q, q)
	require.Equal(t, []bool{true}, woken(poll))
	receive(t, remote, "two tasks: the one no poll here took")

	// The dispatcher waits for neither tasks nor ends: it got nothing, which
	// a hint of its kind sent after the others shows.
	work := disp.Subscribe(Topic{Kind: Orchestrations})
	here.Notify(context.Background(), Topic{Kind: Orchestrations, TenantID: "a"})
	receive(t, work, "a start reaches the dispatcher")
	require.Equal(t, int64(1), disp.Stats().Received)
}

// Membership: a process that closes, or whose row expires (it died), is no
// longer sent to; a member that does not answer delays no other.
func TestMembersFollowTheLiveProcesses(t *testing.T) {
	t.Parallel()
	ms := taskMembers(t, 2)
	a, b, pool := ms[0], ms[1], ms[0].pool

	// A member that died without closing: its address refuses connections
	// (a listener closed at once), and it renews nothing.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	_, err = pool.Exec(t.Context(), `INSERT INTO hint_members (member_id, address, kinds, expires_at)
VALUES ('dead', $1, $2, $3)`, dead, int64(1<<Tasks), time.Now().Add(time.Hour))
	require.NoError(t, err)
	peers(t, a, 2)

	q := Topic{Kind: Tasks, TenantID: "a", Key: "q"}
	poll := b.Subscribe(q)
	for range 3 {
		a.Notify(context.Background(), q)
		receive(t, poll, "a task reaches the live member beside the dead one")
	}

	_, err = pool.Exec(t.Context(), `UPDATE hint_members SET expires_at = $1 WHERE member_id = 'dead'`, time.Now().Add(-time.Second))
	require.NoError(t, err)
	peers(t, a, 1)

	b.Close()
	peers(t, a, 0)
	var rows int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM hint_members WHERE member_id = $1`, b.ID()).Scan(&rows))
	require.Zero(t, rows, "a closed member deletes its row")
}

// The hint service is for the deployment's members only, and bounds what
// it takes.
func TestMembersRefuseStrangersAndBadHints(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, 4)
	m, url := openMembers(t, pool, membersKey, Tasks)
	stranger, _ := openMembers(t, pool, []byte("another deployment's key"), Tasks)
	peers(t, stranger, 1)
	q := Topic{Kind: Tasks, TenantID: "a", Key: "q"}
	poll := m.Subscribe(q)

	client := hintsv1connect.NewHintServiceClient(http.DefaultClient, url)
	call := func(token string, msg *hintsv1.HintRequest) error {
		req := connect.NewRequest(msg)
		if token != "" {
			req.Header().Set("Authorization", token)
		}
		_, err := client.Hint(t.Context(), req)
		return err
	}
	good := &hintsv1.HintRequest{Origin: "x", Hints: []*hintsv1.Hint{{Kind: hintsv1.Kind_KIND_TASKS, TenantId: "a", Key: "q"}}}
	for _, token := range []string{"", "Bearer nope", "Bearer " + strings.Repeat("0", 64)} {
		require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(call(token, good)), token)
	}
	member := m.token
	for name, msg := range map[string]*hintsv1.HintRequest{
		"no origin":      {Hints: good.Hints},
		"no hints":       {Origin: "x"},
		"no kind":        {Origin: "x", Hints: []*hintsv1.Hint{{TenantId: "a"}}},
		"unknown kind":   {Origin: "x", Hints: []*hintsv1.Hint{{Kind: 9, TenantId: "a"}}},
		"count too high": {Origin: "x", Hints: []*hintsv1.Hint{{Kind: hintsv1.Kind_KIND_TASKS, TenantId: "a", Key: "q", Count: 513}}},
		"key too long":   {Origin: "x", Hints: []*hintsv1.Hint{{Kind: hintsv1.Kind_KIND_TASKS, TenantId: "a", Key: strings.Repeat("q", 201)}}},
		"too many hints": {Origin: "x", Hints: slices.Repeat(good.Hints, 513)},
	} {
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(call(member, msg)), name)
	}
	require.Equal(t, []bool{false}, woken(poll), "nothing refused was delivered")

	// The stranger's hints are refused too: its send fails, none arrives.
	stranger.Notify(context.Background(), q)
	testwait.Until(t, 30*time.Second, "the stranger's send", func() bool { return stranger.Stats().Failed == 1 })
	require.Equal(t, []bool{false}, woken(poll))
	require.Zero(t, m.Stats().Received)
	require.NoError(t, call(member, good))
	receive(t, poll, "a member's hint")
}

func TestEncodeHints(t *testing.T) {
	t.Parallel()
	q := Topic{Kind: Tasks, TenantID: "a", Key: "q"}
	o := Topic{Kind: Orchestrations, TenantID: "a"}
	got := encodeHints([]Topic{q, o, q, o, q})
	require.Len(t, got, 2)
	require.Equal(t, hintsv1.Kind_KIND_TASKS, got[0].GetKind())
	require.Equal(t, uint32(3), got[0].GetCount())
	require.Equal(t, hintsv1.Kind_KIND_ORCHESTRATIONS, got[1].GetKind())
	require.Equal(t, uint32(1), got[1].GetCount())
	require.Equal(t, 4, countHints(got))
}

func TestNewMembersRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, 2)
	for name, cfg := range map[string]MembersConfig{
		"no address": {Key: membersKey},
		"short key":  {Address: "127.0.0.1:1", Key: []byte("short")},
		"bad kind":   {Address: "127.0.0.1:1", Key: membersKey, Waits: []Kind{9}},
	} {
		_, err := NewMembers(t.Context(), pool, cfg)
		require.Error(t, err, name)
	}
}

// Many hints at once arrive whole: the calls carry up to the most a call
// may (maxBatch), and what does not fit goes in the next.
func TestMembersCarryBurstsWhole(t *testing.T) {
	t.Parallel()
	ms := taskMembers(t, 2)
	a, b := ms[0], ms[1]
	const n = 3*maxBatch + 7
	for i := range n {
		a.Notify(context.Background(), Topic{Kind: Tasks, TenantID: "a", Key: fmt.Sprint(i)})
	}
	testwait.Until(t, 30*time.Second, "every hint", func() bool { return b.Stats().Received == n })
	testwait.Until(t, 30*time.Second, "every call answered", func() bool { return a.Stats().Sent == n })
	require.Zero(t, a.Stats().Failed)
	require.Zero(t, a.Stats().Dropped)
}

// A task's hint goes to one member, the first of its topic's rendezvous
// order; one that wakes no waiter there goes on to the next, so it wakes a
// waiter wherever one waits, and only one.
func TestMembersPassOnWhatNoOneTook(t *testing.T) {
	t.Parallel()
	ms := taskMembers(t, 3)
	a, b, c := ms[0], ms[1], ms[2]
	// A queue whose first choice is member, of the two.
	queueFirstAt := func(member *Members) Topic {
		a.mu.Lock()
		defer a.mu.Unlock()
		for i := 0; ; i++ {
			q := Topic{Kind: Tasks, TenantID: "a", Key: fmt.Sprint("q", i)}
			if a.next(encodeHints([]Topic{q})[0], 1<<Tasks, "") == member.ID() {
				return q
			}
		}
	}
	sent := func(n int64) {
		t.Helper()
		testwait.Until(t, 30*time.Second, "the calls answered", func() bool { return a.Stats().Sent == n })
	}

	// First choice b, with nothing waiting there: on to c.
	q := queueFirstAt(b)
	poll := c.Subscribe(q)
	a.Notify(context.Background(), q)
	receive(t, poll, "a task b had no poll for, at c")
	require.Equal(t, int64(1), b.Stats().Received)
	require.Equal(t, int64(1), a.Stats().PassedOn)
	poll.Close()

	// First choice c, with a poll there: c alone.
	q = queueFirstAt(c)
	poll, other := c.Subscribe(q), b.Subscribe(q)
	a.Notify(context.Background(), q)
	receive(t, poll, "a task at its first choice")
	sent(3) // the passed-on call counted too; a hint is passed on before its call counts
	require.Equal(t, int64(1), a.Stats().PassedOn, "nothing more passed on")
	require.Equal(t, []bool{false}, woken(other))

	// Three tasks, first choice b with one poll: the two it leaves, at c.
	// (b's poll is read last: read, it would be idle again and take a task
	// of a later call, had the three gone in two.)
	q = queueFirstAt(b)
	b1, c1, c2 := b.Subscribe(q), c.Subscribe(q), c.Subscribe(q)
	a.Notify(context.Background(), q, q, q)
	receive(t, c1, "two of three at c")
	receive(t, c2, "two of three at c")
	receive(t, b1, "one of three at b")
	require.Equal(t, int64(3), a.Stats().PassedOn)
}
