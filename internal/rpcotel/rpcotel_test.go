package rpcotel_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/orchardhq/orchard/internal/rpcotel"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
)

// outcomes answers GetInstance with the outcome its instance id names.
type outcomes struct {
	orchardv1connect.UnimplementedClientServiceHandler
}

func (outcomes) GetInstance(_ context.Context, req *connect.Request[orchardv1.GetInstanceRequest]) (*connect.Response[orchardv1.GetInstanceResponse], error) {
	switch req.Msg.GetInstanceId() {
	case "missing":
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such instance"))
	case "broken":
		return nil, connect.NewError(connect.CodeInternal, errors.New("it broke"))
	case "plain":
		return nil, errors.New("a plain error")
	case "teapot":
		return nil, connect.NewError(connect.Code(99), errors.New("no such code"))
	case "refused":
		return nil, connect.NewError(connect.CodeResourceExhausted, errors.New("too many"))
	}
	return connect.NewResponse(&orchardv1.GetInstanceResponse{}), nil
}

// telemetry is what a server's calls left: its spans and its metrics.
type telemetry struct {
	spans   []string
	metrics []string
}

// refusing answers the calls that carry a Refuse header in front of their
// Connect handler, as the "refused" instance's are answered by the handler,
// and records them with the server's Unhandled.
func refusing(interceptor connect.Interceptor, next http.Handler) http.Handler {
	server := interceptor.(*rpcotel.Server)
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Refuse") == "" {
			next.ServeHTTP(w, r)
			return
		}
		protocol := connect.ProtocolConnect
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc-web") {
			protocol = connect.ProtocolGRPCWeb
		}
		err := server.Unhandled(r.Context(), r.URL.Path, protocol, r.Header, time.Now(), func(context.Context) error {
			return connect.NewError(connect.CodeResourceExhausted, errors.New("too many"))
		})
		_ = errs.Write(w, r, err)
	})
}

// serveCalls makes the same calls, over Connect and gRPC-Web, to a server
// whose telemetry interceptor newInterceptor makes, with front (if any) in
// front of its handler, and returns what they left.
func serveCalls(t *testing.T, newInterceptor func(*sdktrace.TracerProvider, *sdkmetric.MeterProvider) (connect.Interceptor, error),
	front func(connect.Interceptor, http.Handler) http.Handler) telemetry {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	interceptor, err := newInterceptor(tp, mp)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(orchardv1connect.NewClientServiceHandler(outcomes{}, connect.WithInterceptors(interceptor)))
	var handler http.Handler = mux
	if front != nil {
		handler = front(interceptor, mux)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)

	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, opts := range [][]connect.ClientOption{nil, {connect.WithGRPCWeb()}} {
		c := orchardv1connect.NewClientServiceClient(srv.Client(), srv.URL, opts...)
		for _, id := range []string{"ok", "missing", "broken", "plain", "teapot", "refused", "ok"} {
			req := connect.NewRequest(&orchardv1.GetInstanceRequest{InstanceId: id})
			req.Header().Set("traceparent", parent)
			if id == "refused" {
				req.Header().Set("Refuse", "yes")
			}
			_, _ = c.GetInstance(t.Context(), req)
		}
	}

	var got telemetry
	for _, sp := range rec.Ended() {
		got.spans = append(got.spans, fmt.Sprintf("%s %v parent=%s status=%v %v", sp.Name(), sp.SpanKind(), sp.Parent().TraceID(), sp.Status(), text(sp.Attributes())))
	}
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[float64])
			require.True(t, ok, "%s is a histogram", m.Name)
			for _, dp := range h.DataPoints {
				got.metrics = append(got.metrics, fmt.Sprintf("%s (%s, %s) %v count=%d bounds=%v", m.Name, m.Unit, m.Description, text(dp.Attributes.ToSlice()), dp.Count, dp.Bounds))
			}
		}
	}
	slices.Sort(got.metrics)
	return got
}

// text is attributes as sorted key=value strings.
func text(attrs []attribute.KeyValue) []string {
	out := []string{}
	for _, a := range attrs {
		out = append(out, fmt.Sprintf("%s=%s", a.Key, a.Value.String()))
	}
	slices.Sort(out)
	return out
}

// A server's calls leave the spans and the measurements otelconnect's
// interceptor leaves (but for their instrumentation scope): names, kinds,
// the caller's trace, attributes, statuses, and the duration histogram's
// data points; so do the calls answered in front of the handler and
// recorded by Unhandled.
func TestServerLeavesWhatOtelconnectLeaves(t *testing.T) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	ours := serveCalls(t, func(tp *sdktrace.TracerProvider, mp *sdkmetric.MeterProvider) (connect.Interceptor, error) {
		return rpcotel.NewServer(tp, mp)
	}, refusing)
	theirs := serveCalls(t, func(tp *sdktrace.TracerProvider, mp *sdkmetric.MeterProvider) (connect.Interceptor, error) {
		return otelconnect.NewInterceptor(otelconnect.WithTrustRemote(), otelconnect.WithTracerProvider(tp), otelconnect.WithMeterProvider(mp))
	}, nil)
	require.Len(t, ours.spans, 14)
	require.Equal(t, theirs.spans, ours.spans)
	require.Len(t, ours.metrics, 12, "6 outcomes over 2 protocols")
	require.Equal(t, theirs.metrics, ours.metrics)
}

// BenchmarkServerCall is a unary call to a server traced and measured as
// the API's are (spans sampled by none, the duration histogram read), by
// this package's interceptor and by otelconnect's: allocs/op and B/op are
// per call, client and server together.
func BenchmarkServerCall(b *testing.B) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	for _, bc := range []struct {
		name string
		new  func(*sdktrace.TracerProvider, *sdkmetric.MeterProvider) (connect.Interceptor, error)
	}{
		{"rpcotel", func(tp *sdktrace.TracerProvider, mp *sdkmetric.MeterProvider) (connect.Interceptor, error) {
			return rpcotel.NewServer(tp, mp)
		}},
		{"otelconnect", func(tp *sdktrace.TracerProvider, mp *sdkmetric.MeterProvider) (connect.Interceptor, error) {
			return otelconnect.NewInterceptor(otelconnect.WithTrustRemote(), otelconnect.WithTracerProvider(tp), otelconnect.WithMeterProvider(mp))
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			interceptor, err := bc.new(tp, mp)
			require.NoError(b, err)
			mux := http.NewServeMux()
			mux.Handle(orchardv1connect.NewClientServiceHandler(outcomes{}, connect.WithInterceptors(interceptor)))
			srv := httptest.NewServer(mux)
			b.Cleanup(srv.Close)
			c := orchardv1connect.NewClientServiceClient(srv.Client(), srv.URL)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.GetInstance(b.Context(), connect.NewRequest(&orchardv1.GetInstanceRequest{InstanceId: "ok"})); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
