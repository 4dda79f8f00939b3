package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
)

// call is what the interceptors learn about a call, for its log line: the
// outer interceptor creates it, the inner ones fill it in.
type call struct {
	tenant  string
	subject string
}

type callKey struct{}

func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	if c == nil {
		return &call{}
	}
	return c
}

// errorsAndLogs maps every error of the chain and the handler to a Connect
// error and logs the call (endCall).
func (s *Server) errorsAndLogs() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			c := &call{}
			ctx = context.WithValue(ctx, callKey{}, c)
			start := time.Now()
			resp, err := next(ctx, req)
			return resp, s.endCall(ctx, req.Spec().Procedure, c, start, err)
		}
	}
}

// endCall maps a call's error to a Connect error (connectError, the one
// place) and logs the call with its procedure, tenant, code and duration;
// the process's handler adds the ids of the call's span (telemetry's
// NewLogHandler), as to every line logged with the call's context.
func (s *Server) endCall(ctx context.Context, procedure string, c *call, start time.Time, err error) error {
	// One line per call: at info for errors, so that operators see what
	// went wrong for whom; at debug for successes, and for calls refused
	// by the request rate: a tenant past its rate is refused hundreds of
	// times a second, a line each would cost more than the refusal, and
	// the RPC metrics count them by code.
	level, code := slog.LevelDebug, "ok"
	if err != nil {
		// connectError logs what it cannot show the client (never a
		// refusal by the rate) with the call's attributes.
		log := s.log
		if !overRate(err) {
			level = slog.LevelInfo
			log = slog.New(s.log.Handler().WithAttrs(callAttrs(procedure, c)))
		}
		err = connectError(ctx, log, err)
		code = connect.CodeOf(err).String()
	}
	if !s.log.Enabled(ctx, level) {
		// A success at info, the usual case: no attributes to make.
		return err
	}
	attrs := append(callAttrs(procedure, c), slog.String("subject", c.subject), slog.String("code", code),
		slog.Duration("duration", time.Since(start)))
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	s.log.LogAttrs(ctx, level, "api: call", attrs...)
	return err
}

// callAttrs are the attributes of every line about a call: its procedure
// and, once known, its tenant; room is left for the call's line.
func callAttrs(procedure string, c *call) []slog.Attr {
	attrs := make([]slog.Attr, 1, 8)
	attrs[0] = slog.String("procedure", procedure)
	if c.tenant != "" {
		attrs = append(attrs, slog.String("tenant", c.tenant))
	}
	return attrs
}

// overRate reports whether err is the rate limiter's refusal.
func overRate(err error) bool {
	ex, ok := errors.AsType[*tenancy.ExhaustedError](err)
	return ok && (ex.Resource == tenancy.ResourceRequests || ex.Resource == tenancy.ResourceStarts)
}

// authenticate verifies the Bearer token, unless the rate gate did, and
// puts its identity in the context. No token, or a token that does not
// verify, is Unauthenticated.
func (s *Server) authenticate() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			id, err := s.identity(ctx, req.Header())
			if err != nil {
				return nil, err
			}
			c := callFrom(ctx)
			c.tenant, c.subject = id.Tenant, id.Subject
			return next(tenancy.WithIdentity(ctx, id), req)
		}
	}
}

// identity is the verified identity of a call's token.
func (s *Server) identity(ctx context.Context, header http.Header) (*tenancy.Identity, error) {
	if a := admissionFrom(ctx); a != nil {
		return a.id, a.err
	}
	token, err := bearer(header.Get("Authorization"))
	if err != nil {
		return nil, err
	}
	return s.cfg.Verifier.Verify(ctx, token)
}

// bearer takes the token out of an Authorization header.
func bearer(header string) (string, error) {
	if header == "" {
		return "", fmt.Errorf("%w: %w: no Authorization header", tenancy.ErrUnauthenticated, tenancy.ErrTokenMissing)
	}
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", fmt.Errorf("%w: %w: the Authorization header is not \"Bearer <token>\"", tenancy.ErrUnauthenticated, tenancy.ErrTokenMalformed)
	}
	return strings.TrimSpace(token), nil
}

// authorize checks the caller's roles against the procedure's rule.
func (s *Server) authorize() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			rule, ok := accessRules[req.Spec().Procedure]
			if !ok {
				return nil, fmt.Errorf("%w: the procedure has no access rule", tenancy.ErrPermissionDenied)
			}
			if _, err := tenancy.Authorize(ctx, rule.roles...); err != nil {
				return nil, err
			}
			return next(ctx, req)
		}
	}
}

type tenantKey struct{}

// requestSize is the size of a call's request message: what the call holds
// while it waits for a slot of the share.
func requestSize(req connect.AnyRequest) int64 {
	if m, ok := req.Any().(proto.Message); ok {
		return int64(proto.Size(m))
	}
	return 0
}

// admitTenant lets a tenant's call through when admit does. Then, long
// polls aside, the call takes a slot of the process's share of calls in
// flight (Config.CallShare), where a tenant past its share waits behind the
// others. The tenant's row goes into the context for the handlers. Admin
// calls have no tenant of their own and skip this.
func (s *Server) admitTenant() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			rule := accessRules[req.Spec().Procedure]
			if rule.platform {
				return next(ctx, req)
			}
			id, _ := tenancy.IdentityFrom(ctx)
			t, err := s.admit(ctx, id, rule)
			if err != nil {
				return nil, err
			}
			if !rule.longPoll {
				release, err := s.cfg.CallShare.Acquire(ctx, id.Tenant, requestSize(req))
				if err != nil {
					return nil, err
				}
				defer release()
			}
			return next(context.WithValue(ctx, tenantKey{}, t), req)
		}
	}
}

// admit returns the caller's tenant when it is registered, active (a
// suspended tenant's tenant-admin may still read) and within its request
// rate: its workers' calls and its other calls each have a bucket of that
// rate (see access.worker), and its starts one more (see access.start). It
// runs once per call, taking one token of each: in the rate gate, which
// passes its answer on (see admission), or here.
func (s *Server) admit(ctx context.Context, id *tenancy.Identity, rule access) (*store.Tenant, error) {
	if a := admissionFrom(ctx); a != nil && a.decided {
		return a.tenant, a.admitErr
	}
	t, err := s.tenants.get(ctx, id.Tenant)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: tenant %q is not registered", tenancy.ErrPermissionDenied, id.Tenant)
	}
	if err != nil {
		return nil, err
	}
	if t.State != store.TenantActive && !(rule.read && id.Has(tenancy.RoleTenantAdmin)) {
		return nil, fmt.Errorf("%w: tenant %q is %s", tenancy.ErrPermissionDenied, id.Tenant, t.State)
	}
	if err := s.cfg.RateLimiter.Allow(requestBucket(id.Tenant, rule), requestRate(t.Limits)); err != nil {
		return nil, err
	}
	if rule.start {
		if err := s.cfg.RateLimiter.Allow(startBucket(id.Tenant), startRate(t.Limits)); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// tenantOf is the calling tenant, as admitTenant found it.
func tenantOf(ctx context.Context) *store.Tenant {
	t, _ := ctx.Value(tenantKey{}).(*store.Tenant)
	if t == nil {
		// Unreachable behind admitTenant; fail closed.
		panic("api: tenant handler called without a tenant")
	}
	return t
}
