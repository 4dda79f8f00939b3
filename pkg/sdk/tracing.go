package sdk

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// callTracing makes each call a client span named after its procedure,
// with the attributes of OpenTelemetry's RPC conventions (those
// otelconnect sets), and carries the span's trace context to the API,
// which continues it. A procedure's attributes and span options are made
// at its first call: most calls' spans are recorded by nobody, and a
// recorded one needs nothing new but its outcome. The API has unary
// procedures only.
type callTracing struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	procedures sync.Map // procedure -> *procedureTrace; as many as the services have
}

// procedureTrace is what the spans of one procedure's calls share.
type procedureTrace struct {
	name  string
	start []trace.SpanStartOption
	attrs []attribute.KeyValue // those known before the call
	ok    []attribute.KeyValue // those of a success
}

func newCallTracing(tracer trace.Tracer, propagator propagation.TextMapPropagator) connect.UnaryInterceptorFunc {
	t := &callTracing{tracer: tracer, propagator: propagator}
	return t.wrap
}

func (t *callTracing) wrap(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		p := t.procedure(req)
		ctx, span := t.tracer.Start(ctx, p.name, p.start...)
		defer span.End()
		t.propagator.Inject(ctx, propagation.HeaderCarrier(req.Header()))
		res, err := next(ctx, req)
		if span.IsRecording() {
			span.SetAttributes(p.outcome(err)...)
			span.SetStatus(spanStatus(err))
		}
		return res, err
	}
}

func (t *callTracing) procedure(req connect.AnyRequest) *procedureTrace {
	spec := req.Spec()
	if p, ok := t.procedures.Load(spec.Procedure); ok {
		return p.(*procedureTrace)
	}
	name := strings.TrimLeft(spec.Procedure, "/")
	attrs := []attribute.KeyValue{semconv.RPCSystemNameKey.String(rpcSystem(req.Peer().Protocol)), semconv.RPCMethodKey.String(name)}
	if addr := req.Peer().Addr; addr != "" {
		host, port, err := net.SplitHostPort(addr)
		if n, perr := strconv.Atoi(port); err == nil && perr == nil {
			attrs = append(attrs, semconv.ServerAddressKey.String(host), semconv.ServerPortKey.Int(n))
		} else {
			attrs = append(attrs, semconv.ServerAddressKey.String(addr))
		}
	}
	attrs = slices.Clip(attrs)
	p := &procedureTrace{
		name:  name,
		start: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...)},
		attrs: attrs,
		ok:    slices.Clip(append(attrs, semconv.RPCResponseStatusCodeKey.String("OK"))),
	}
	actual, _ := t.procedures.LoadOrStore(spec.Procedure, p)
	return actual.(*procedureTrace)
}

// outcome is the span's attributes once the call returned err.
func (p *procedureTrace) outcome(err error) []attribute.KeyValue {
	switch {
	case err == nil:
		return p.ok
	case connect.IsNotModifiedError(err):
		return append(p.ok, semconv.HTTPResponseStatusCodeKey.Int(http.StatusNotModified))
	default:
		// gRPC's canonical names, e.g. DEADLINE_EXCEEDED.
		code := strings.ToUpper(connect.CodeOf(err).String())
		return append(p.attrs, semconv.RPCResponseStatusCodeKey.String(code), semconv.ErrorTypeKey.String(code))
	}
}

// rpcSystem names a Connect protocol as OpenTelemetry's conventions do.
func rpcSystem(protocol string) string {
	switch protocol {
	case connect.ProtocolGRPC, connect.ProtocolGRPCWeb:
		return "grpc"
	case connect.ProtocolConnect:
		return "connectrpc"
	default:
		return protocol
	}
}

// spanStatus is a client span's status after a call that returned err.
func spanStatus(err error) (codes.Code, string) {
	if err == nil || connect.IsNotModifiedError(err) {
		return codes.Unset, ""
	}
	if ce := new(connect.Error); errors.As(err, &ce) {
		return codes.Error, ce.Message()
	}
	return codes.Error, err.Error()
}
