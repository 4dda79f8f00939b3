package notify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Channel is the PostgreSQL notification channel of the hints.
const Channel = "orchard_hints"

// Postgres carries hints between processes with PostgreSQL's LISTEN and
// NOTIFY, and within this process like Local. It is for PostgreSQL only
// (CockroachDB has neither): the runtime's SQL never depends on it, and
// every hint it loses (a full buffer, a dropped connection) costs a poll
// interval, never a task.
//
// Notify delivers in this process at once and queues for the other
// processes the hints that woke no one here (and every Ended hint), so
// that a hint wakes one waiter, not one in each process; one goroutine
// sends the queued hints in batches (one statement per batch), another
// listens on its own connection and delivers what other processes sent.
type Postgres struct {
	*Local
	pool   *pgxpool.Pool
	log    *slog.Logger
	origin string
	out    chan Topic
	stop   context.CancelFunc
	done   sync.WaitGroup
}

// outBuffer bounds the hints waiting to be sent; past it they are dropped.
const outBuffer = 4096

// NewPostgres starts listening on pool's database (a connection of its
// own, outside the pool) and returns the notifier. Close stops it.
func NewPostgres(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) (*Postgres, error) {
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	conn, err := listen(ctx, pool)
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	p := &Postgres{Local: NewLocal(), pool: pool, log: log.With("component", "hints"), origin: hex.EncodeToString(id),
		out: make(chan Topic, outBuffer), stop: stop}
	p.done.Go(func() { p.send(runCtx) })
	p.done.Go(func() { p.receive(runCtx, conn) })
	return p, nil
}

// listen opens a connection of its own that listens on Channel.
func listen(ctx context.Context, pool *pgxpool.Pool) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("hints: connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("hints: listen: %w", err)
	}
	return conn, nil
}

// Notify delivers the hints in this process and queues for the others
// those that woke no one here.
func (p *Postgres) Notify(_ context.Context, topics ...Topic) {
	for _, t := range p.Local.deliver(topics) {
		select {
		case p.out <- t:
		default: // a hint, not a promise
		}
	}
}

// Close stops sending and listening.
func (p *Postgres) Close() {
	p.stop()
	p.done.Wait()
}

// parsePayload reads a hint another process sent
// (origin|kind|count|tenant|key; a key may hold '|'); ok is false for this
// process's own hints and for what does not parse.
func (p *Postgres) parsePayload(s string) (t Topic, n int, ok bool) {
	f := strings.SplitN(s, "|", 5)
	if len(f) != 5 || f[0] == p.origin {
		return Topic{}, 0, false
	}
	k, err := strconv.Atoi(f[1])
	if err != nil || k < int(Orchestrations) || k > int(Ended) {
		return Topic{}, 0, false
	}
	n, err = strconv.Atoi(f[2])
	if err != nil || n < 1 || n > maxBatch {
		return Topic{}, 0, false
	}
	return Topic{Kind: Kind(k), TenantID: f[3], Key: f[4]}, n, true
}

// send sends the queued hints, a batch per statement.
func (p *Postgres) send(ctx context.Context) {
	for {
		batch, ok := nextBatch(ctx, p.out)
		if !ok {
			return
		}
		payloads := p.payloads(batch)
		if _, err := p.pool.Exec(ctx, "SELECT pg_notify($1, h) FROM unnest($2::text[]) AS h", Channel, payloads); err != nil && ctx.Err() == nil {
			p.log.Warn("hints: could not send; the waiters will poll", slog.Int("hints", len(payloads)), slog.Any("error", err))
		}
	}
}

// payloads encodes a batch, a payload per topic with its count.
// (PostgreSQL folds identical notifications of one transaction into one,
// so a repeat carries its count.)
func (p *Postgres) payloads(batch []Topic) []string {
	folded := fold(batch)
	out := make([]string, len(folded))
	for i, c := range folded {
		out[i] = p.origin + "|" + strconv.Itoa(int(c.Kind)) + "|" + strconv.Itoa(c.n) + "|" + c.TenantID + "|" + c.Key
	}
	return out
}

// receive delivers the hints of other processes, reconnecting when its
// connection fails.
func (p *Postgres) receive(ctx context.Context, conn *pgx.Conn) {
	wait := 100 * time.Millisecond
	for {
		for conn == nil {
			var err error
			if conn, err = listen(ctx, p.pool); err != nil {
				if ctx.Err() != nil {
					return
				}
				p.log.Warn("hints: cannot listen; the waiters will poll", slog.Any("error", err), slog.Duration("retry_in", wait))
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
				wait = min(2*wait, 5*time.Second)
			}
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
			conn = nil
			if ctx.Err() != nil || errors.Is(err, context.Canceled) {
				return
			}
			p.log.Warn("hints: listening connection lost", slog.Any("error", err))
			continue
		}
		wait = 100 * time.Millisecond
		if t, count, ok := p.parsePayload(n.Payload); ok {
			topics := make([]Topic, count)
			for i := range topics {
				topics[i] = t
			}
			p.Local.Notify(ctx, topics...)
		}
	}
}
