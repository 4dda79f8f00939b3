package api

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"connectrpc.com/validate"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/orchardhq/orchard/internal/rpcotel"
	"github.com/orchardhq/orchard/pkg/notify"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
)

// Store is what the API needs of the store: the whole contract and the
// usage views.
type Store interface {
	store.Store
	store.Usage
	store.Janitor
}

// Config configures a Server. Zero fields take the defaults.
type Config struct {
	// Store holds everything; required.
	Store Store
	// Verifier checks the Bearer tokens; required.
	Verifier *tenancy.Verifier
	// Minter signs the tokens AdminService.MintToken issues; nil: MintToken
	// answers Unimplemented.
	Minter *tenancy.Minter
	// Addr is where Start listens (default ":8080").
	Addr string
	// TokenKey signs page tokens and task tokens. API servers that serve the
	// same tenants must share it; empty: a random key per process, so
	// tokens survive neither a restart nor a load balancer.
	TokenKey []byte
	// Logger receives one line per call (procedure, tenant, subject, code,
	// duration, trace id): at info for errors, at debug for successes.
	Logger *slog.Logger
	// TracerProvider and MeterProvider default to the global ones.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// RateLimiter holds the tenants' request buckets; default a new one.
	RateLimiter *tenancy.RateLimiter
	// CallShare bounds the tenants' calls in flight in this process, long
	// polls aside, and shares them fairly when they are more (see
	// tenancy.FairShare); default DefaultCallsInFlight slots, with at most
	// DefaultCallsWaiting calls of a tenant waiting, of
	// DefaultCallBytesWaiting bytes together. Keep it below the
	// database connections the API has: the share is then where calls
	// queue, instead of the pool, which serves them in arrival order.
	CallShare *tenancy.FairShare
	// TenantCacheTTL is how long a tenant's row (state, limits) is reused
	// before it is read again (default 2s): how late a suspension or a new
	// limit takes effect on other servers.
	TenantCacheTTL time.Duration
	// MaxMessageBytes bounds a request message (default 4 MiB). Payload
	// fields are bounded at 256 KiB each by validation.
	MaxMessageBytes int
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout are the
	// HTTP server's (defaults 5s, 30s, 90s, 120s). WriteTimeout must exceed
	// the longest long poll (60s).
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// Janitor queues work for the janitor (retention runs, erasures,
	// graceful deletes); nil: those calls answer Unavailable.
	Janitor JanitorQueue
	// EraseGrace is how long a tenant's erasure waits after its suspension
	// (default EraseGrace).
	EraseGrace time.Duration
	// MinPoll and MaxPoll bound the store polling of the long polls
	// (WaitForCompletion, PollActivityTask): the wait doubles from MinPoll
	// to MaxPoll (defaults 5ms and 250ms). A hint from Notifier ends a
	// wait early.
	MinPoll, MaxPoll time.Duration
	// Notifier carries hints between the API and the dispatchers: the API
	// sends one when it queues messages for an instance (start, event,
	// cancel, an activity's result), and its long polls wake on the hints
	// of scheduled tasks and ended instances. Share one with the
	// dispatchers of this process (default: none, every wait polls).
	Notifier notify.Notifier
	// Handoff, shared with the dispatcher of this process, lets its acks
	// hand the tasks they schedule to the PollActivityTasks waiting here,
	// and this API's starts and task completions that find a loop idle
	// run the turn of the instance they make due in their own transaction,
	// in the loop's place, with no claim (see notify.Handoff). Nil: none.
	Handoff *notify.Handoff
	// Hinted says that the dispatchers' hints reach Notifier: they run in
	// this process, or hints cross processes. A WaitForCompletion then
	// reads its instance when it starts (not when this server started the
	// instance: the start subscribed to its end, see endWatches) and on
	// the hint of its end, and polls only every MaxPoll, for a lost hint,
	// instead of doubling from MinPoll.
	Hinted bool
	// Console, when set, is served at /console/ beside the API: the web
	// console (services/console), whose pages call this API like any
	// client. Nil: no console.
	Console http.Handler
}

func (c *Config) withDefaults() error {
	if c.Store == nil {
		return errors.New("api: no store")
	}
	if c.Verifier == nil {
		return errors.New("api: no token verifier")
	}
	c.Addr = cmp.Or(c.Addr, ":8080")
	if len(c.TokenKey) == 0 {
		c.TokenKey = make([]byte, 32)
		if _, err := rand.Read(c.TokenKey); err != nil {
			return fmt.Errorf("api: token key: %w", err)
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Notifier == nil {
		c.Notifier = notify.Off{}
	}
	if c.RateLimiter == nil {
		c.RateLimiter = tenancy.NewRateLimiter(tenancy.RateLimiterConfig{})
	}
	if c.CallShare == nil {
		c.CallShare = tenancy.NewFairShare(DefaultCallsInFlight, DefaultCallsWaiting, DefaultCallBytesWaiting)
	}
	c.TenantCacheTTL = cmp.Or(c.TenantCacheTTL, 2*time.Second)
	c.EraseGrace = cmp.Or(c.EraseGrace, EraseGrace)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, 4<<20)
	c.ReadHeaderTimeout = cmp.Or(c.ReadHeaderTimeout, 5*time.Second)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, 30*time.Second)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, 90*time.Second)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, 120*time.Second)
	c.MinPoll = cmp.Or(c.MinPoll, 5*time.Millisecond)
	c.MaxPoll = cmp.Or(c.MaxPoll, 250*time.Millisecond)
	if c.MaxPoll < c.MinPoll || c.TenantCacheTTL < 0 || c.MaxMessageBytes < 0 {
		return errors.New("api: invalid config (poll bounds, cache TTL or message size)")
	}
	if c.WriteTimeout <= maxLongPoll {
		return fmt.Errorf("api: WriteTimeout %v must exceed the longest long poll (%v)", c.WriteTimeout, maxLongPoll)
	}
	return nil
}

// Server is the API server.
type Server struct {
	cfg     Config
	log     *slog.Logger
	store   Store
	tokens  tokenCodec
	tenants *tenantCache
	// versions: definition versions known registered (see resolve).
	versions *versionCache
	handler  http.Handler
	health   *grpchealth.StaticChecker
	// otel traces and measures the calls, those the rate gate answers too.
	otel *rpcotel.Server

	// draining closes at Stop: long polls end early with what they have.
	draining  chan struct{}
	drainOnce sync.Once
	// longPolls counts the long polls waiting; longPollQueries the store
	// queries they made.
	longPolls       atomic.Int64
	longPollQueries atomic.Int64
	notifier        notify.Notifier
	handoff         *notify.Handoff
	// ends: the starts' end watches, when Hinted; nil otherwise.
	ends *endWatches

	mu       sync.Mutex
	http     *http.Server
	ln       net.Listener
	done     chan struct{} // closed when Serve returned
	serveErr error
}

// compressMinBytes is the smallest response the API compresses for a
// client that accepts gzip. Setting up a gzip writer costs more CPU than
// compressing a small message saves on the wire, and most answers (an
// instance, a task, an acknowledgement) are a few hundred bytes: at one
// orchestration in flight, compressing them took a tenth of the API
// process's CPU.
const compressMinBytes = 4 << 10

// New checks cfg and builds the server's handlers.
func New(cfg Config) (*Server, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		store:    cfg.Store,
		tokens:   tokenCodec{key: cfg.TokenKey},
		tenants:  newTenantCache(cfg.Store, cfg.TenantCacheTTL, maxCachedTenants),
		versions: newVersionCache(),
		draining: make(chan struct{}),
		notifier: cfg.Notifier,
		handoff:  cfg.Handoff,
	}
	if cfg.Hinted {
		s.ends = newEndWatches(cfg.Notifier, cfg.Handoff, endWatchTTL, maxEndWatch)
	}
	// The caller's trace context is trusted: a tenant's spans and ours make
	// one trace, which is what the tenant's operators want to follow.
	var err error
	s.otel, err = rpcotel.NewServer(cfg.TracerProvider, cfg.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("api: telemetry: %w", err)
	}
	opts := []connect.HandlerOption{
		connect.WithInterceptors(
			s.otel,
			s.errorsAndLogs(),
			s.authenticate(),
			s.authorize(),
			s.admitTenant(),
			validate.NewInterceptor(),
		),
		connect.WithReadMaxBytes(cfg.MaxMessageBytes),
		connect.WithCompressMinBytes(compressMinBytes),
		jsonCodec{name: "json"}.option(), jsonCodec{name: "json; charset=utf-8"}.option(),
	}
	// The tenants' services refuse a call past the request rate before
	// they read its body (rateGate); the Admin service's calls have no rate.
	gated := s.gated(connect.NewErrorWriter(opts...))
	mux := http.NewServeMux()
	mux.Handle(gated(orchardv1connect.NewClientServiceHandler(&clientService{s}, opts...)))
	mux.Handle(gated(orchardv1connect.NewWorkerServiceHandler(&workerService{s}, opts...)))
	mux.Handle(gated(orchardv1connect.NewDefinitionServiceHandler(&definitionService{s}, opts...)))
	mux.Handle(gated(orchardv1connect.NewTenantServiceHandler(&tenantService{s}, opts...)))
	mux.Handle(orchardv1connect.NewAdminServiceHandler(&adminService{s}, opts...))
	mux.Handle(s.newHealth())
	reflector := grpcreflect.NewStaticReflector(slices.Concat(servedServices, []string{grpchealth.HealthV1ServiceName})...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	if cfg.Console != nil {
		mux.Handle("/console/", cfg.Console)
	}
	s.handler = mux
	return s, nil
}

// LongPollQueries is the number of store queries the long polls have made
// (each poll's first and every one after a wait): what hints save.
func (s *Server) LongPollQueries() int64 { return s.longPollQueries.Load() }

// Handler serves every service; mount it on a server that speaks HTTP/1.1
// and unencrypted HTTP/2 (Protocols), or use Start.
func (s *Server) Handler() http.Handler { return s.handler }

// Protocols are the protocols the API is served with: HTTP/1.1 (Connect,
// gRPC-Web) and unencrypted HTTP/2 (gRPC), on one port.
func Protocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// HTTPServer returns an http.Server for the handler with the configured
// timeouts and protocols, not yet listening.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Addr:              s.cfg.Addr,
		Handler:           s.handler,
		Protocols:         Protocols(),
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// Start listens on Addr and serves in the background until Stop.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.http != nil {
		return errors.New("api: already started")
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("api: listen: %w", err)
	}
	s.http, s.ln, s.done = s.HTTPServer(), ln, make(chan struct{})
	srv, done := s.http, s.done
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.serveErr = err
		}
	}()
	s.log.InfoContext(ctx, "api: serving", slog.String("addr", ln.Addr().String()))
	return nil
}

// Addr is the address Start listens on (with the port picked, for ":0").
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Stop drains the server: it reports NOT_SERVING (Drain), stops accepting
// calls, ends the long polls and health watches early, and waits for the
// calls in flight until ctx ends (then closes the connections).
func (s *Server) Stop(ctx context.Context) error {
	s.Drain()
	s.drainOnce.Do(func() { close(s.draining) })
	s.mu.Lock()
	srv, done := s.http, s.done
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
	}
	<-done
	s.tenants.stop()
	s.versions.stop()
	s.ends.stop()
	return errors.Join(err, s.serveErr)
}
