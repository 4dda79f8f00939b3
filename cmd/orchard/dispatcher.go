package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/orchardhq/orchard/internal/telemetry"
	"github.com/orchardhq/orchard/pkg/notify"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/schema"
	"github.com/orchardhq/orchard/services/dispatcher"
)

func dispatcherCommand() *cobra.Command {
	var (
		url, opsAddr, tenant string
		hints                hintsFlags
		loops, batch         int
		lease, drain         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "dispatcher",
		Short: "Run orchestrations: lease instances, run their turns, commit them",
		Long: `dispatcher runs --loops concurrent fetch → turn → ack loops against the
database at ORCHARD_DATABASE_URL. Run as many dispatcher processes as the load
needs; they coordinate through the database only. SIGTERM drains: fetching
stops and the turns in flight finish within --drain-timeout.

/metrics (Prometheus), /livez and /readyz are served on --ops-addr; /readyz
answers 503 from the moment the drain starts.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if url == "" {
				return errors.New("no database: set ORCHARD_DATABASE_URL or pass --database-url")
			}
			ctx := cmd.Context()
			tel, err := telemetry.Setup(ctx, "orchard-dispatcher")
			if err != nil {
				return err
			}
			defer shutdownTelemetry(tel)
			pool, err := openPool(ctx, tel, url, int32(loops+4))
			if err != nil {
				return err
			}
			defer pool.Close()
			metrics, err := dispatcher.NewMetrics(tel.MeterProvider)
			if err != nil {
				return err
			}
			hinted, err := openHints(ctx, tel, pool, hints, opsAddr, notify.Orchestrations)
			if err != nil {
				return err
			}
			defer hinted.close()
			cfg := dispatcher.Config{
				Store: crdb.New(pool, crdb.Options{MeterProvider: tel.MeterProvider}), Notifier: hinted, Loops: loops, Batch: batch, LeaseDuration: lease, TenantID: tenant,
				TracerProvider: tel.TracerProvider, Metrics: metrics,
			}
			// Local hints stay in this process, which runs no API.
			if hints.acrossProcesses() {
				hintedDispatcherPolls(&cfg)
			}
			d, err := dispatcher.New(cfg)
			if err != nil {
				return err
			}
			stopOps, err := serveOps(tel, opsAddr, pool, hinted.receiver...)
			if err != nil {
				return err
			}
			defer stopOps()
			// The loops run on their own context: the signal starts a drain,
			// it does not cut the turns in flight.
			if err := d.Start(context.WithoutCancel(ctx)); err != nil {
				return err
			}
			<-ctx.Done()
			slog.Info("draining", "timeout", drain)
			dctx, cancel := context.WithTimeout(context.Background(), drain)
			defer cancel()
			return d.Stop(dctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&url, "database-url", envString("ORCHARD_DATABASE_URL", ""), "database URL (env ORCHARD_DATABASE_URL)")
	f.StringVar(&opsAddr, "ops-addr", envString("ORCHARD_OPS_ADDR", dispatcherOpsAddr), "address of /metrics, /livez and /readyz (env ORCHARD_OPS_ADDR; empty: none)")
	addHintsFlags(f, &hints)
	f.StringVar(&tenant, "tenant", envString("ORCHARD_DISPATCHER_TENANT", ""), "serve only this tenant (env ORCHARD_DISPATCHER_TENANT; empty: all)")
	f.IntVar(&loops, "loops", envInt("ORCHARD_DISPATCHER_LOOPS", 4), "concurrent dispatch loops (env ORCHARD_DISPATCHER_LOOPS)")
	f.IntVar(&batch, "batch", envInt("ORCHARD_DISPATCHER_BATCH", dispatcher.DefaultBatch), "instances per fetch (env ORCHARD_DISPATCHER_BATCH)")
	f.DurationVar(&lease, "lease", envDuration("ORCHARD_DISPATCHER_LEASE", dispatcher.DefaultLeaseDuration), "instance lease duration (env ORCHARD_DISPATCHER_LEASE)")
	f.DurationVar(&drain, "drain-timeout", envDuration("ORCHARD_DRAIN_TIMEOUT", 30*time.Second), "how long a drain waits for turns in flight (env ORCHARD_DRAIN_TIMEOUT)")
	return cmd
}

// openPool connects to the database with traced queries.
func openPool(ctx context.Context, tel *telemetry.Telemetry, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	if cfg.MaxConns < maxConns {
		cfg.MaxConns = maxConns
	}
	cfg.AfterConnect = keepGenericPlans
	tel.InstrumentPool(cfg.ConnConfig)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return pool, nil
}

// keepGenericPlans makes a PostgreSQL connection keep one generic plan per
// prepared statement (plan_cache_mode=force_generic_plan). The runtime's
// statements look rows up by key or lease token, whatever the values, and
// PostgreSQL's default (auto) keeps planning a statement at every call once
// the generic plan, costed on the tables as they grew, looks dearer than the
// custom plans it costed while they were small. The statements built from a
// filter are planned with their values all the same (crdb's customPlan).
// River's statements, on these pools too, read its job table by its
// indexes whatever the values. CockroachDB's connections are left as they
// are: its plans are cached per node, and no vacuum drops them.
func keepGenericPlans(ctx context.Context, conn *pgx.Conn) error {
	cockroach, err := schema.IsCockroach(ctx, conn)
	if err != nil || cockroach {
		return err
	}
	_, err = conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
	return err
}

// The default ops addresses (/metrics, /livez, /readyz), one port per
// component so that they run side by side on one host, and none 9090,
// Prometheus's own: 9464 is where OpenTelemetry's Prometheus exporters serve
// by convention, and the next ports follow it. `orchard dev`, one process,
// serves the API's on loopback. The Helm chart's opsPort values match.
const (
	apiOpsAddr        = ":9464"
	dispatcherOpsAddr = ":9465"
	janitorOpsAddr    = ":9466"
)

// pprofEnv, when true, adds Go's profiles (/debug/pprof/) to the ops
// endpoint of every server command.
const pprofEnv = "ORCHARD_PPROF"

// opsRoute is a handler the ops endpoint serves beside its own.
type opsRoute struct {
	path    string
	handler http.Handler
}

// serveOps serves /metrics, /livez and /readyz (not draining, and the
// database answers) on addr, and the routes given.
func serveOps(tel *telemetry.Telemetry, addr string, pool *pgxpool.Pool, routes ...opsRoute) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ops endpoint: %w", err)
	}
	tel.Profiles = envBool(pprofEnv, false)
	handler := tel.OpsHandler(pool.Ping)
	if len(routes) > 0 {
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		for _, r := range routes {
			mux.Handle(r.path, r.handler)
		}
		handler = mux
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("ops endpoint stopped", "error", err)
		}
	}()
	slog.Info("ops endpoint", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

func shutdownTelemetry(tel *telemetry.Telemetry) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		slog.Warn("telemetry shutdown", "error", err)
	}
}
