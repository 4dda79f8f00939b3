package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
)

// rateGate answers, from its headers alone, the calls of a tenant past its
// request rate. Connect reads and decodes a request's body before any
// interceptor runs, so a call admitTenant refuses costs what its body costs,
// up to MaxMessageBytes, at whatever rate a hostile tenant sends; the gate's
// refusal never reads the body. Every other call goes on to the
// interceptors, with what the gate learned (admission), and they answer it
// as they would without the gate: a request the handler may refuse before
// its interceptors (method, content type, compression), a token that does
// not verify, a caller without the role, a tenant unknown or suspended, a
// store error. Over HTTP/1.1 net/http still discards a refused call's body
// shorter than 256 KiB, to keep the connection, and closes the connection
// after a longer one.
type rateGate struct {
	s        *Server
	next     http.Handler
	refusals *refusals
}

// gated puts a rateGate in front of a service's handler.
func (s *Server) gated(w *connect.ErrorWriter) func(path string, h http.Handler) (string, http.Handler) {
	refusals := &refusals{errors: w, byCause: map[tenancy.ExhaustedError]*refusal{}}
	return func(path string, h http.Handler) (string, http.Handler) {
		return path, &rateGate{s: s, next: h, refusals: refusals}
	}
}

// admission is what the gate learned of a call, for the interceptors: they
// neither verify its token again nor admit its tenant again, which would
// take a second token of its request bucket.
type admission struct {
	// id and err are the verification of the call's token (err: none, or
	// one that does not verify).
	id  *tenancy.Identity
	err error
	// decided: the gate ran admit (the caller has the procedure's role),
	// which answered tenant and admitErr (not a refusal by the rate: the
	// gate answers those).
	decided  bool
	tenant   *store.Tenant
	admitErr error
}

type admissionKey struct{}

func admissionFrom(ctx context.Context) *admission {
	a, _ := ctx.Value(admissionKey{}).(*admission)
	return a
}

func (g *rateGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	procedure := r.URL.Path
	rule, ok := accessRules[procedure]
	protocol := unaryProtocol(r)
	if !ok || rule.platform || protocol == "" {
		g.next.ServeHTTP(w, r)
		return
	}
	s, ctx := g.s, r.Context()
	a := &admission{}
	var token string
	if token, a.err = bearer(r.Header.Get("Authorization")); a.err == nil {
		a.id, a.err = s.cfg.Verifier.Verify(ctx, token)
	}
	if a.err == nil && a.id.RequireAny(rule.roles...) == nil {
		a.tenant, a.admitErr = s.admit(ctx, a.id, rule)
		a.decided = true
	}
	if !a.decided || !overRate(a.admitErr) {
		g.next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, admissionKey{}, a)))
		return
	}
	c := &call{tenant: a.id.Tenant, subject: a.id.Subject}
	answer := g.refusals.of(ctx, s.log, a.admitErr)
	_ = s.otel.Unhandled(ctx, procedure, protocol, r.Header, start, func(ctx context.Context) error {
		return s.endCall(ctx, procedure, c, start, answer.err)
	})
	if r.ProtoMajor == 1 && r.ContentLength < 0 {
		// A body of unknown length: net/http would read up to 256 KiB of
		// it before it sends the answer, to keep the connection.
		w.Header().Set("Connection", "close")
	}
	answer.write(w, r, protocol)
}

// maxRefusals bounds the refusals kept. The hints of a tenant's refusals by
// one of its rates are whole milliseconds, up to the time its bucket takes
// to fill, and once callers keep coming most are that time; past the bound
// the refusals kept are dropped all at once, and made again.
const maxRefusals = 512

// refusals keeps what the gate answers to refusals by the rate, made once
// per cause (resource, limit, retry hint) instead of at each call: a tenant
// past its rate is refused as often as it calls, and Connect's JSON error
// with its details (each with a protojson debug copy) was a third of a
// refusal's time. An answer is only read once made, so calls share it.
type refusals struct {
	errors  *connect.ErrorWriter
	mu      sync.Mutex
	byCause map[tenancy.ExhaustedError]*refusal
}

// refusal is the answer to a refusal by the rate: the error the
// interceptors would give it, and its Connect rendering (the protocol of
// most clients; a unary Connect error is a JSON body, the same whatever the
// call), made by the first Connect call refused so.
type refusal struct {
	errors  *connect.ErrorWriter
	err     error
	once    sync.Once
	connect recorded
}

// of is the answer to a call refused with err, an *tenancy.ExhaustedError
// (overRate).
func (rs *refusals) of(ctx context.Context, log *slog.Logger, err error) *refusal {
	ex, _ := errors.AsType[*tenancy.ExhaustedError](err)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if a, ok := rs.byCause[*ex]; ok {
		return a
	}
	if len(rs.byCause) >= maxRefusals {
		clear(rs.byCause)
	}
	a := &refusal{errors: rs.errors, err: connectError(ctx, log, err)}
	rs.byCause[*ex] = a
	return a
}

// write answers a request of the protocol with the refusal.
func (a *refusal) write(w http.ResponseWriter, r *http.Request, protocol string) {
	if protocol != connect.ProtocolConnect {
		_ = a.errors.Write(w, r, a.err)
		return
	}
	a.once.Do(func() {
		a.connect.header = http.Header{}
		_ = a.errors.Write(&a.connect, r, a.err)
	})
	for k, v := range a.connect.header {
		w.Header()[k] = v
	}
	w.WriteHeader(a.connect.status)
	_, _ = w.Write(a.connect.body)
}

// recorded is a response as written: an http.ResponseWriter that keeps it.
type recorded struct {
	header http.Header
	status int
	body   []byte
}

func (rec *recorded) Header() http.Header    { return rec.header }
func (rec *recorded) WriteHeader(status int) { rec.status = status }
func (rec *recorded) Write(b []byte) (int, error) {
	rec.body = append(rec.body, b...)
	return len(b), nil
}

// unaryProtocol is the protocol (a connect.Protocol constant) of a unary
// call the handlers take as it is, by its method, content type, codec and
// compression; "" for any other request, left to the handler.
func unaryProtocol(r *http.Request) string {
	if r.Method != http.MethodPost {
		return ""
	}
	ct := r.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "application/grpc-web"):
		if grpcCodec(ct[len("application/grpc-web"):]) && knownEncoding(r.Header.Get("Grpc-Encoding")) {
			return connect.ProtocolGRPCWeb
		}
	case strings.HasPrefix(ct, "application/grpc"):
		if grpcCodec(ct[len("application/grpc"):]) && knownEncoding(r.Header.Get("Grpc-Encoding")) {
			return connect.ProtocolGRPC
		}
	case ct == "application/proto" || ct == "application/json" || ct == "application/json; charset=utf-8":
		if v := r.Header.Get("Connect-Protocol-Version"); (v == "" || v == "1") && knownEncoding(r.Header.Get("Content-Encoding")) {
			return connect.ProtocolConnect
		}
	}
	return ""
}

// grpcCodec reports whether a gRPC content type's suffix names a codec the
// handlers have.
func grpcCodec(suffix string) bool {
	return suffix == "" || suffix == "+proto" || suffix == "+json"
}

// knownEncoding reports whether a request's compression is one the
// handlers decompress.
func knownEncoding(e string) bool {
	return e == "" || e == "identity" || e == "gzip"
}
