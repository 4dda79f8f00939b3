package sdk_test

// Tests against the real system (internal/testsystem): the API server on
// loopback, a dispatcher and a fresh database. Only the tests import these;
// the SDK itself depends on the generated API alone.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/internal/testwait"
	"github.com/orchardhq/orchard/pkg/sdk"
	"github.com/orchardhq/orchard/pkg/tenancy"
	"github.com/orchardhq/orchard/services/api"
)

func TestMain(m *testing.M) { testdb.Main(m) }

const tenant = "acme"

// system is the system (internal/testsystem) with one dispatcher and the
// tenant acme.
type system struct {
	*testsystem.System
	t *testing.T
}

// systemOption adds to a system before its API starts.
type systemOption = func(s *testsystem.System, cfg *api.Config)

func newSystem(t *testing.T, opts ...systemOption) *system {
	t.Helper()
	return newSystemWith(t, testsystem.Options{}, opts...)
}

// newSystemWith is newSystem with options of the test's choosing.
func newSystemWith(t *testing.T, o testsystem.Options, opts ...systemOption) *system {
	t.Helper()
	o.Dispatchers, o.Tenants = 1, []string{tenant}
	o.Configure = func(s *testsystem.System, cfg *api.Config) {
		for _, f := range opts {
			f(s, cfg)
		}
	}
	return &system{System: testsystem.New(t, o), t: t}
}

func (s *system) token(roles ...tenancy.Role) string {
	s.t.Helper()
	return s.Token(s.t, tenant, roles...)
}

func (s *system) client(roles ...tenancy.Role) *sdk.Client {
	return sdk.NewClient(s.URL, sdk.WithToken(s.token(roles...)), sdk.WithRetryPolicy(fastRetries))
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
	admin := s.client(tenancy.RoleTenantAdmin)
	ctx := t.Context()

	reg, err := admin.RegisterDefinition(ctx, []byte(testsystem.EchoDef))
	require.NoError(t, err)
	require.Equal(t, sdk.Registration{Name: "echo", Version: "1", Created: true}, *reg)
	reg, err = admin.RegisterDefinition(ctx, []byte(testsystem.EchoDef))
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

	_, err = s.client(tenancy.RoleClient).RegisterDefinition(ctx, []byte(testsystem.EchoDef))
	require.ErrorIs(t, err, sdk.ErrPermissionDenied, "registering needs the tenant-admin role")
}

func TestSystemStartWaitAndRead(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.register(s.client(tenancy.RoleTenantAdmin), testsystem.EchoDef)
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
	s.register(s.client(tenancy.RoleTenantAdmin), testsystem.WaiterDef)
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
	s.register(s.client(tenancy.RoleTenantAdmin), testsystem.WaiterDef, testsystem.ParentDef)
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
	s.register(s.client(tenancy.RoleTenantAdmin), testsystem.LoopDef, testsystem.WaiterDef)
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
	_, err := sdk.NewClient(s.URL, sdk.WithToken("")).Get(t.Context(), "x")
	require.ErrorIs(t, err, sdk.ErrUnauthenticated)
	_, err = sdk.NewClient(s.URL, sdk.WithToken("not-a-jwt")).Get(t.Context(), "x")
	require.ErrorIs(t, err, sdk.ErrUnauthenticated)
	_, err = s.client(tenancy.RoleWorker).Get(t.Context(), "x")
	require.ErrorIs(t, err, sdk.ErrPermissionDenied, "a worker token cannot read instances")

	w := sdk.NewWorker(sdk.NewClient(s.URL, sdk.WithToken("")), "q", sdk.WithLogger(quiet()))
	require.ErrorIs(t, w.Run(t.Context()), sdk.ErrUnauthenticated)
}

// TestSystemHeartbeatFailureCancelsTheHandler: a race's timer wins, the
// activity that lost is cancelled (its task removed), the worker's next
// heartbeat fails, and the handler sees its context end.
func TestSystemHeartbeatFailureCancelsTheHandler(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.register(s.client(tenancy.RoleTenantAdmin), testsystem.RaceDef)
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
	s.register(s.client(tenancy.RoleTenantAdmin), testsystem.EchoDef)
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
	s := newSystemWith(t, testsystem.Options{Unserved: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // the server is down
	s.URL = "http://" + addr

	tr := &countingTransport{rt: http.DefaultTransport}
	patient := sdk.RetryPolicy{MaxAttempts: 1000, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	c := sdk.NewClient(s.URL, sdk.WithToken(s.token(tenancy.RoleClient)), sdk.WithRetryPolicy(patient),
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
		srv := &http.Server{Handler: s.API.Handler(), Protocols: api.Protocols(), ReadHeaderTimeout: 5 * time.Second}
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
