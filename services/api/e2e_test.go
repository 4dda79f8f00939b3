package api_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/orchardhq/orchard/internal/telemetry"
	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/notify"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/services/dispatcher"
)

// apiWorker runs loops that poll q through the WorkerService and complete
// each task with {"echo": input}, until ctx ends.
func apiWorker(ctx context.Context, c *clients, q string, loops int) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range loops {
		wg.Go(func() {
			for ctx.Err() == nil {
				res, err := c.worker.PollActivityTask(ctx, req(&orchardv1.PollActivityTaskRequest{
					TaskQueue: q, Wait: durationpb.New(time.Second), WorkerIdentity: "e2e",
				}))
				if err != nil || len(res.Msg.Tasks) == 0 {
					continue
				}
				task := res.Msg.Tasks[0]
				_, _ = c.worker.HeartbeatActivityTask(ctx, req(&orchardv1.HeartbeatActivityTaskRequest{TaskToken: task.TaskToken}))
				result := fmt.Appendf(nil, `{"echo":%s}`, orNull(task.Input))
				_, err = c.worker.CompleteActivityTask(ctx, req(&orchardv1.CompleteActivityTaskRequest{TaskToken: task.TaskToken, Result: result}))
				var ce *connect.Error
				if err != nil && errors.As(err, &ce) && ce.Code() != connect.CodeFailedPrecondition && ctx.Err() == nil {
					panic(fmt.Sprintf("complete: %v", err))
				}
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

func orNull(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}

// TestEndToEnd: a definition registered, instances started, their
// activities run by a worker that goes through the API (gRPC), and their
// completion awaited with WaitForCompletion, with a dispatcher in between.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme", nil)
	admin := e.grpcClients(e.token(acme, tenancy.RoleTenantAdmin))
	_, err := admin.defs.RegisterDefinition(t.Context(), req(&orchardv1.RegisterDefinitionRequest{Document: []byte(testsystem.EchoDef)}))
	require.NoError(t, err)
	e.dispatch()
	stop := apiWorker(context.Background(), e.grpcClients(e.token(acme, tenancy.RoleWorker)), "q", 4)
	t.Cleanup(stop)
	c := e.grpcClients(e.token(acme, tenancy.RoleClient))
	const n = 20
	for i := range n {
		_, err := c.client.StartOrchestration(t.Context(), req(&orchardv1.StartOrchestrationRequest{
			Name: "echo", InstanceId: fmt.Sprint("e", i), Input: fmt.Appendf(nil, `{"i":%d}`, i),
		}))
		require.NoError(t, err)
	}
	for i := range n {
		in := c.waitDone(t, fmt.Sprint("e", i))
		require.Equal(t, orchardv1.InstanceStatus_INSTANCE_STATUS_COMPLETED, in.Status)
		require.JSONEq(t, fmt.Sprintf(`{"echo":{"i":%d}}`, i), string(in.Output))
	}
}

// percentiles reports p50 and p99 of durations in microseconds.
func percentiles(b *testing.B, d []time.Duration, unit string) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs/"+unit)
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs/"+unit)
}

// BenchmarkUnaryOverhead measures one unary call through the whole chain
// (HTTP/1.1 Connect on loopback, telemetry as the servers set it up,
// authentication, authorization, tenant admission, rate limit, validation,
// handler) without a store call: TenantService.GetLimits answers from the
// tenant row the admission step cached, so no database round trip is
// measured. cpu-µs/call is the process's CPU (client and server) per call.
func BenchmarkUnaryOverhead(b *testing.B) {
	tel, err := telemetry.Setup(b.Context(), "bench")
	require.NoError(b, err)
	b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	e := newEnv(b, func(c *apiConfig) {
		c.TenantCacheTTL, c.TracerProvider, c.MeterProvider = time.Hour, tel.TracerProvider, tel.MeterProvider
	})
	acme := e.tenant("acme", &store.Limits{RequestsPerSecond: 100_000, Burst: 1_000_000})
	c := e.clients(e.token(acme, tenancy.RoleTenantAdmin))
	ctx := context.Background()
	_, err = c.tenant.GetLimits(ctx, req(&orchardv1.GetLimitsRequest{}))
	require.NoError(b, err)
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU(b)
	for b.Loop() {
		t0 := time.Now()
		if _, err := c.tenant.GetLimits(ctx, req(&orchardv1.GetLimitsRequest{})); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(len(lat)), "cpu-µs/call")
	b.ReportMetric(float64(len(lat))/time.Since(start).Seconds(), "req/s")
	percentiles(b, lat, "call")
}

// BenchmarkRefusedCall measures a start refused by the tenant's request
// rate, client and server in one process: what a tenant far past its rate
// costs per call. The API refuses it from its headers (rateGate), but the
// client still encodes and sends the input, and net/http discards a body
// under 256 KiB to keep the connection.
func BenchmarkRefusedCall(b *testing.B) {
	for _, size := range []int{1, 200_000} {
		b.Run(fmt.Sprintf("input=%d", size), func(b *testing.B) {
			tel, err := telemetry.Setup(b.Context(), "bench")
			require.NoError(b, err)
			b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
			e := newEnv(b, func(c *apiConfig) {
				c.TenantCacheTTL, c.TracerProvider, c.MeterProvider = time.Hour, tel.TracerProvider, tel.MeterProvider
			})
			noisy := e.tenant("noisy", &store.Limits{RequestsPerSecond: 1, Burst: 1}, testsystem.EchoDef)
			c := e.clients(e.token(noisy, tenancy.RoleClient))
			ctx := context.Background()
			start := req(&orchardv1.StartOrchestrationRequest{Name: "echo", Input: []byte(`"` + strings.Repeat("x", size) + `"`)})
			_, _ = c.client.StartOrchestration(ctx, start)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, refused := processCPU(b), 0
			for b.Loop() {
				_, err := c.client.StartOrchestration(ctx, start)
				switch {
				case connect.CodeOf(err) == connect.CodeResourceExhausted:
					refused++
				case err != nil:
					b.Fatal(err)
				}
				// A token comes back each second: a start may go through.
			}
			require.Positive(b, refused)
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/call")
		})
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	require.NoError(tb, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStartToCompletion measures an instance of testsystem.EchoDef from
// StartOrchestration to WaitForCompletion's answer, through the API, a
// dispatcher and an API worker, with 8 clients at once.
func BenchmarkStartToCompletion(b *testing.B) {
	e := newEnv(b, func(c *apiConfig) { c.MinPoll = time.Millisecond; c.MaxPoll = 5 * time.Millisecond })
	acme := e.tenant("acme", &store.Limits{RequestsPerSecond: 100_000, Burst: 1_000_000}, testsystem.EchoDef)
	e.dispatch()
	stop := apiWorker(context.Background(), e.grpcClients(e.token(acme, tenancy.RoleWorker)), "q", 8)
	defer stop()
	c := e.grpcClients(e.token(acme, tenancy.RoleClient))
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			t0 := time.Now()
			res, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", Input: []byte(`1`)}))
			if err != nil {
				b.Error(err)
				return
			}
			for {
				w, err := c.client.WaitForCompletion(ctx, req(&orchardv1.WaitForCompletionRequest{InstanceId: res.Msg.InstanceId}))
				if err != nil {
					b.Error(err)
					return
				}
				if w.Msg.Done {
					break
				}
			}
			mu.Lock()
			lat = append(lat, time.Since(t0))
			mu.Unlock()
		}
	})
	b.ReportMetric(float64(len(lat))/time.Since(start).Seconds(), "instances/s")
	percentiles(b, lat, "instance")
}

// BenchmarkOneInFlight measures one instance of testsystem.EchoDef at a
// time, from StartOrchestration to WaitForCompletion's answer, with the
// dispatcher in the API's process sharing its hints and Handoff, as in
// orchard dev: the start's first turn runs in the start's write, and the
// completion's turn in the completion's. ahead-turns/instance counts the
// completions' turns that ran before their write, on the instance as the
// dispatcher's last ack left it (store.EagerLease.Ahead): 1 when every
// completion took that path.
func BenchmarkOneInFlight(b *testing.B) {
	hints, handoff := notify.NewLocal(), notify.NewHandoff(100*time.Millisecond)
	e := newEnv(b, func(c *apiConfig) { c.Notifier, c.Handoff = hints, handoff })
	acme := e.tenant("acme", &store.Limits{RequestsPerSecond: 100_000, Burst: 1_000_000}, testsystem.EchoDef)
	d := e.StartDispatcher(b, dispatcher.Config{Notifier: hints, Handoff: handoff})
	stop := apiWorker(context.Background(), e.grpcClients(e.token(acme, tenancy.RoleWorker)), "q", 1)
	defer stop()
	c := e.grpcClients(e.token(acme, tenancy.RoleClient))
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		res, err := c.client.StartOrchestration(ctx, req(&orchardv1.StartOrchestrationRequest{Name: "echo", Input: []byte(`1`)}))
		if err != nil {
			b.Fatal(err)
		}
		for {
			w, err := c.client.WaitForCompletion(ctx, req(&orchardv1.WaitForCompletionRequest{InstanceId: res.Msg.InstanceId}))
			if err != nil {
				b.Fatal(err)
			}
			if w.Msg.Done {
				break
			}
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(float64(d.Stats().Ahead)/float64(len(lat)), "ahead-turns/instance")
	percentiles(b, lat, "instance")
}
