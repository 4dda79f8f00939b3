// Package janitor is Orchard's third service: it applies tenants' retention
// policies, erases tenants and runs the operations the API hands it
// (graceful deletes), as River jobs. A periodic sweep (River elects one
// leader among the janitor processes to insert it) queues one retention
// job per active tenant with a policy, unique per tenant, so a slow tenant
// never piles up jobs; each job works within a time budget and snoozes
// itself while work remains, so that one tenant's backlog waits its turn
// behind the others instead of holding a worker.
//
// River's tables live in PostgreSQL (River does not run on CockroachDB):
// the River database is separate from the store's in production. When it
// is down, the janitor stops and nothing else does: every delete it makes
// goes through the store's bounded, retried transactions, and a job cut
// short is retried, finishing its own audit record.
//
// It must never delete a running instance, nor a sub-orchestration on its
// own, and never touch a tenant other than its job's.
package janitor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/orchardhq/orchard/pkg/retention"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/schema"
)

// Store is what the janitor needs of the store.
type Store interface {
	store.Store
	store.Janitor
}

// DefaultSchema is the PostgreSQL schema of River's tables.
const DefaultSchema = "river"

// Config configures a Janitor. Zero fields take the defaults.
type Config struct {
	// Store holds the tenants' data; required.
	Store Store
	// RiverPool reaches River's PostgreSQL database; required.
	RiverPool *pgxpool.Pool
	// Schema is River's schema in that database (DefaultSchema).
	Schema string
	// Interval is the period of the sweep that queues retention jobs
	// (5 minutes).
	Interval time.Duration
	// JobBudget bounds the time one job works before it snoozes (30s).
	JobBudget time.Duration
	// PageSize bounds the candidates read at a time, and so the trees one
	// bulk delete is asked for (retention.DefaultPageSize).
	PageSize int
	// Workers bounds the jobs worked at once by this process (4).
	Workers int
	// Duty is the largest share of its time a retention worker spends
	// deleting (1: flat out while the database is otherwise quiet). A
	// retention.Pacer shared by the workers lowers it while batches run
	// slower than they do on a quiet database, so tenants' orchestrations
	// keep the database first.
	Duty float64
	// Unpaced runs retention flat out, without the pacer: for a database
	// that serves nothing else, and for tests, whose timing the machine's
	// load would otherwise decide.
	Unpaced bool
	// EraseRowsPerStep bounds the rows one erasure step deletes (10000).
	EraseRowsPerStep int
	// AuditRetention is how long audit records are kept (90 days); an
	// erasure's tombstone is kept for good.
	AuditRetention time.Duration
	// Clock judges retention rules (the wall clock).
	Clock  store.Clock
	Logger *slog.Logger
	// Metrics records what the janitor does; nil: nothing is recorded.
	Metrics        *Metrics
	TracerProvider trace.TracerProvider
	// OperationPoll is how often a graceful delete checks whether what it
	// cancelled has ended (500ms).
	OperationPoll time.Duration
	// RetryPolicy overrides River's retry backoff (tests make it short).
	RetryPolicy river.ClientRetryPolicy
	// PollInterval is how often River looks for jobs besides its
	// notifications, which is how soon a snoozed job goes on (1s).
	PollInterval time.Duration
}

func (c *Config) defaults() error {
	if c.Store == nil || c.RiverPool == nil {
		return errors.New("janitor: Store and RiverPool are required")
	}
	c.Schema = cmp.Or(c.Schema, DefaultSchema)
	c.Interval = cmp.Or(c.Interval, 5*time.Minute)
	c.JobBudget = cmp.Or(c.JobBudget, 30*time.Second)
	c.PageSize = cmp.Or(c.PageSize, retention.DefaultPageSize)
	c.Workers = cmp.Or(c.Workers, 4)
	c.Duty = cmp.Or(c.Duty, 1)
	c.EraseRowsPerStep = cmp.Or(c.EraseRowsPerStep, 10_000)
	c.AuditRetention = cmp.Or(c.AuditRetention, 90*24*time.Hour)
	c.OperationPoll = cmp.Or(c.OperationPoll, 500*time.Millisecond)
	c.PollInterval = cmp.Or(c.PollInterval, time.Second)
	if c.Clock == nil {
		c.Clock = store.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	if c.Interval < time.Second || c.JobBudget < 0 || c.PageSize < 0 || c.Workers < 0 || c.EraseRowsPerStep < 0 || c.Duty < 0 || c.Duty > 1 {
		return errors.New("janitor: interval must be at least 1s, duty within [0, 1], and budgets and sizes not negative")
	}
	return nil
}

// Janitor runs the jobs.
type Janitor struct {
	cfg    Config
	client *river.Client[pgx.Tx]
	tracer trace.Tracer
	pacer  *retention.Pacer
}

// New builds a Janitor; Start runs it.
func New(cfg Config) (*Janitor, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	j := &Janitor{cfg: cfg, tracer: cfg.TracerProvider.Tracer("github.com/orchardhq/orchard/services/janitor")}
	if !cfg.Unpaced {
		j.pacer = retention.NewPacer(cfg.Duty)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(j.sweep))
	river.AddWorker(workers, river.WorkFunc(j.retention))
	river.AddWorker(workers, river.WorkFunc(j.erase))
	river.AddWorker(workers, river.WorkFunc(j.operation))
	client, err := river.NewClient(riverpgxv5.New(cfg.RiverPool), &river.Config{
		Schema:  cfg.Schema,
		Logger:  cfg.Logger.With("component", "river"),
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers}},
		Workers: workers,
		// A job works within its budget, then snoozes; the timeout only
		// catches a job stuck in a call.
		JobTimeout:        cfg.JobBudget + time.Minute,
		FetchPollInterval: cfg.PollInterval,
		FetchCooldown:     min(cfg.PollInterval, river.FetchCooldownDefault),
		RetryPolicy:       cfg.RetryPolicy,
		PeriodicJobs: []*river.PeriodicJob{river.NewPeriodicJob(
			river.PeriodicInterval(cfg.Interval),
			func() (river.JobArgs, *river.InsertOpts) { return sweepArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true, ID: "orchard.sweep"},
		)},
	})
	if err != nil {
		return nil, fmt.Errorf("janitor: %w", err)
	}
	j.client = client
	return j, nil
}

// Start runs the jobs until Stop.
func (j *Janitor) Start(ctx context.Context) error { return j.client.Start(ctx) }

// Stop stops fetching jobs and cancels the ones running, which snooze or
// fail and are picked up again by the next janitor that runs.
func (j *Janitor) Stop(ctx context.Context) error { return j.client.StopAndCancel(ctx) }

// Queue returns the janitor's queue, for processes that run both.
func (j *Janitor) Queue() *Queue { return &Queue{client: j.client} }

// Migrate creates or upgrades River's tables in riverSchema.
func Migrate(ctx context.Context, pool *pgxpool.Pool, riverSchema string) (int, error) {
	riverSchema = cmp.Or(riverSchema, DefaultSchema)
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: riverSchema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return 0, err
	}
	// Neither CREATE SCHEMA IF NOT EXISTS nor River's migrator keeps two
	// migrators started at once (two `orchard migrate`s) from racing: to
	// create the same schema, type or table, to drop what the other just
	// dropped, or into a deadlock. Each of River's versions runs in a
	// transaction, so the loser's rolls back, and it runs again to find the
	// winner's work done.
	for attempt := 0; ; attempt++ {
		n, err := migrateRiver(ctx, pool, m, riverSchema)
		var pgErr *pgconn.PgError
		raced := schema.IsConcurrentDDL(err) || errors.As(err, &pgErr) && (pgErr.Code == "42704" || pgErr.Code == "40P01")
		if err == nil || !raced || attempt == 19 {
			return n, err
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Duration(10*(attempt+1)) * time.Millisecond):
		}
	}
}

func migrateRiver(ctx context.Context, pool *pgxpool.Pool, m *rivermigrate.Migrator[pgx.Tx], riverSchema string) (int, error) {
	if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{riverSchema}.Sanitize()); err != nil {
		return 0, fmt.Errorf("river schema: %w", err)
	}
	res, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return 0, fmt.Errorf("river migrations: %w", err)
	}
	return len(res.Versions), nil
}

// Queue inserts the janitor's jobs. The API holds one (insert-only) to
// trigger retention, erase tenants and start graceful deletes.
type Queue struct {
	client *river.Client[pgx.Tx]
}

// NewQueue returns an insert-only queue over River's database.
func NewQueue(pool *pgxpool.Pool, schema string) (*Queue, error) {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: cmp.Or(schema, DefaultSchema)})
	if err != nil {
		return nil, fmt.Errorf("janitor queue: %w", err)
	}
	return &Queue{client: client}, nil
}

func (q *Queue) insert(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) (jobID int64, duplicate bool, err error) {
	res, err := q.client.Insert(ctx, args, opts)
	if err != nil {
		return 0, false, fmt.Errorf("janitor queue: %w", err)
	}
	return res.Job.ID, res.UniqueSkippedAsDuplicate, nil
}

// TriggerRetention queues a retention run of a tenant now. Duplicate is
// true when one was queued already: jobID is that one's.
func (q *Queue) TriggerRetention(ctx context.Context, tenantID string) (jobID int64, duplicate bool, err error) {
	return q.insert(ctx, retentionArgs{TenantID: tenantID, Triggered: true}, nil)
}

// EraseTenant queues the erasure of a tenant, to start after a grace.
func (q *Queue) EraseTenant(ctx context.Context, tenantID string, after time.Duration) (int64, error) {
	id, _, err := q.insert(ctx, eraseArgs{TenantID: tenantID}, &river.InsertOpts{ScheduledAt: time.Now().Add(after)})
	return id, err
}

// RunOperation queues an operation the store holds.
func (q *Queue) RunOperation(ctx context.Context, tenantID, operationID string) error {
	_, _, err := q.insert(ctx, operationArgs{TenantID: tenantID, OperationID: operationID}, nil)
	return err
}

// unique makes a job unique among the queued, running and snoozed ones
// (not the finished), by the fields tagged `river:"unique"`.
var unique = river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
	rivertype.JobStateRetryable, rivertype.JobStateScheduled,
}}

// sweepArgs is the periodic job that queues the others.
type sweepArgs struct{}

func (sweepArgs) Kind() string { return "orchard.sweep" }
func (sweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: unique}
}

// retentionArgs applies one tenant's policy.
type retentionArgs struct {
	TenantID  string `json:"tenant_id" river:"unique"`
	Triggered bool   `json:"triggered,omitempty"`
}

func (retentionArgs) Kind() string { return "orchard.retention" }
func (retentionArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: unique}
}

// eraseArgs erases one tenant.
type eraseArgs struct {
	TenantID string `json:"tenant_id" river:"unique"`
}

func (eraseArgs) Kind() string { return "orchard.erase_tenant" }
func (eraseArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: unique, MaxAttempts: 100}
}

// operationArgs runs one operation of the operations table.
type operationArgs struct {
	TenantID    string `json:"tenant_id" river:"unique"`
	OperationID string `json:"operation_id" river:"unique"`
}

func (operationArgs) Kind() string { return "orchard.operation" }
func (operationArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: unique}
}
