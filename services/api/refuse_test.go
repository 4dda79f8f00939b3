package api_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	"github.com/orchardhq/orchard/internal/testsystem"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/services/api"
)

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// protocolClients are a client of each protocol: Connect and gRPC-Web over
// HTTP/1.1, gRPC over h2c.
type protocolClient struct {
	name string
	c    *clients
}

func (e *env) protocolClients(token string, wrap func(http.RoundTripper) http.RoundTripper) []protocolClient {
	h1 := &http.Client{Transport: wrap(e.Server.Client().Transport)}
	h2c := &http.Client{Transport: wrap(e.h2c.Transport)}
	e.t.Cleanup(h1.CloseIdleConnections)
	e.t.Cleanup(h2c.CloseIdleConnections)
	return []protocolClient{
		{"connect", e.clientsOn(h1, token)},
		{"grpc", e.clientsOn(h2c, token, connect.WithGRPC())},
		{"grpcweb", e.clientsOn(h1, token, connect.WithGRPCWeb())},
	}
}

// asIs sends requests as they are.
func asIs(rt http.RoundTripper) http.RoundTripper { return rt }

// ungated sends requests with their content type in capitals, which the
// handlers take (they canonicalize it) and the rate gate leaves to them:
// the interceptors then decide the call as they did before the gate.
func ungated(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Content-Type", strings.ToUpper(r.Header.Get("Content-Type")))
		return rt.RoundTrip(r)
	})
}

// endless sends each request's body and then never ends it, until the test
// ends: a server that reads the body to its end never answers.
func endless(t *testing.T) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			pr, pw := io.Pipe()
			t.Cleanup(func() { _ = pw.Close() })
			body := r.Body
			go func() { _, _ = io.Copy(pw, body) }()
			r = r.Clone(r.Context())
			r.Body, r.GetBody, r.ContentLength = pr, nil, -1
			return rt.RoundTrip(r)
		})
	}
}

// numbers are the figures of an error's text (the retry delay).
var numbers = regexp.MustCompile(`[0-9.]+m?s`)

// requireRefusal checks that err is the refusal of a call past a rate (the
// resource's: requests or starts), as admitTenant's, and returns its text
// and details without the retry delay, which differs at every refusal.
func requireRefusal(t *testing.T, err error, resource string) (string, []string) {
	t.Helper()
	requireCode(t, err, connect.CodeResourceExhausted, resource+" (limit", "retry after")
	requireReason(t, err, "RESOURCE_EXHAUSTED")
	ce := err.(*connect.Error)
	var details []string
	for _, d := range ce.Details() {
		m, derr := d.Value()
		require.NoError(t, derr)
		details = append(details, d.Type())
		if ri, ok := m.(*errdetails.RetryInfo); ok {
			require.Positive(t, ri.GetRetryDelay().AsDuration())
			continue
		}
		b, merr := proto.Marshal(m)
		require.NoError(t, merr)
		details = append(details, string(b))
	}
	return numbers.ReplaceAllString(ce.Message(), "N"), details
}

// TestRateRefusalReadsNoBody: a call past its tenant's request rate is
// refused before its body is read (here a body that never ends), over
// Connect, gRPC and gRPC-Web, with the code, text and details the
// interceptors gave it, which still refuse the calls the gate leaves to
// them. The connection serves the next call.
func TestRateRefusalReadsNoBody(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	read := map[string]bool{}
	e := newEnv(t)
	// The handler sees the bodies of the calls whose path says "Start".
	served := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/StartOrchestration") {
			ct := r.Header.Get("Content-Type")
			r.Body = &watchedBody{ReadCloser: r.Body, touched: func() { mu.Lock(); read[ct] = true; mu.Unlock() }}
		}
		e.API.Handler().ServeHTTP(w, r)
	}))
	served.Config.Protocols = api.Protocols()
	served.Start()
	t.Cleanup(served.Close)
	e.Server = served
	start := req(&orchardv1.StartOrchestrationRequest{Name: "echo", Input: []byte(`"` + strings.Repeat("x", 200_000) + `"`)})
	for _, tc := range []struct {
		resource string
		limits   *store.Limits
		// starts taken before the refusals (through the ungated clients,
		// whose bodies may be read)
		starts int
	}{
		// Registering the definition takes the only request.
		{tenancy.ResourceRequests, &store.Limits{RequestsPerSecond: 0.001, Burst: 1}, 0},
		{tenancy.ResourceStarts, &store.Limits{RequestsPerSecond: 100_000, Burst: 1, StartsPerSecond: 0.001}, 1},
	} {
		tenant := e.tenant("slow-"+tc.resource, tc.limits, testsystem.EchoDef)
		token := e.token(tenant, tenancy.RoleClient)
		gated, ungatedClients := e.protocolClients(token, endless(t)), e.protocolClients(token, ungated)
		plain := e.protocolClients(token, asIs)
		for range tc.starts {
			_, err := ungatedClients[0].c.client.StartOrchestration(t.Context(), start)
			require.NoError(t, err)
		}
		for i, pc := range gated {
			t.Run(tc.resource+"/"+pc.name, func(t *testing.T) {
				_, err := pc.c.client.StartOrchestration(t.Context(), start)
				text, details := requireRefusal(t, err, tc.resource)
				require.Len(t, details, 5, "QuotaFailure, RetryInfo, ErrorInfo")

				// The interceptors' refusal of the same call: they read it.
				_, err = ungatedClients[i].c.client.StartOrchestration(t.Context(), start)
				wantText, wantDetails := requireRefusal(t, err, tc.resource)
				require.Equal(t, wantText, text)
				require.Equal(t, wantDetails, details)

				// The connection (HTTP/1.1: closed after a body of unknown
				// length, kept after a short one) serves the next calls.
				for range 2 {
					_, err = plain[i].c.client.StartOrchestration(t.Context(), start)
					requireRefusal(t, err, tc.resource)
				}
				_, err = plain[i].c.client.GetInstance(t.Context(), req(&orchardv1.GetInstanceRequest{InstanceId: "none"}))
				if tc.resource == tenancy.ResourceRequests {
					requireCode(t, err, connect.CodeResourceExhausted)
				} else {
					requireCode(t, err, connect.CodeNotFound)
				}
			})
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, read, 3, "the interceptors read the bodies of the calls left to them: %v", read)
	for ct := range read {
		require.Equal(t, strings.ToUpper(ct), ct, "the body of a gated call was read")
	}
}

// watchedBody reports a read or a close of a request's body.
type watchedBody struct {
	io.ReadCloser
	touched func()
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.touched()
	return b.ReadCloser.Read(p)
}

func (b *watchedBody) Close() error {
	b.touched()
	return b.ReadCloser.Close()
}

// TestRateGateTakesOneTokenPerCall: a tenant with a burst of N gets exactly
// N calls through, whether the gate admits them or leaves them to the
// interceptors, over each protocol.
func TestRateGateTakesOneTokenPerCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const burst = 3
	for _, wrap := range []struct {
		name string
		f    func(http.RoundTripper) http.RoundTripper
	}{{"gated", asIs}, {"ungated", ungated}} {
		for i := range 3 {
			tenant := e.tenant(fmt.Sprintf("%s-%d", wrap.name, i), &store.Limits{RequestsPerSecond: 0.001, Burst: burst})
			pc := e.protocolClients(e.token(tenant, tenancy.RoleClient, tenancy.RoleWorker), wrap.f)[i]
			t.Run(wrap.name+"/"+pc.name, func(t *testing.T) {
				through := 0
				for range burst + 2 {
					_, err := pc.c.client.CountInstances(t.Context(), req(&orchardv1.CountInstancesRequest{}))
					if err == nil {
						through++
						continue
					}
					requireRefusal(t, err, tenancy.ResourceRequests)
				}
				require.Equal(t, burst, through)
				// The workers' calls have their own bucket.
				_, err := pc.c.worker.HeartbeatActivityTask(t.Context(), req(&orchardv1.HeartbeatActivityTaskRequest{TaskToken: "x"}))
				requireCode(t, err, connect.CodeInvalidArgument)
			})
		}
	}
}

// TestRateRefusalHints: the gate answers each refusal with its own retry
// hint, in its text and its google.rpc.RetryInfo, though it renders the
// answers to refusals alike only once: refused calls one after another are
// told to come back a token apart (tenancy.RateLimiter), so their hints
// grow, over each protocol.
func TestRateRefusalHints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const burst = 2
	hinted := regexp.MustCompile(`retry after (\S+)$`)
	for i := range 3 {
		// A token every 100 s: none comes back during the test.
		tenant := e.tenant(fmt.Sprintf("hinted-%d", i), &store.Limits{RequestsPerSecond: 0.01, Burst: burst})
		pc := e.protocolClients(e.token(tenant, tenancy.RoleClient), asIs)[i]
		c := pc.c
		t.Run(pc.name, func(t *testing.T) {
			var hints []time.Duration
			for n := range burst + 3 {
				_, err := c.client.CountInstances(t.Context(), req(&orchardv1.CountInstancesRequest{}))
				if n < burst {
					require.NoError(t, err)
					continue
				}
				requireRefusal(t, err, tenancy.ResourceRequests)
				ce := err.(*connect.Error)
				m := hinted.FindStringSubmatch(ce.Message())
				require.NotNil(t, m, ce.Message())
				inText, err := time.ParseDuration(m[1])
				require.NoError(t, err)
				var info *errdetails.RetryInfo
				for _, d := range ce.Details() {
					if v, _ := d.Value(); v != nil {
						if ri, ok := v.(*errdetails.RetryInfo); ok {
							info = ri
						}
					}
				}
				require.NotNil(t, info)
				require.Equal(t, inText, info.GetRetryDelay().AsDuration(), "the text's hint and the RetryInfo's")
				hints = append(hints, inText)
			}
			for k := 1; k < len(hints); k++ {
				require.Greater(t, hints[k], hints[k-1], "each refusal's own hint: %v", hints)
			}
		})
	}
}

// TestRateGateLeavesOtherRefusals: the calls of a tenant past its rate that
// the interceptors refuse for another reason (no token, a bad one, no role,
// an unknown or suspended tenant) keep their code.
func TestRateGateLeavesOtherRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.TenantCacheTTL = time.Nanosecond })
	limits := &store.Limits{RequestsPerSecond: 0.001, Burst: 1}
	spent := e.tenant("spent", limits, testsystem.EchoDef)
	suspended := e.tenant("suspended", limits, testsystem.EchoDef)
	state := store.TenantSuspended
	_, err := e.Store.UpdateTenant(t.Context(), &store.UpdateTenantParams{TenantID: suspended, State: &state})
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		token    string
		code     connect.Code
		mentions string
	}{
		{"no token", "", connect.CodeUnauthenticated, "Authorization"},
		{"bad token", "not-a-token", connect.CodeUnauthenticated, ""},
		{"no role", e.token(spent, tenancy.RoleWorker), connect.CodePermissionDenied, "client"},
		{"unknown tenant", e.token("nobody", tenancy.RoleClient), connect.CodePermissionDenied, "not registered"},
		{"suspended tenant", e.token(suspended, tenancy.RoleClient), connect.CodePermissionDenied, "suspended"},
		{"over rate", e.token(spent, tenancy.RoleClient), connect.CodeResourceExhausted, "requests"},
	} {
		for _, pc := range e.protocolClients(tc.token, asIs) {
			t.Run(tc.name+"/"+pc.name, func(t *testing.T) {
				_, err := pc.c.client.StartOrchestration(t.Context(), req(&orchardv1.StartOrchestrationRequest{Name: "echo"}))
				requireCode(t, err, tc.code, tc.mentions)
			})
		}
	}
}

// TestRateRefusalTelemetry: a call the gate refuses leaves the span and the
// rpc.server.call.duration point a call the interceptors refuse leaves.
func TestRateRefusalTelemetry(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	e := newEnv(t, func(c *api.Config) {
		c.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	slow := e.tenant("slow", &store.Limits{RequestsPerSecond: 0.001, Burst: 1}, testsystem.EchoDef)
	token := e.token(slow, tenancy.RoleClient)
	gated, ungatedClients := e.protocolClients(token, asIs), e.protocolClients(token, ungated)
	for i := range gated {
		for _, c := range []*clients{gated[i].c, ungatedClients[i].c} {
			_, err := c.client.StartOrchestration(t.Context(), req(&orchardv1.StartOrchestrationRequest{Name: "echo"}))
			requireRefusal(t, err, tenancy.ResourceRequests)
		}
	}

	var spans []string
	for _, sp := range rec.Ended() {
		if sp.Name() == "orchard.v1.ClientService/StartOrchestration" {
			spans = append(spans, fmt.Sprintf("%v status=%v %v", sp.SpanKind(), sp.Status(), sp.Attributes()))
		}
	}
	require.Len(t, spans, 6)
	for i := 0; i < len(spans); i += 2 {
		require.Equal(t, spans[i+1], spans[i], "the gate's refusal and the interceptors'")
	}
	require.Contains(t, spans[0], "RESOURCE_EXHAUSTED")

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	points := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "rpc.server.call.duration" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				method, _ := dp.Attributes.Value(attribute.Key("rpc.method"))
				code, _ := dp.Attributes.Value(attribute.Key("rpc.response.status_code"))
				system, _ := dp.Attributes.Value(attribute.Key("rpc.system.name"))
				if method.AsString() == "orchard.v1.ClientService/StartOrchestration" {
					points[system.AsString()+" "+code.AsString()] += dp.Count
				}
			}
		}
	}
	require.Equal(t, map[string]uint64{"connectrpc RESOURCE_EXHAUSTED": 2, "grpc RESOURCE_EXHAUSTED": 4}, points)
}
