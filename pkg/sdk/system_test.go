package sdk_test

// Tests against the real system: the API server (services/api) on
// loopback, a dispatcher, and a database from internal/testdb, with tokens
// from a tenancy.Minter. Only the tests import these; the SDK itself
// depends on the generated API alone.

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/sdk"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/pkg/tenancy"
	"github.com/orchardhq/orchard/services/api"
	"github.com/orchardhq/orchard/services/dispatcher"
)

func TestMain(m *testing.M) { testdb.Main(m) }

const (
	issuer   = "https://orchard.test"
	audience = "orchard-api"
	tenant   = "acme"
)

// Definitions of the system tests.
const (
	// echoDef runs one activity and returns its output.
	echoDef = `
name: echo
version: "1"
steps:
  - id: work
    activity: { name: work, task_queue: q, input: "${ input }" }
  - return: ${ steps.work.output }
`
	// waiterDef waits for the event "go" and returns its payload.
	waiterDef = `
name: waiter
version: "1"
steps:
  - id: ev
    wait_event: { name: go }
  - return: ${ steps.ev.output }
`
	// parentDef runs a waiter as its child.
	parentDef = `
name: parent
version: "1"
steps:
  - id: child
    sub_orchestration: { name: waiter, instance_id: "${ instance.id + '-child' }" }
  - return: ${ steps.child.output }
`
	// loopDef continues as new until n reaches 3.
	loopDef = `
name: loop
version: "1"
steps:
  - if: ${ input.n >= 3 }
    return: ${ input.n }
  - continue_as_new:
      input:
        n: ${ input.n + 1 }
`
	// raceDef races an activity against an event, which the test raises
	// once the activity's handler runs (a timer would race the worker's
	// poll on a loaded machine): the event wins and the activity is
	// cancelled.
	raceDef = `
name: race
version: "1"
steps:
  - id: r
    race:
      - id: slow
        activity: { name: block, task_queue: race }
      - id: deadline
        wait_event: { name: stop }
  - return: ${ steps.r.output.id }
`
)

// system is a database, the API on loopback and a dispatcher.
type system struct {
	t      *testing.T
	url    string
	store  *crdb.Store
	minter *tenancy.Minter
	// handler serves the API; tests that stop and start the server mount
	// it themselves.
	handler http.Handler
}

// systemOption adds to a system before its API starts.
type systemOption func(t *testing.T, pool *pgxpool.Pool, st *crdb.Store, cfg *api.Config)

func newSystem(t *testing.T, opts ...systemOption) *system {
	t.Helper()
	return newSystemOn(t, testdb.Pool(t, 20), opts...)
}

// newSystemOn is newSystem on a database the test chose.
func newSystemOn(t *testing.T, pool *pgxpool.Pool, opts ...systemOption) *system {
	t.Helper()
	st := crdb.New(pool, crdb.Options{Logger: quiet()})
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	minter, err := tenancy.NewMinter(tenancy.MinterConfig{PrivateKey: priv, Issuer: issuer, Audience: audience})
	require.NoError(t, err)
	verifier, err := tenancy.NewVerifier(t.Context(), tenancy.VerifierConfig{
		Issuer: issuer, Audience: audience, PublicKeys: []crypto.PublicKey{minter.PublicKey()},
	})
	require.NoError(t, err)
	cfg := api.Config{Store: st, Verifier: verifier, Minter: minter, Logger: quiet(), MaxPoll: 20 * time.Millisecond}
	for _, o := range opts {
		o(t, pool, st, &cfg)
	}
	a, err := api.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Stop(ctx)
	})
	require.NoError(t, st.CreateTenant(t.Context(), &store.CreateTenantParams{TenantID: tenant}))

	d, err := dispatcher.New(dispatcher.Config{Store: st, Logger: quiet(), MaxPoll: 10 * time.Millisecond, Loops: 2})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Stop(ctx)
	})
	return &system{t: t, store: st, minter: minter, handler: a.Handler()}
}

// serve serves the API on loopback.
func (s *system) serve() {
	s.t.Helper()
	srv := httptest.NewUnstartedServer(s.handler)
	srv.Config.Protocols = api.Protocols()
	srv.Start()
	s.t.Cleanup(srv.Close)
	s.url = srv.URL
}

func (s *system) token(roles ...tenancy.Role) string {
	s.t.Helper()
	tok, err := s.minter.Mint(tenancy.Claims{Tenant: tenant, Subject: "sdk-test", Roles: roles}, time.Hour)
	require.NoError(s.t, err)
	return tok
}

func (s *system) client(roles ...tenancy.Role) *sdk.Client {
	return sdk.NewClient(s.url, sdk.WithToken(s.token(roles...)), sdk.WithRetryPolicy(fastRetries))
}

// worker runs an SDK worker of the task queue until the test ends.
func (s *system) worker(queue string, register func(w *sdk.Worker), opts ...sdk.WorkerOption) *sdk.Worker {
	s.t.Helper()
	opts = append([]sdk.WorkerOption{sdk.WithLogger(quiet()), sdk.WithPollWait(time.Second)}, opts...)
	w := sdk.NewWorker(s.client(tenancy.RoleWorker), queue, opts...)
	register(w)
	startWorker(s.t, w)
	return w
}

func (s *system) register(c *sdk.Client, docs ...string) {
	s.t.Helper()
	for _, d := range docs {
		_, err := c.RegisterDefinition(s.t.Context(), []byte(d))
		require.NoError(s.t, err)
	}
}

// wait waits for an instance to end, with a deadline.
func waitEnd(t *testing.T, c *sdk.Client, id string) *sdk.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	in, err := c.Wait(ctx, id)
	require.NoError(t, err)
	return in
}

func TestSystemDefinitions(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.serve()
	admin := s.client(tenancy.RoleTenantAdmin)
	ctx := t.Context()

	reg, err := admin.RegisterDefinition(ctx, []byte(echoDef))
	require.NoError(t, err)
	require.Equal(t, sdk.Registration{Name: "echo", Version: "1", Created: true}, *reg)
	reg, err = admin.RegisterDefinition(ctx, []byte(echoDef))
	require.NoError(t, err)
	require.False(t, reg.Created, "the same document again does nothing")
	asJSON := []byte(`{"name": "echo", "version": "2", "steps": [{"return": "${ input }"}]}`)
	_, err = admin.RegisterDefinition(ctx, asJSON)
	require.NoError(t, err)

	_, err = admin.RegisterDefinition(ctx, []byte("name: echo\nversion: \"1\"\nsteps:\n  - return: 1\n"))
	require.ErrorIs(t, err, sdk.ErrAlreadyExists)

	_, err = admin.RegisterDefinition(ctx, []byte("name: bad\nversion: \"1\"\nsteps:\n  - timer: 10 parsecs\n"))
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	var e *sdk.Error
	require.ErrorAs(t, err, &e)
	require.NotEmpty(t, e.FieldViolations)
	require.Contains(t, e.FieldViolations[0].Field, "document.steps")

	d, err := admin.GetDefinition(ctx, "echo", "")
	require.NoError(t, err)
	require.Equal(t, "2", d.Version, "the latest version")
	require.NotEmpty(t, d.Document)
	d, err = admin.GetDefinition(ctx, "echo", "1")
	require.NoError(t, err)
	// The API returns the document as stored (normalised JSON), not byte
	// for byte as registered.
	require.Contains(t, string(d.Document), "steps.work.output")
	_, err = admin.GetDefinition(ctx, "nope", "")
	require.ErrorIs(t, err, sdk.ErrNotFound)

	var versions []string
	for d, err := range admin.ListDefinitions(ctx, "echo", sdk.WithPageSize(1)) {
		require.NoError(t, err)
		versions = append(versions, d.Version)
	}
	require.ElementsMatch(t, []string{"1", "2"}, versions)

	_, err = s.client(tenancy.RoleClient).RegisterDefinition(ctx, []byte(echoDef))
	require.ErrorIs(t, err, sdk.ErrPermissionDenied, "registering needs the tenant-admin role")
}

func TestSystemStartWaitAndRead(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.serve()
	s.register(s.client(tenancy.RoleTenantAdmin), echoDef)
	s.worker("q", func(w *sdk.Worker) {
		sdk.Register(w, "work", func(ctx context.Context, in map[string]any) (map[string]any, error) {
			return map[string]any{"echo": in}, nil
		})
	})
	c := s.client(tenancy.RoleClient)
	ctx := t.Context()

	id, err := c.Start(ctx, "echo", map[string]int{"n": 1}, sdk.WithInstanceID("e-1"),
		sdk.WithTags(map[string]string{"team": "sdk"}), sdk.WithRetention(time.Hour))
	require.NoError(t, err)
	require.Equal(t, "e-1", id)
	again, err := c.Start(ctx, "echo", map[string]int{"n": 1}, sdk.WithInstanceID("e-1"))
	require.NoError(t, err, "the same start again is the same instance")
	require.Equal(t, "e-1", again)
	_, err = c.Start(ctx, "echo", map[string]int{"n": 2}, sdk.WithInstanceID("e-1"))
	require.ErrorIs(t, err, sdk.ErrAlreadyExists)
	generated, err := c.Start(ctx, "echo", nil)
	require.NoError(t, err)
	require.NotEmpty(t, generated)

	in := waitEnd(t, c, "e-1")
	require.Equal(t, sdk.StatusCompleted, in.Status)
	require.JSONEq(t, `{"echo":{"n":1}}`, string(in.Output))
	require.Equal(t, map[string]string{"team": "sdk"}, in.Tags)
	require.Equal(t, "echo", in.Name)
	require.Equal(t, "1", in.Version)
	require.Equal(t, "e-1", in.RootID)
	require.False(t, in.CompletedAt.IsZero())
	require.False(t, in.CompletedAt.Before(in.CreatedAt))
	require.NotNil(t, in.Retention)
	require.Equal(t, time.Hour, *in.Retention)
	require.Equal(t, sdk.StatusCompleted, waitEnd(t, c, generated).Status)

	got, err := c.Get(ctx, "e-1")
	require.NoError(t, err)
	require.Equal(t, in.Output, got.Output)
	_, err = c.Get(ctx, "missing")
	require.ErrorIs(t, err, sdk.ErrNotFound)

	h, err := c.History(ctx, "e-1", 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), h.ExecutionID)
	require.NotEmpty(t, h.Events)
	for i, e := range h.Events {
		require.Equal(t, int64(i+1), e.ID)
		require.NotEmpty(t, e.Kind)
	}
	execs, err := c.Executions(ctx, "e-1")
	require.NoError(t, err)
	require.Len(t, execs, 1)
	require.Equal(t, sdk.StatusCompleted, execs[0].Status)

	var ids []string
	for in, err := range c.List(ctx, sdk.Filter{Tags: map[string]string{"team": "sdk"}}) {
		require.NoError(t, err)
		ids = append(ids, in.ID)
	}
	require.Equal(t, []string{"e-1"}, ids)
	counts, err := c.Count(ctx, sdk.Filter{Name: "echo"})
	require.NoError(t, err)
	require.Equal(t, int64(2), counts.Total)
	require.Equal(t, int64(2), counts.ByStatus[sdk.StatusCompleted])

	_, err = c.Start(ctx, "echo", nil, sdk.WithInstanceID("not an id"))
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	var e *sdk.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "instance_id", e.FieldViolations[0].Field)

	_, err = c.Start(ctx, "no-such-definition", nil)
	require.ErrorIs(t, err, sdk.ErrNotFound)
}

func TestSystemListPagesThroughEveryInstance(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.serve()
	s.register(s.client(tenancy.RoleTenantAdmin), waiterDef)
	c := s.client(tenancy.RoleClient)
	for i := range 25 {
		_, err := c.Start(t.Context(), "waiter", nil, sdk.WithInstanceID(fmt.Sprintf("w-%02d", i)))
		require.NoError(t, err)
	}
	var ids []string
	for in, err := range c.List(t.Context(), sdk.Filter{IDPrefix: "w-"}, sdk.WithPageSize(7), sdk.WithOrder(sdk.OldestFirst)) {
		require.NoError(t, err)
		ids = append(ids, in.ID)
	}
	require.Len(t, ids, 25)
	seen := map[string]bool{}
	for _, id := range ids {
		require.False(t, seen[id], "no instance twice")
		seen[id] = true
	}
}

func TestSystemEventsCancelDeleteAndTree(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.serve()
	s.register(s.client(tenancy.RoleTenantAdmin), waiterDef, parentDef)
	c := s.client(tenancy.RoleClient)
	ctx := t.Context()

	_, err := c.Start(ctx, "waiter", nil, sdk.WithInstanceID("w"))
	require.NoError(t, err)
	require.NoError(t, c.RaiseEvent(ctx, "w", "go", map[string]string{"ok": "yes"}))
	in := waitEnd(t, c, "w")
	require.Equal(t, sdk.StatusCompleted, in.Status)
	require.JSONEq(t, `{"ok":"yes"}`, string(in.Output))

	_, err = c.Start(ctx, "waiter", nil, sdk.WithInstanceID("c"))
	require.NoError(t, err)
	require.NoError(t, c.Cancel(ctx, "c", "not needed"))
	in = waitEnd(t, c, "c")
	require.Equal(t, sdk.StatusCancelled, in.Status)
	require.Contains(t, in.Error, "not needed")

	_, err = c.Start(ctx, "parent", nil, sdk.WithInstanceID("p"))
	require.NoError(t, err)
	var tree []string
	eventually(t, "the child to start", func() bool {
		tree, err = c.Tree(ctx, "p")
		require.NoError(t, err)
		return len(tree) == 2
	})
	require.Equal(t, []string{"p-child", "p"}, tree, "children first")
	child, err := c.Get(ctx, "p-child")
	require.NoError(t, err)
	require.Equal(t, "p", child.ParentID)
	require.Equal(t, "p", child.RootID)

	_, err = c.Delete(ctx, "p-child", true)
	require.ErrorIs(t, err, sdk.ErrSubOrchestration)
	_, err = c.Delete(ctx, "p", false)
	require.ErrorIs(t, err, sdk.ErrRunning)
	counts, err := c.Delete(ctx, "p", true)
	require.NoError(t, err)
	require.Equal(t, int64(2), counts.Instances)
	require.Positive(t, counts.Events)
	_, err = c.Get(ctx, "p-child")
	require.ErrorIs(t, err, sdk.ErrNotFound)
	_, err = c.Delete(ctx, "p", true)
	require.ErrorIs(t, err, sdk.ErrNotFound)

	counts, err = c.Delete(ctx, "w", false)
	require.NoError(t, err)
	require.Equal(t, int64(1), counts.Instances)
}

func TestSystemDeleteManyAndPrune(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.serve()
	s.register(s.client(tenancy.RoleTenantAdmin), loopDef, waiterDef)
	c := s.client(tenancy.RoleClient)
	ctx := t.Context()

	for i := range 5 {
		_, err := c.Start(ctx, "loop", map[string]int{"n": 0}, sdk.WithInstanceID(fmt.Sprint("loop-", i)))
		require.NoError(t, err)
	}
	_, err := c.Start(ctx, "waiter", nil, sdk.WithInstanceID("running"))
	require.NoError(t, err)
	for i := range 5 {
		in := waitEnd(t, c, fmt.Sprint("loop-", i))
		require.Equal(t, sdk.StatusCompleted, in.Status)
		require.Equal(t, int64(4), in.CurrentExecutionID)
	}

	pruned, err := c.Prune(ctx, "loop-0", sdk.PruneOptions{KeepLast: 2})
	require.NoError(t, err)
	require.Equal(t, int64(2), pruned.Executions)
	execs, err := c.Executions(ctx, "loop-0")
	require.NoError(t, err)
	require.Len(t, execs, 2)
	require.Equal(t, int64(3), execs[0].ID)

	var progress int
	pruned, err = c.PruneMany(ctx, sdk.Filter{Name: "loop"}, sdk.PruneOptions{KeepLast: 1},
		sdk.WithBatchSize(2), sdk.WithPruneProgress(func(sdk.PruneCounts) { progress++ }))
	require.NoError(t, err)
	require.Equal(t, int64(1+4*3), pruned.Executions)
	require.GreaterOrEqual(t, progress, 1)

	var calls []sdk.DeleteCounts
	_, err = c.DeleteMany(ctx, sdk.DeleteSelection{Filter: &sdk.Filter{}})
	require.ErrorIs(t, err, sdk.ErrInvalidArgument, "an empty filter does not select everything")
	deleted, err := c.DeleteMany(ctx, sdk.DeleteSelection{}, sdk.AllInstances(),
		sdk.WithBatchSize(2), sdk.WithDeleteProgress(func(total sdk.DeleteCounts) { calls = append(calls, total) }))
	require.NoError(t, err)
	require.Equal(t, int64(5), deleted.Instances, "the terminal ones; the running one is skipped")
	require.GreaterOrEqual(t, len(calls), 3, "batches of 2 trees")
	require.Equal(t, deleted, calls[len(calls)-1])

	counts, err := c.Count(ctx, sdk.Filter{})
	require.NoError(t, err)
	require.Equal(t, int64(1), counts.Total)
	require.Equal(t, int64(1), counts.ByStatus[sdk.StatusRunning])
}

func TestSystemAuth(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.serve()
	_, err := sdk.NewClient(s.url, sdk.WithToken("")).Get(t.Context(), "x")
	require.ErrorIs(t, err, sdk.ErrUnauthenticated)
	_, err = sdk.NewClient(s.url, sdk.WithToken("not-a-jwt")).Get(t.Context(), "x")
	require.ErrorIs(t, err, sdk.ErrUnauthenticated)
	_, err = s.client(tenancy.RoleWorker).Get(t.Context(), "x")
	require.ErrorIs(t, err, sdk.ErrPermissionDenied, "a worker token cannot read instances")

	w := sdk.NewWorker(sdk.NewClient(s.url, sdk.WithToken("")), "q", sdk.WithLogger(quiet()))
	require.ErrorIs(t, w.Run(t.Context()), sdk.ErrUnauthenticated)
}

// TestSystemHeartbeatFailureCancelsTheHandler: a race's timer wins, the
// activity that lost is cancelled (its task removed), the worker's next
// heartbeat fails, and the handler sees its context end.
func TestSystemHeartbeatFailureCancelsTheHandler(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.serve()
	s.register(s.client(tenancy.RoleTenantAdmin), raceDef)
	causes := make(chan error, 1)
	running := make(chan struct{})
	s.worker("race", func(w *sdk.Worker) {
		sdk.Register(w, "block", func(ctx context.Context, _ any) (string, error) {
			close(running)
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return "too late", nil
		})
	}, sdk.WithLeaseDuration(time.Second))
	c := s.client(tenancy.RoleClient)
	_, err := c.Start(t.Context(), "race", nil, sdk.WithInstanceID("r"))
	require.NoError(t, err)
	select {
	case <-running:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the activity's handler never ran")
	}
	require.NoError(t, c.RaiseEvent(t.Context(), "r", "stop", nil))
	in := waitEnd(t, c, "r")
	require.Equal(t, sdk.StatusCompleted, in.Status)
	require.JSONEq(t, `"deadline"`, string(in.Output))
	select {
	case cause := <-causes:
		require.ErrorIs(t, cause, sdk.ErrLeaseLost)
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the handler of the cancelled activity still runs")
	}
}

// TestSystemGracefulStop: Stop waits for the handlers in flight, whose
// results reach their instances.
func TestSystemGracefulStop(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.serve()
	s.register(s.client(tenancy.RoleTenantAdmin), echoDef)
	started := make(chan struct{}, 3)
	release := make(chan struct{})
	w := s.worker("q", func(w *sdk.Worker) {
		sdk.Register(w, "work", func(ctx context.Context, in int) (int, error) {
			started <- struct{}{}
			select {
			case <-release:
				return in * 10, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})
	}, sdk.WithConcurrency(3))
	c := s.client(tenancy.RoleClient)
	for i := range 3 {
		_, err := c.Start(t.Context(), "echo", i, sdk.WithInstanceID(fmt.Sprint("g-", i)))
		require.NoError(t, err)
	}
	for range 3 {
		<-started
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(context.WithoutCancel(t.Context())) }()
	close(release)
	require.NoError(t, <-stopped)
	for i := range 3 {
		in := waitEnd(t, c, fmt.Sprint("g-", i))
		require.Equal(t, sdk.StatusCompleted, in.Status)
		require.JSONEq(t, fmt.Sprint(i*10), string(in.Output))
	}
}

// TestSystemRetryWhenTheServerComesBack: a call made while the server is
// down succeeds once it is back, within the retry budget.
func TestSystemRetryWhenTheServerComesBack(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // the server is down
	s.url = "http://" + addr

	tr := &countingTransport{rt: http.DefaultTransport}
	patient := sdk.RetryPolicy{MaxAttempts: 1000, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	c := sdk.NewClient(s.url, sdk.WithToken(s.token(tenancy.RoleClient)), sdk.WithRetryPolicy(patient),
		sdk.WithHTTPClient(&http.Client{Transport: tr}))

	var up atomic.Bool
	go func() {
		// Start the server once the client has failed a few times.
		for tr.n.Load() < 3 {
			if t.Context().Err() != nil {
				return
			}
			testwait.Tick()
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return
		}
		srv := &http.Server{Handler: s.handler, Protocols: api.Protocols(), ReadHeaderTimeout: 5 * time.Second}
		up.Store(true)
		go func() { _ = srv.Serve(ln) }()
		<-t.Context().Done()
		_ = srv.Close()
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err = c.Get(ctx, "nothing-here")
	require.ErrorIs(t, err, sdk.ErrNotFound, "the call reached the server once it was back")
	require.True(t, up.Load())
	// At least the two attempts made before the server started failed.
	require.GreaterOrEqual(t, tr.n.Load(), int32(3))
}
