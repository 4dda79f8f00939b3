// Package rpcotel traces Connect calls, and measures those a server
// handles, as otelconnect does (the same span names, kinds, attributes and
// statuses, the same rpc.server.call.duration histogram), for unary calls,
// the only kind Orchard's services have. A call's attributes, span options
// and metric attribute set are made once per procedure and outcome, not at
// every call: most spans are recorded by nobody, and a measurement needs
// nothing new but its duration.
package rpcotel

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/rpcconv"
	"go.opentelemetry.io/otel/trace"
)

// ClientInterceptor makes each call a client span named after its
// procedure, and carries the span's trace context to the server.
func ClientInterceptor(tracer trace.Tracer, propagator propagation.TextMapPropagator) connect.UnaryInterceptorFunc {
	var procs procedures
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			p := procs.of(req.Spec().Procedure, req.Peer().Protocol, req.Peer().Addr, trace.SpanKindClient, nil)
			ctx, span := tracer.Start(ctx, p.name, p.start...)
			defer span.End()
			propagator.Inject(ctx, propagation.HeaderCarrier(req.Header()))
			res, err := next(ctx, req)
			if span.IsRecording() {
				span.SetAttributes(p.outcome(err).attrs...)
				span.SetStatus(clientStatus(err))
			}
			return res, err
		}
	}
}

// Server is a Connect handler interceptor: each call a server span named
// after its procedure, in the caller's trace (trusted), and a measurement
// of its duration in rpc.server.call.duration. Streams, which no service
// has, go through otelconnect's interceptor.
type Server struct {
	connect.Interceptor // streams
	tracer              trace.Tracer
	propagator          propagation.TextMapPropagator
	duration            metric.Float64Histogram
	procs               procedures
}

// NewServer returns a server interceptor reporting to tp and mp (nil: the
// global ones).
func NewServer(tp trace.TracerProvider, mp metric.MeterProvider) (*Server, error) {
	opts := []otelconnect.Option{otelconnect.WithTrustRemote()}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	opts = append(opts, otelconnect.WithTracerProvider(tp), otelconnect.WithMeterProvider(mp))
	streams, err := otelconnect.NewInterceptor(opts...)
	if err != nil {
		return nil, err
	}
	inst := rpcconv.ServerCallDuration{}
	duration, err := mp.Meter(scope).Float64Histogram(inst.Name(), metric.WithUnit(inst.Unit()), metric.WithDescription(inst.Description()),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10))
	if err != nil {
		return nil, err
	}
	return &Server{Interceptor: streams, tracer: tp.Tracer(scope), propagator: otel.GetTextMapPropagator(), duration: duration}, nil
}

// scope is the instrumentation scope of the server's spans and metric.
const scope = "github.com/orchardhq/orchard/internal/rpcotel"

// WrapUnary traces and measures a unary call.
func (s *Server) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		var res connect.AnyResponse
		err := s.serve(ctx, req.Spec().Procedure, req.Peer().Protocol, req.Header(), start, nil, func(ctx context.Context) (err error) {
			res, err = next(ctx, req)
			return err
		})
		return res, err
	}
}

// Unhandled traces and measures a unary call that its Connect handler never
// sees, as WrapUnary would have: an http.Handler in front of it answers the
// call from its headers alone (protocol is a connect.Protocol constant).
// The span starts at start; answer runs within it and returns the call's
// outcome, then the span ends and the duration is measured, before the
// caller writes the answer, as WrapUnary's end before Connect writes it.
func (s *Server) Unhandled(ctx context.Context, proc, protocol string, header http.Header, start time.Time, answer func(context.Context) error) error {
	return s.serve(ctx, proc, protocol, header, start, []trace.SpanStartOption{trace.WithTimestamp(start)}, answer)
}

// serve runs a server call within its span and measures it.
func (s *Server) serve(ctx context.Context, proc, protocol string, header http.Header, start time.Time, opts []trace.SpanStartOption,
	call func(context.Context) error) error {
	p := s.procs.of(proc, protocol, "", trace.SpanKindServer, s.duration)
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = s.propagator.Extract(ctx, propagation.HeaderCarrier(header))
	}
	if opts != nil {
		opts = append(opts, p.start...)
	} else {
		opts = p.start
	}
	ctx, span := s.tracer.Start(ctx, p.name, opts...)
	defer span.End()
	err := call(ctx)
	o := p.outcome(err)
	if span.IsRecording() {
		span.SetAttributes(o.attrs...)
		span.SetStatus(serverStatus(err))
	}
	s.duration.Record(ctx, time.Since(start).Seconds(), o.record...)
	return err
}

// procedures are the procedures called so far, by name and protocol: as
// many as the services have, times the protocols.
type procedures struct{ m sync.Map }

type procedureKey struct{ procedure, protocol string }

// procedure is what the spans and measurements of a procedure's calls
// share.
type procedure struct {
	name  string
	start []trace.SpanStartOption
	attrs []attribute.KeyValue // those known before the call
	// outcomes by Connect code (0: success; notModified); others are
	// made at the call.
	outcomes [notModified + 1]outcome
	measured bool
}

// notModified indexes the outcome of a "not modified" error, after the
// Connect codes (1 to 16).
const notModified = 17

type outcome struct {
	attrs  []attribute.KeyValue
	record []metric.RecordOption
}

// of is the procedure called over protocol; peer is the client's server
// (ignored for server spans).
func (ps *procedures) of(proc, protocol, peer string, kind trace.SpanKind, measured metric.Float64Histogram) *procedure {
	key := procedureKey{proc, protocol}
	if p, ok := ps.m.Load(key); ok {
		return p.(*procedure)
	}
	name := strings.TrimLeft(key.procedure, "/")
	attrs := []attribute.KeyValue{semconv.RPCSystemNameKey.String(system(key.protocol)), semconv.RPCMethodKey.String(name)}
	if addr := peer; kind == trace.SpanKindClient && addr != "" {
		// A client's peer is its server, the same at every call.
		host, port, err := net.SplitHostPort(addr)
		if n, perr := strconv.Atoi(port); err == nil && perr == nil {
			attrs = append(attrs, semconv.ServerAddressKey.String(host), semconv.ServerPortKey.Int(n))
		} else {
			attrs = append(attrs, semconv.ServerAddressKey.String(addr))
		}
	}
	attrs = slices.Clip(attrs)
	p := &procedure{
		name:     name,
		start:    []trace.SpanStartOption{trace.WithAttributes(attrs...), trace.WithSpanKind(kind)},
		attrs:    attrs,
		measured: measured != nil,
	}
	p.outcomes[0] = p.newOutcome(nil)
	for c := connect.CodeCanceled; c <= connect.CodeUnauthenticated; c++ {
		p.outcomes[c] = p.newOutcome(connect.NewError(c, nil))
	}
	p.outcomes[notModified] = p.newOutcome(connect.NewNotModifiedError(nil))
	actual, _ := ps.m.LoadOrStore(key, p)
	return actual.(*procedure)
}

// outcome is the attributes and measurement options of a call that
// returned err.
func (p *procedure) outcome(err error) outcome {
	switch code := connect.CodeOf(err); {
	case err == nil:
		return p.outcomes[0]
	case connect.IsNotModifiedError(err):
		return p.outcomes[notModified]
	case code >= connect.CodeCanceled && code <= connect.CodeUnauthenticated:
		return p.outcomes[code]
	default:
		return p.newOutcome(err)
	}
}

func (p *procedure) newOutcome(err error) outcome {
	attrs := slices.Clip(append(p.attrs, status(err)...))
	o := outcome{attrs: attrs}
	if p.measured {
		o.record = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrs...))}
	}
	return o
}

// status is the attributes of a call's outcome.
func status(err error) []attribute.KeyValue {
	switch {
	case err == nil:
		return []attribute.KeyValue{semconv.RPCResponseStatusCodeKey.String("OK")}
	case connect.IsNotModifiedError(err):
		return []attribute.KeyValue{semconv.RPCResponseStatusCodeKey.String("OK"), semconv.HTTPResponseStatusCodeKey.Int(http.StatusNotModified)}
	default:
		// gRPC's canonical names, e.g. DEADLINE_EXCEEDED.
		code := strings.ToUpper(connect.CodeOf(err).String())
		return []attribute.KeyValue{semconv.RPCResponseStatusCodeKey.String(code), semconv.ErrorTypeKey.String(code)}
	}
}

// system names a Connect protocol as OpenTelemetry's conventions do.
func system(protocol string) string {
	switch protocol {
	case connect.ProtocolGRPC, connect.ProtocolGRPCWeb:
		return "grpc"
	case connect.ProtocolConnect:
		return "connectrpc"
	default:
		return protocol
	}
}

// clientStatus is a client span's status after a call that returned err.
func clientStatus(err error) (codes.Code, string) {
	if err == nil || connect.IsNotModifiedError(err) {
		return codes.Unset, ""
	}
	if ce := new(connect.Error); errors.As(err, &ce) {
		return codes.Error, ce.Message()
	}
	return codes.Error, err.Error()
}

// serverStatus is a server span's status after a call that returned err:
// an error only for the codes that say the server failed.
func serverStatus(err error) (codes.Code, string) {
	if err == nil || connect.IsNotModifiedError(err) {
		return codes.Unset, ""
	}
	ce := new(connect.Error)
	if !errors.As(err, &ce) {
		return codes.Error, err.Error()
	}
	switch ce.Code() {
	case connect.CodeUnknown, connect.CodeDeadlineExceeded, connect.CodeUnimplemented, connect.CodeInternal,
		connect.CodeUnavailable, connect.CodeDataLoss:
		return codes.Error, ce.Message()
	default:
		return codes.Unset, ""
	}
}
