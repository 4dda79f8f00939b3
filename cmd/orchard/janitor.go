package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/orchardhq/orchard/internal/telemetry"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/schema"
	"github.com/orchardhq/orchard/services/janitor"
)

func janitorCommand() *cobra.Command {
	var (
		url, riverURL, opsAddr string
		interval, budget, keep time.Duration
		workers                int
	)
	cmd := &cobra.Command{
		Use:   "janitor",
		Short: "Apply retention policies, erase tenants and run graceful deletes (River jobs)",
		Long: `janitor runs the River jobs that apply the tenants' retention policies (a
sweep every --interval queues one job per tenant with a policy), erase
tenants, prune old audit records and run graceful deletes. Run any number of
janitor processes: River elects the one that inserts the periodic sweep, and
the jobs are shared among them.

River's tables live in PostgreSQL at ORCHARD_RIVER_DATABASE_URL (River does
not run on CockroachDB); when unset and the main database is PostgreSQL, in
the main database (schema "river"). Create them with ` + "`orchard migrate`" + `.

/metrics (Prometheus), /livez and /readyz are served on --ops-addr.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if url == "" {
				return errors.New("no database: set ORCHARD_DATABASE_URL or pass --database-url")
			}
			ctx := cmd.Context()
			tel, err := telemetry.Setup(ctx, "orchard-janitor")
			if err != nil {
				return err
			}
			defer shutdownTelemetry(tel)
			pool, err := openPool(ctx, tel, url, int32(workers*2+4))
			if err != nil {
				return err
			}
			defer pool.Close()
			riverPool, err := openRiverPool(ctx, tel, pool, riverURL)
			if err != nil {
				return err
			}
			if riverPool != pool {
				defer riverPool.Close()
			}
			metrics, err := janitor.NewMetrics(tel.MeterProvider)
			if err != nil {
				return err
			}
			j, err := janitor.New(janitor.Config{
				Store: crdb.New(pool, crdb.Options{MeterProvider: tel.MeterProvider}), RiverPool: riverPool, Interval: interval, JobBudget: budget,
				Workers: workers, AuditRetention: keep, Metrics: metrics, TracerProvider: tel.TracerProvider,
			})
			if err != nil {
				return err
			}
			stopOps, err := serveOps(tel, opsAddr, pool)
			if err != nil {
				return err
			}
			defer stopOps()
			if err := j.Start(context.WithoutCancel(ctx)); err != nil {
				return err
			}
			slog.Info("janitor started", "interval", interval, "job_budget", budget, "workers", workers)
			<-ctx.Done()
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return j.Stop(stopCtx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&url, "database-url", envString("ORCHARD_DATABASE_URL", ""), "database URL (env ORCHARD_DATABASE_URL)")
	f.StringVar(&riverURL, "river-database-url", envString("ORCHARD_RIVER_DATABASE_URL", ""),
		"PostgreSQL URL of River's tables (env ORCHARD_RIVER_DATABASE_URL; empty: the main database, when it is PostgreSQL)")
	f.StringVar(&opsAddr, "ops-addr", envString("ORCHARD_OPS_ADDR", janitorOpsAddr), "address of /metrics, /livez and /readyz (env ORCHARD_OPS_ADDR; empty: none)")
	f.DurationVar(&interval, "interval", envDuration("ORCHARD_JANITOR_INTERVAL", 5*time.Minute), "how often retention jobs are queued (env ORCHARD_JANITOR_INTERVAL)")
	f.DurationVar(&budget, "job-budget", envDuration("ORCHARD_JANITOR_JOB_BUDGET", 30*time.Second), "how long one job works before it yields (env ORCHARD_JANITOR_JOB_BUDGET)")
	f.DurationVar(&keep, "audit-retention", envDuration("ORCHARD_JANITOR_AUDIT_RETENTION", 90*24*time.Hour),
		"how long deletion audit records are kept; erasure tombstones are kept for good (env ORCHARD_JANITOR_AUDIT_RETENTION)")
	f.IntVar(&workers, "workers", envInt("ORCHARD_JANITOR_WORKERS", 4), "jobs worked at once by this process (env ORCHARD_JANITOR_WORKERS)")
	return cmd
}

// openRiverPool opens the pool of River's database: riverURL, or the main
// pool when riverURL is empty and the main database is PostgreSQL.
func openRiverPool(ctx context.Context, tel *telemetry.Telemetry, main *pgxpool.Pool, riverURL string) (*pgxpool.Pool, error) {
	if riverURL != "" {
		return openPool(ctx, tel, riverURL, 8)
	}
	cockroach, err := schema.IsCockroach(ctx, main)
	if err != nil {
		return nil, err
	}
	if cockroach {
		return nil, errors.New("the janitor's River queue needs PostgreSQL and the database is CockroachDB: set ORCHARD_RIVER_DATABASE_URL")
	}
	return main, nil
}
