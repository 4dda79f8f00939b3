package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/orchardhq/orchard/internal/telemetry"
	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/internal/testworker"
	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// `orchard dispatcher` runs orchestrations against ORCHARD_DATABASE_URL,
// serves /livez, /readyz and /metrics, and drains when its context ends
// (SIGTERM): not ready first, then stopped.
func TestDispatcherCommand(t *testing.T) {
	t.Parallel()
	st, url := oneActivityTenant(t, "cmd")
	ctx := t.Context()
	kind, payload, err := engine.EncodeMessage(engine.StartMessage{Input: json.RawMessage(`"hello"`)})
	require.NoError(t, err)
	_, err = st.StartOrchestration(ctx, &store.StartOrchestrationParams{TenantID: "cmd", InstanceID: "i", Name: "one", Version: "1",
		Input: []byte(`"hello"`), Start: store.Message{Kind: kind, Payload: payload}})
	require.NoError(t, err)
	w := testworker.Start(ctx, testworker.Config{Store: st, TaskQueues: []string{"q"}, Handler: func(_ context.Context, task *store.WorkItem) (any, error) {
		return json.RawMessage(task.Input), nil
	}})
	defer w.Stop()

	ops := freeAddr(t)
	cmdCtx, stop := context.WithCancel(ctx)
	done := runCommand(cmdCtx, "dispatcher", "--database-url", url, "--ops-addr", ops, "--loops", "2")

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + ops + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	eventuallyCLI(t, "the instance to complete", func() bool {
		in, err := st.GetInstance(ctx, &store.GetInstanceParams{TenantID: "cmd", InstanceID: "i"})
		require.NoError(t, err)
		return in.Status == store.StatusCompleted
	})
	for _, path := range []string{"/livez", "/readyz"} {
		code, body := get(path)
		require.Equal(t, http.StatusOK, code, "%s: %s", path, body)
	}
	// The turn is counted just after its ack commits.
	eventuallyCLI(t, "the completed turn in /metrics", func() bool {
		body := metrics(t, ops)
		return strings.Contains(body, `orchard_dispatcher_turns_total{`) && strings.Contains(body, `outcome="Completed"`)
	})

	stop()
	stopped(t, done, "the dispatcher")
}

// oneActivityTenant makes a tenant with the definition "one" (version 1):
// an activity "echo" on task queue "q" whose output is the orchestration's.
// It returns the store and the URL of its database.
func oneActivityTenant(t *testing.T, tenant string) (*crdb.Store, string) {
	pool := testdb.Pool(t, 8)
	st := crdb.New(pool, crdb.Options{})
	require.NoError(t, st.CreateTenant(t.Context(), &store.CreateTenantParams{TenantID: tenant}))
	def, err := engine.ParseDefinition([]byte(`{"name":"one","version":"1","steps":[{"id":"a","activity":{"name":"echo","task_queue":"q","input":"${ input }"}}],"output":"${ steps.a.output }"}`))
	require.NoError(t, err)
	_, err = st.RegisterDefinition(t.Context(), &store.RegisterDefinitionParams{TenantID: tenant, Name: "one", Version: "1", Document: def.Document()})
	require.NoError(t, err)
	return st, pool.Config().ConnString()
}

// addrsGiven are the addresses freeAddr returned.
var addrsGiven sync.Map

// freeAddr returns a loopback address whose port is free now, and was
// never returned before: the kernel may hand out a port it just took back
// (a test's two calls in a row got one port, and its server failed to
// bind the second).
func freeAddr(t *testing.T) string {
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		if _, given := addrsGiven.LoadOrStore(addr, true); !given {
			return addr
		}
	}
}

// Every command's pool keeps one generic plan per statement on PostgreSQL,
// on each connection it opens; CockroachDB's connections keep the mode a
// plain connection has.
func TestPoolsKeepGenericPlansOnPostgres(t *testing.T) {
	t.Parallel()
	db := testdb.URL(t)
	mode := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		var m string
		require.NoError(t, q.QueryRow(t.Context(), "SHOW plan_cache_mode").Scan(&m))
		return m
	}
	plain, err := pgx.Connect(t.Context(), db)
	require.NoError(t, err)
	defer plain.Close(t.Context())
	want := "force_generic_plan"
	if testdb.SharedServer(t).Cockroach {
		want = mode(plain)
	} else {
		require.NotEqual(t, want, mode(plain), "a plain connection keeps PostgreSQL's default")
	}

	pool, err := openPool(t.Context(), &telemetry.Telemetry{TracerProvider: sdktrace.NewTracerProvider()}, db, 2)
	require.NoError(t, err)
	defer pool.Close()
	// Both connections: the second is opened while the first is held.
	c1, err := pool.Acquire(t.Context())
	require.NoError(t, err)
	defer c1.Release()
	c2, err := pool.Acquire(t.Context())
	require.NoError(t, err)
	defer c2.Release()
	require.Equal(t, want, mode(c1))
	require.Equal(t, want, mode(c2))
}
