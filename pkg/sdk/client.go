package sdk

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cenkalti/backoff/v5"
	"github.com/orchardhq/orchard/internal/rpcotel"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
)

// TokenEnv is the environment variable NewClient reads the token from when
// no WithToken option is given.
const TokenEnv = "ORCHARD_TOKEN"

// Client calls an Orchard API server on behalf of one tenant (the token's).
// It is safe for concurrent use; make one and share it.
type Client struct {
	baseURL     string
	retry       RetryPolicy
	tracer      trace.Tracer
	clients     orchardv1connect.ClientServiceClient
	workers     orchardv1connect.WorkerServiceClient
	definitions orchardv1connect.DefinitionServiceClient
}

// Option configures a Client.
type Option func(*clientOptions)

type clientOptions struct {
	token       string
	tokenSet    bool
	httpClient  connect.HTTPClient
	retry       RetryPolicy
	connectOpts []connect.ClientOption
	tracer      trace.TracerProvider
	propagator  propagation.TextMapPropagator
}

// WithTracing sets the OpenTelemetry tracer provider and propagator of the
// client's spans (default: the global ones, otel.GetTracerProvider and
// otel.GetTextMapPropagator). Every call carries the caller's trace context
// to the API, so that a trace runs from the application into Orchard.
func WithTracing(tp trace.TracerProvider, p propagation.TextMapPropagator) Option {
	return func(o *clientOptions) { o.tracer, o.propagator = tp, p }
}

// WithToken sets the Bearer token (a JWT) sent with every call, instead of
// the ORCHARD_TOKEN environment variable. An empty token sends none.
func WithToken(token string) Option {
	return func(o *clientOptions) { o.token, o.tokenSet = token, true }
}

// WithHTTPClient sets the HTTP client the calls go through (default
// DefaultHTTPClient). Its Timeout, if any, must exceed the long polls
// (WaitForCompletion, PollActivityTask: up to 60 seconds); prefer contexts
// for deadlines.
func WithHTTPClient(c connect.HTTPClient) Option {
	return func(o *clientOptions) { o.httpClient = c }
}

// WithRetryPolicy sets how failed calls are retried (default
// DefaultRetryPolicy). RetryPolicy{MaxAttempts: 1} disables retries.
func WithRetryPolicy(p RetryPolicy) Option {
	return func(o *clientOptions) { o.retry = p }
}

// WithConnectOptions adds Connect client options: the gRPC protocol
// (connect.WithGRPC, over an HTTP/2 client), interceptors, compression.
func WithConnectOptions(opts ...connect.ClientOption) Option {
	return func(o *clientOptions) { o.connectOpts = append(o.connectOpts, opts...) }
}

// RetryPolicy says how a Client retries failed calls. Calls are retried
// when:
//   - the server is Unavailable, for calls that are safe to repeat (reads,
//     cancel, delete, prune, registration, Start with an instance id) and,
//     for every call, when the connection could not even be made;
//   - the server answers ResourceExhausted with a retry hint (a rate limit:
//     the request was turned away before anything was done), waiting the
//     hint, when it is at most MaxBackoff.
//
// Waits grow exponentially from InitialBackoff to MaxBackoff, with jitter,
// and never outlast the call's context.
type RetryPolicy struct {
	// MaxAttempts bounds the attempts of a call, the first included
	// (default 5); 1 disables retries.
	MaxAttempts int
	// InitialBackoff is the wait before the first retry (default 100ms).
	InitialBackoff time.Duration
	// MaxBackoff bounds every wait, and the retry hints honoured
	// (default 5s).
	MaxBackoff time.Duration
}

// DefaultRetryPolicy is the policy of a Client made without
// WithRetryPolicy.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 5, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultRetryPolicy.MaxAttempts
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = DefaultRetryPolicy.InitialBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = DefaultRetryPolicy.MaxBackoff
	}
	p.MaxBackoff = max(p.MaxBackoff, p.InitialBackoff)
	return p
}

// waits returns the waits before the retries of one call: exponential from
// InitialBackoff, capped at MaxBackoff, with jitter so that clients that
// failed together do not come back together.
func (p RetryPolicy) waits() *retryWaits {
	return &retryWaits{p: p, b: backoff.ExponentialBackOff{
		InitialInterval: p.InitialBackoff, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: p.MaxBackoff,
	}}
}

// retryWaits is the backoff of one call or one poller.
type retryWaits struct {
	p RetryPolicy
	b backoff.ExponentialBackOff
}

// next is the wait before the next retry; never more than MaxBackoff.
func (w *retryWaits) next() time.Duration { return min(w.b.NextBackOff(), w.p.MaxBackoff) }

// reset starts the waits again from InitialBackoff, after a success.
func (w *retryWaits) reset() { w.b.Reset() }

// idempotency says whether repeating a call is safe.
type idempotency bool

const (
	// idempotent: repeating the call has the effect of doing it once.
	idempotent idempotency = true
	// notIdempotent: a repeat may act twice; retried only when the request
	// surely did not reach the server (or was turned away unprocessed).
	notIdempotent idempotency = false
)

// retryWait says whether to retry after attempt n failed with err, and
// after how long.
func (w *retryWaits) retryWait(n int, err *Error, idem idempotency) (time.Duration, bool) {
	if n >= w.p.MaxAttempts {
		return 0, false
	}
	switch err.Code {
	case connect.CodeUnavailable:
		if idem == idempotent || notSent(err) {
			// The server's hint (a database restarting), within the
			// policy's longest wait.
			return max(w.next(), min(err.RetryAfter, w.p.MaxBackoff)), true
		}
	case connect.CodeResourceExhausted:
		if err.RetryAfter > 0 && err.RetryAfter <= w.p.MaxBackoff {
			// A little jitter on top of the hint, never below it.
			return err.RetryAfter + rand.N(err.RetryAfter/10+1), true
		}
	}
	return 0, false
}

// notSent reports a transport failure that happened before the request was
// written: the connection could not be made.
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// NewClient returns a client of the API at baseURL (for example
// "http://localhost:8080"). It sends nothing until a call is made.
func NewClient(baseURL string, opts ...Option) *Client {
	c, hc, copts := newServiceClient(baseURL, opts)
	c.clients = orchardv1connect.NewClientServiceClient(hc, c.baseURL, copts...)
	c.workers = orchardv1connect.NewWorkerServiceClient(hc, c.baseURL, copts...)
	c.definitions = orchardv1connect.NewDefinitionServiceClient(hc, c.baseURL, copts...)
	return c
}

// DefaultHTTPClient is the HTTP client of the clients made without
// WithHTTPClient: http.DefaultTransport's settings, but for the idle
// connections it keeps per host, which are 2 there. A worker runs many
// tasks at once, each with its long poll, heartbeats and completion, and a
// client starts and waits for many instances at once: with 2, most of
// their calls would open a connection and close it after.
var DefaultHTTPClient = &http.Client{Transport: defaultTransport()}

func defaultTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 0, 1024
	return t
}

// newServiceClient resolves the options and returns a Client (its retry
// policy and URL) with what the Connect clients of its services need.
func newServiceClient(baseURL string, opts []Option) (*Client, connect.HTTPClient, []connect.ClientOption) {
	o := clientOptions{httpClient: DefaultHTTPClient, retry: DefaultRetryPolicy}
	for _, opt := range opts {
		opt(&o)
	}
	if !o.tokenSet {
		o.token = os.Getenv(TokenEnv)
	}
	baseURL = strings.TrimRight(baseURL, "/")
	tp, propagator := o.tracer, o.propagator
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if propagator == nil {
		propagator = otel.GetTextMapPropagator()
	}
	tracer := tp.Tracer("github.com/orchardhq/orchard/pkg/sdk")
	// Spans only: metrics are the application's to choose.
	copts := append([]connect.ClientOption{connect.WithInterceptors(rpcotel.ClientInterceptor(tracer, propagator), bearer(strings.TrimSpace(o.token)))},
		o.connectOpts...)
	return &Client{baseURL: baseURL, retry: o.retry.withDefaults(), tracer: tracer}, oneWrite{o.httpClient}, copts
}

// BaseURL is the API's URL the client calls.
func (c *Client) BaseURL() string { return c.baseURL }

// bearer puts the token in every request's Authorization header.
func bearer(token string) connect.UnaryInterceptorFunc {
	header := "Bearer " + token
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if token != "" {
				req.Header()["Authorization"] = []string{header}
			}
			return next(ctx, req)
		}
	}
}

// call makes one RPC with the client's retry policy, and maps its failure
// to an *Error.
func call[Req, Res any](ctx context.Context, c *Client, idem idempotency,
	rpc func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), msg *Req,
) (*Res, error) {
	res, _, err := callCounted(ctx, c, idem, rpc, msg)
	return res, err
}

// callCounted is call that also tells how many attempts it made.
func callCounted[Req, Res any](ctx context.Context, c *Client, idem idempotency,
	rpc func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), msg *Req,
) (*Res, int, error) {
	waits := c.retry.waits()
	for attempt := 1; ; attempt++ {
		resp, err := rpc(ctx, connect.NewRequest(msg))
		if err == nil {
			return resp.Msg, attempt, nil
		}
		e := apiError(err).(*Error)
		callerContext(ctx, e)
		wait, retry := waits.retryWait(attempt, e, idem)
		if !retry || !sleep(ctx, wait) {
			return nil, attempt, e
		}
	}
}

// callerContext makes a failure caused by the caller's context match that
// context's error, also when the server noticed first: the deadline travels
// with the call, so the server may answer DeadlineExceeded a moment before
// the caller's own context expires.
func callerContext(ctx context.Context, e *Error) {
	switch {
	case errors.Is(e, context.Canceled), errors.Is(e, context.DeadlineExceeded):
	case e.Code == connect.CodeDeadlineExceeded && hasDeadline(ctx):
		e.cause = errors.Join(e.cause, context.DeadlineExceeded)
	case e.Code == connect.CodeCanceled && ctx.Err() != nil:
		e.cause = errors.Join(e.cause, ctx.Err())
	}
}

func hasDeadline(ctx context.Context) bool {
	_, ok := ctx.Deadline()
	return ok
}

// sleep waits d, or less when ctx ends first; it reports whether the whole
// wait passed. It does not start a wait that would outlast ctx's deadline.
func sleep(ctx context.Context, d time.Duration) bool {
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
