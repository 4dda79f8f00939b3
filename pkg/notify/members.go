package notify

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/validate"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	hintsv1 "github.com/orchardhq/orchard/proto/orchard/hints/v1"
	"github.com/orchardhq/orchard/proto/orchard/hints/v1/hintsv1connect"
)

// MembersConfig configures a Members notifier.
type MembersConfig struct {
	// Address is where the other processes reach this process's Handler:
	// host:port (plain HTTP) or a URL.
	Address string
	// Waits are the kinds of hints this process has waiters for (an API:
	// Tasks and Ended; a dispatcher: Orchestrations). Others send it only
	// those.
	Waits []Kind
	// Key authenticates the calls between members; every process of a
	// deployment has the same, at least 16 bytes.
	Key []byte
	// Heartbeat is how often a process renews its membership and reads the
	// others'. Default 2 s.
	Heartbeat time.Duration
	// Expiry is how long a membership lasts when it is not renewed (the
	// process died): the others send to a dead member that long at most.
	// Default three heartbeats.
	Expiry time.Duration
	// CallTimeout bounds a Hint call: a hint late by more is worth no more
	// than the waiter's poll. Default 2 s.
	CallTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// MeterProvider receives orchard.hints (hints between processes, by
	// outcome: sent, received, failed, dropped); default the global one.
	MeterProvider metric.MeterProvider
}

// Members carries hints between processes where the database has no
// LISTEN/NOTIFY (CockroachDB): each process registers in the table
// hint_members (its address, the kinds it waits for, an expiry it renews
// every heartbeat) and sends the others hints with a Connect call, served
// by their Handler. Within this process it works like Local.
//
// Notify delivers in this process at once and queues for the others the
// hints that woke no one here (and every Ended hint), as Postgres does.
// One goroutine sends the queue in batches: an Ended hint to every member
// that waits for ends (it wakes every waiter of its instance); any other
// to one member, the first of the hint's rendezvous order over the members
// that wait for its kind, which answers with the hints that woke no waiter
// there, for the next member of their order. A worker's poll or a client's
// WaitForCompletion reaches whichever API process its load balancer
// picked, and every dispatcher claims for every tenant, so no process can
// tell which member's waiter a hint is for; trying them in turn wakes one
// waiter, where sending to all would wake one in each, all but one of
// which would query for nothing. Each member has a sender with a bounded
// backlog, so that a slow or dead member delays no other. A hint lost (a
// full backlog, a member gone) costs a poll interval, never work.
type Members struct {
	*Local
	pool    *pgxpool.Pool
	log     *slog.Logger
	id      string
	address string
	waits   int64
	token   string
	beat    time.Duration
	expiry  time.Duration
	client  *http.Client
	out     chan Topic

	mu    sync.Mutex
	peers map[string]*member

	sent, received, failed, dropped, passed atomic.Int64

	unregister metric.Registration

	// ctx lives until Close: the members' senders run on it.
	ctx  context.Context
	stop context.CancelFunc
	done sync.WaitGroup
}

// member is another live process, and the sender of its hints.
type member struct {
	address string
	waits   int64
	client  hintsv1connect.HintServiceClient
	in      chan []*hintsv1.Hint
	stop    context.CancelFunc
	// failing is set while calls to it fail, so that a dead member is
	// logged once, not once per batch.
	failing bool
}

const (
	// memberBacklog bounds the batches waiting for one member.
	memberBacklog = 64
	// defaultCallTimeout is MembersConfig.CallTimeout's default.
	defaultCallTimeout = 2 * time.Second
	// sweepEvery is how many heartbeats pass between deletes of the rows of
	// members long gone (every process sweeps; rarely, so they seldom meet).
	sweepEvery = 30
	// maxHintRequestBytes bounds a Hint call's body: a batch of maxBatch
	// hints with ids at their longest.
	maxHintRequestBytes = 512 << 10
)

// NewMembers registers this process in hint_members (on pool's database)
// and starts sending and taking hints. Mount Handler where Address points
// to; Close stops it and ends the membership.
func NewMembers(ctx context.Context, pool *pgxpool.Pool, cfg MembersConfig) (*Members, error) {
	if cfg.Address == "" {
		return nil, errors.New("hints: members: no address for the other processes to reach this one")
	}
	if len(cfg.Key) < 16 {
		return nil, errors.New("hints: members: the key must be at least 16 bytes")
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 2 * time.Second
	}
	if cfg.Expiry <= 0 {
		cfg.Expiry = 3 * cfg.Heartbeat
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = defaultCallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	var waits int64
	for _, k := range cfg.Waits {
		if k < Orchestrations || k > Ended {
			return nil, fmt.Errorf("hints: members: no kind %d", k)
		}
		waits |= 1 << k
	}
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	address := cfg.Address
	if !strings.Contains(address, "://") {
		address = "http://" + address
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 2
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	m := &Members{
		Local: NewLocal(), pool: pool, log: cfg.Logger.With("component", "hints"), id: hex.EncodeToString(id),
		address: address, waits: waits, token: "Bearer " + hex.EncodeToString(cfg.Key), beat: cfg.Heartbeat, expiry: cfg.Expiry,
		client: &http.Client{Transport: transport, Timeout: cfg.CallTimeout},
		out:    make(chan Topic, outBuffer), peers: map[string]*member{}, ctx: runCtx, stop: stop,
	}
	if err := m.instrument(cfg.MeterProvider); err != nil {
		stop()
		return nil, err
	}
	// The first heartbeat is the start's: a database without the table or
	// unreachable fails it here, not silently later.
	if err := m.heartbeat(ctx); err != nil {
		_ = m.unregister.Unregister()
		stop()
		return nil, err
	}
	m.done.Go(func() { m.beatLoop(runCtx) })
	m.done.Go(func() { m.send(runCtx) })
	return m, nil
}

// ID is this process's member id.
func (m *Members) ID() string { return m.id }

// MembersStats counts hints between processes.
type MembersStats struct {
	// Sent and Received count hints (a Tasks hint of count n counts n);
	// Failed, those whose call failed; Dropped, those not sent because a
	// queue was full; PassedOn, those a member did not take, sent on to the
	// next.
	Sent, Received, Failed, Dropped, PassedOn int64
}

// Stats is what this process has sent and taken so far.
func (m *Members) Stats() MembersStats {
	return MembersStats{Sent: m.sent.Load(), Received: m.received.Load(), Failed: m.failed.Load(), Dropped: m.dropped.Load(), PassedOn: m.passed.Load()}
}

// instrument reports Stats as the counter orchard.hints, by outcome.
func (m *Members) instrument(mp metric.MeterProvider) error {
	meter := mp.Meter("github.com/orchardhq/orchard/pkg/notify")
	hints, err := meter.Int64ObservableCounter("orchard.hints",
		metric.WithDescription("Hints between processes (--hints members), by outcome: sent, received, failed (the call failed), dropped (a queue was full), passed_on (a member woke no one with it: sent on to the next)."))
	if err != nil {
		return err
	}
	outcome := func(v string) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", v)))
	}
	sent, received, failed, dropped, passed := outcome("sent"), outcome("received"), outcome("failed"), outcome("dropped"), outcome("passed_on")
	m.unregister, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := m.Stats()
		o.ObserveInt64(hints, st.Sent, sent)
		o.ObserveInt64(hints, st.Received, received)
		o.ObserveInt64(hints, st.Failed, failed)
		o.ObserveInt64(hints, st.Dropped, dropped)
		o.ObserveInt64(hints, st.PassedOn, passed)
		return nil
	}, hints)
	return err
}

// Peers is the number of other live members this process sends to.
func (m *Members) Peers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.peers)
}

// Notify delivers the hints in this process and queues for the others
// those that woke no one here.
func (m *Members) Notify(_ context.Context, topics ...Topic) {
	for _, t := range m.Local.deliver(topics) {
		select {
		case m.out <- t:
		default:
			m.dropped.Add(1)
		}
	}
}

// Close stops sending and taking hints and deletes this process's
// membership, so that the others stop sending to it at their next
// heartbeat.
func (m *Members) Close() {
	_ = m.unregister.Unregister()
	m.stop() // and with it every member's sender
	m.done.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := m.pool.Exec(ctx, `DELETE FROM hint_members WHERE member_id = $1`, m.id); err != nil {
		m.log.Warn("hints: could not end the membership; it expires on its own", slog.Any("error", err))
	}
}

// beatLoop renews the membership and the list of the others every
// heartbeat.
func (m *Members) beatLoop(ctx context.Context) {
	t := time.NewTicker(m.beat)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Not cut by Close, which waits for it: a renewal cancelled midway
		// could still commit after Close's delete of the row.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(m.beat, m.client.Timeout))
		if err := m.heartbeat(bctx); err != nil {
			// The others drop this process once its row expires, and this
			// process keeps sending to the members it knew.
			m.log.Warn("hints: heartbeat failed", slog.Any("error", err))
		}
		if n%sweepEvery == 0 {
			if _, err := m.pool.Exec(bctx, `DELETE FROM hint_members WHERE expires_at < $1`, time.Now().Add(-time.Hour)); err != nil {
				m.log.Debug("hints: could not sweep the memberships of processes gone", slog.Any("error", err))
			}
		}
		cancel()
	}
}

// heartbeat renews this process's row and reads the live others'.
func (m *Members) heartbeat(ctx context.Context) error {
	now := time.Now()
	if _, err := m.pool.Exec(ctx, `INSERT INTO hint_members (member_id, address, kinds, expires_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (member_id) DO UPDATE SET address = excluded.address, kinds = excluded.kinds, expires_at = excluded.expires_at`,
		m.id, m.address, m.waits, now.Add(m.expiry)); err != nil {
		return fmt.Errorf("hints: register: %w", err)
	}
	rows, err := m.pool.Query(ctx, `SELECT member_id, address, kinds FROM hint_members WHERE expires_at > $1 AND member_id <> $2`, now, m.id)
	if err != nil {
		return fmt.Errorf("hints: members: %w", err)
	}
	type row struct {
		address string
		waits   int64
	}
	live := map[string]row{}
	for rows.Next() {
		var id string
		var r row
		if err := rows.Scan(&id, &r.address, &r.waits); err != nil {
			rows.Close()
			return fmt.Errorf("hints: members: %w", err)
		}
		if r.address != m.address { // an earlier run of this process, not yet expired
			live[id] = r
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("hints: members: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, p := range m.peers {
		if r, ok := live[id]; !ok || r.address != p.address {
			p.stop()
			delete(m.peers, id)
		} else {
			p.waits = r.waits
		}
	}
	for id, r := range live {
		if _, ok := m.peers[id]; ok {
			continue
		}
		pctx, stop := context.WithCancel(m.ctx)
		p := &member{
			address: r.address, waits: r.waits, stop: stop, in: make(chan []*hintsv1.Hint, memberBacklog),
			client: hintsv1connect.NewHintServiceClient(m.client, r.address),
		}
		m.peers[id] = p
		m.done.Go(func() { m.deliverTo(context.WithoutCancel(pctx), pctx, id, p) })
	}
	return nil
}

// send batches the queued hints and routes them to the members they go to
// first.
func (m *Members) send(ctx context.Context) {
	for {
		batch, ok := nextBatch(ctx, m.out)
		if !ok {
			return
		}
		m.mu.Lock()
		m.route(encodeHints(batch), "")
		m.mu.Unlock()
	}
}

// route queues hints for the members they go to next (m.mu held): an
// Ended hint to every member that waits for ends; any other
// to the member after after (the first, for "") in the hint's rendezvous
// order over the members that wait for its kind, since one waiter is what
// it wakes. A hint with no member left is dropped: every member had it.
func (m *Members) route(hints []*hintsv1.Hint, after string) {
	batches := map[string][]*hintsv1.Hint{}
	for _, h := range hints {
		kind := int64(1) << h.GetKind()
		if h.GetKind() == hintsv1.Kind_KIND_ENDED {
			for id, p := range m.peers {
				if p.waits&kind != 0 {
					batches[id] = append(batches[id], h)
				}
			}
			continue
		}
		if id := m.next(h, kind, after); id != "" {
			batches[id] = append(batches[id], h)
		}
	}
	for id, b := range batches {
		select {
		case m.peers[id].in <- b:
		default:
			m.dropped.Add(int64(countHints(b)))
		}
	}
}

// next is the member that comes after after ("": the first) in h's
// rendezvous order over the members that wait for its kind: each member
// ranks by a hash of its id and h's topic, so every sender tries the
// members in the same order for a topic, and a topic's first choice moves
// only when that member comes or goes.
func (m *Members) next(h *hintsv1.Hint, kind int64, after string) string {
	type ranked struct {
		id    string
		score uint64
	}
	var order []ranked
	for id, p := range m.peers {
		if p.waits&kind == 0 {
			continue
		}
		f := fnv.New64a()
		_, _ = f.Write([]byte(id))
		_, _ = f.Write([]byte{0, byte(h.GetKind())})
		_, _ = f.Write([]byte(h.GetTenantId()))
		_, _ = f.Write([]byte{0})
		_, _ = f.Write([]byte(h.GetKey()))
		order = append(order, ranked{id, f.Sum64()})
	}
	slices.SortFunc(order, func(a, b ranked) int { return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(a.id, b.id)) })
	if after == "" {
		if len(order) == 0 {
			return ""
		}
		return order[0].id
	}
	for i, r := range order {
		if r.id == after && i+1 < len(order) {
			return order[i+1].id
		}
	}
	return ""
}

// encodeHints encodes a batch, a hint per topic with its count.
func encodeHints(batch []Topic) []*hintsv1.Hint {
	folded := fold(batch)
	out := make([]*hintsv1.Hint, len(folded))
	for i, c := range folded {
		out[i] = &hintsv1.Hint{Kind: hintsv1.Kind(c.Kind), TenantId: c.TenantID, Key: c.Key, Count: uint32(c.n)}
	}
	return out
}

// passOn sends the hints that member id did not take (it woke no one with
// them, or its call failed) to the next member of each one's order. Ended
// hints went to every member already.
func (m *Members) passOn(hints []*hintsv1.Hint, id string) {
	hints = slices.DeleteFunc(slices.Clone(hints), func(h *hintsv1.Hint) bool { return h.GetKind() == hintsv1.Kind_KIND_ENDED })
	if len(hints) == 0 {
		return
	}
	m.passed.Add(int64(countHints(hints)))
	m.mu.Lock()
	defer m.mu.Unlock()
	m.route(hints, id)
}

func countHints(hints []*hintsv1.Hint) int {
	n := 0
	for _, h := range hints {
		n += int(max(h.GetCount(), 1))
	}
	return n
}

// deliverTo sends one member its batches until it leaves (stopped).
// callCtx carries no cancel of the member's, so that a call in flight when
// the member leaves ends by its timeout, not half-written.
func (m *Members) deliverTo(callCtx, stopped context.Context, id string, p *member) {
	var carry []*hintsv1.Hint
	for {
		hints := carry
		carry = nil
		if hints == nil {
			select {
			case hints = <-p.in:
			case <-stopped.Done():
				return
			}
		}
		// What queued while the last call was out goes in this one: under
		// load the calls carry more hints each, not more calls.
	more:
		for {
			select {
			case next := <-p.in:
				if len(hints)+len(next) > maxBatch {
					carry = next
					break more
				}
				hints = append(hints, next...)
			default:
				break more
			}
		}
		req := connect.NewRequest(&hintsv1.HintRequest{Origin: m.id, Hints: hints})
		req.Header().Set("Authorization", m.token)
		resp, err := p.client.Hint(callCtx, req)
		switch {
		case err != nil && stopped.Err() != nil:
			return
		case err != nil:
			m.failed.Add(int64(countHints(hints)))
			m.passOn(hints, id)
			if !p.failing {
				m.log.Warn("hints: a member does not take hints; its waiters will poll", slog.String("member", id),
					slog.String("address", p.address), slog.Any("error", err))
			}
			p.failing = true
		default:
			if p.failing {
				m.log.Info("hints: a member takes hints again", slog.String("member", id))
			}
			p.failing = false
			m.passOn(resp.Msg.GetUnheard(), id)
			m.sent.Add(int64(countHints(hints)))
		}
	}
}

// Handler serves the HintService: other members' hints, for this
// process's waiters. Mount it on the path returned where Address points. A
// call without the deployment's key is refused before its body is read.
func (m *Members) Handler() (string, http.Handler) {
	path, h := hintsv1connect.NewHintServiceHandler(hintReceiver{m},
		connect.WithInterceptors(validate.NewInterceptor()),
		connect.WithReadMaxBytes(maxHintRequestBytes))
	errs := connect.NewErrorWriter()
	return path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(m.token)) != 1 {
			_ = errs.Write(w, r, connect.NewError(connect.CodeUnauthenticated, errors.New("hints: not a member of this deployment")))
			return
		}
		h.ServeHTTP(w, r)
	})
}

type hintReceiver struct{ m *Members }

// Hint delivers another member's hints to this process's waiters, and to
// no other process: a hint crosses between processes once.
func (r hintReceiver) Hint(ctx context.Context, req *connect.Request[hintsv1.HintRequest]) (*connect.Response[hintsv1.HintResponse], error) {
	if req.Msg.GetOrigin() == r.m.id {
		return connect.NewResponse(&hintsv1.HintResponse{}), nil
	}
	var topics []Topic
	for _, h := range req.Msg.GetHints() {
		t := Topic{Kind: Kind(h.GetKind()), TenantID: h.GetTenantId(), Key: h.GetKey()}
		for range max(h.GetCount(), 1) {
			topics = append(topics, t)
		}
	}
	r.m.received.Add(int64(len(topics)))
	unheard := slices.DeleteFunc(r.m.Local.deliver(topics), func(t Topic) bool { return t.Kind == Ended })
	return connect.NewResponse(&hintsv1.HintResponse{Unheard: encodeHints(unheard)}), nil
}
