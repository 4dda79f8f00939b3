package main

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/orchardhq/orchard/internal/dbserver"
	"github.com/orchardhq/orchard/internal/telemetry"
	"github.com/orchardhq/orchard/pkg/notify"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/pkg/tenancy"
	"github.com/orchardhq/orchard/schema"
	"github.com/orchardhq/orchard/services/api"
	"github.com/orchardhq/orchard/services/console"
	"github.com/orchardhq/orchard/services/janitor"
)

// The dev server's token issuer and audience.
const (
	devIssuer   = "orchard-dev"
	devAudience = "orchard"
	devTenant   = "demo"
)

func devCommand() *cobra.Command {
	var (
		dir, listen, opsAddr     string
		hints                    hintsFlags
		port, loops              int
		fresh, demo, printTokens bool
		janitorInterval          time.Duration
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run all of Orchard in one process on an embedded database, for development",
		Long: `dev starts an embedded database (a cockroach binary on PATH as a single
in-memory node; otherwise a PostgreSQL cluster from the machine's binaries,
kept in --dir so data survives a restart; --fresh wipes it), migrates it,
creates the demo tenant, and runs the API, the dispatchers and the janitor
(River's tables in the same PostgreSQL database) in this process. It writes
tokens for the demo tenant to --dir/tokens (--print-tokens prints them too)
and ends its start with a short banner: the API, console and metrics URLs
and the line that points the client verbs at it. With --demo it also
registers the example definitions, runs workers for their activities and
starts one orchestration of each. Ctrl-C stops everything, the database
included; the database keeps its port from one run to the next.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDev(cmd.Context(), cmd.OutOrStdout(), devOptions{
				dir: dir, listen: listen, opsAddr: opsAddr, port: port, loops: loops, fresh: fresh, demo: demo,
				printTokens: printTokens, janitorInterval: janitorInterval, hints: hints,
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", ".orchard/dev", "where the embedded PostgreSQL keeps its data, and the dev keys and tokens")
	f.StringVar(&listen, "listen", "127.0.0.1:8080", "listen address of the API (and the console)")
	f.StringVar(&opsAddr, "ops-addr", "127.0.0.1"+apiOpsAddr, "listen address of /metrics, /livez and /readyz (empty: none)")
	f.IntVar(&port, "db-port", 0, "port of the embedded PostgreSQL (0: the one it had last time, else a free one)")
	f.BoolVar(&printTokens, "print-tokens", false, "print the demo tenant's tokens in full (they are always in --dir/tokens)")
	f.IntVar(&loops, "loops", 4, "dispatcher loops")
	addHintsFlags(f, &hints)
	f.BoolVar(&fresh, "fresh", false, "wipe the embedded database, keys and tokens first")
	f.DurationVar(&janitorInterval, "janitor-interval", time.Minute, "how often the janitor queues retention runs")
	f.BoolVar(&demo, "demo", false, "register the example definitions, run demo workers and start a few orchestrations")
	return cmd
}

type devOptions struct {
	dir, listen, opsAddr     string
	hints                    hintsFlags
	port, loops              int
	fresh, demo, printTokens bool
	janitorInterval          time.Duration
}

func runDev(ctx context.Context, out io.Writer, o devOptions) error {
	if o.fresh {
		if err := os.RemoveAll(o.dir); err != nil {
			return err
		}
	}
	// Readable by others: the database may run as another user (postgres, when we are root).
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	var srv *dbserver.Server
	var err error
	if bin, lookErr := exec.LookPath("cockroach"); lookErr == nil {
		fmt.Fprintln(out, "starting CockroachDB (in memory) from", bin)
		srv, err = dbserver.StartCockroach(ctx, bin)
	} else {
		abs, _ := filepath.Abs(o.dir)
		fmt.Fprintln(out, "starting PostgreSQL in", abs)
		srv, err = dbserver.StartPostgres(ctx, dbserver.PostgresOptions{Dir: filepath.Join(o.dir, "db"), Port: o.port, Durable: true})
	}
	if err != nil {
		return fmt.Errorf("embedded database: %w", err)
	}
	defer srv.Stop()

	conn, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		return err
	}
	applied, err := schema.Migrate(ctx, conn)
	conn.Close(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "migrated (%d new migrations)\n", len(applied))

	tel, err := telemetry.Setup(ctx, "orchard-dev")
	if err != nil {
		return err
	}
	defer shutdownTelemetry(tel)
	// The API (with the janitor and River) and the dispatcher loops have a
	// pool each, as when they run as processes of their own. A backend
	// plans a statement anew after every vacuum or analyze that touches a
	// table the statement names; the turns' statements, the costliest to
	// plan, then run on the loops' few backends, not on all of the API's.
	// The API's pool is `orchard api`'s, with devSharedConns more for what
	// shares it here.
	pool, err := openPool(ctx, tel, srv.URL, apiPoolConns(api.DefaultCallsInFlight, 0)+devSharedConns)
	if err != nil {
		return err
	}
	defer pool.Close()
	loopsPool, err := openPool(ctx, tel, srv.URL, int32(o.loops+4))
	if err != nil {
		return err
	}
	defer loopsPool.Close()
	secret, err := devSecret(o.dir)
	if err != nil {
		return err
	}
	st := crdb.New(pool, crdb.Options{MeterProvider: tel.MeterProvider})
	if err := st.CreateTenant(ctx, &store.CreateTenantParams{TenantID: devTenant}); err != nil && !errors.Is(err, store.ErrAlreadyExists) {
		return err
	}

	minter, verifier, err := devKeys(ctx, o.dir)
	if err != nil {
		return err
	}
	cons := devConsole(minter)
	jan, err := devJanitor(ctx, out, tel, pool, st, o.janitorInterval)
	if err != nil {
		return err
	}
	// With --hints local (the default) the API and the dispatchers share
	// hints in this process: a scheduled task reaches a waiting poll, a queued message an
	// idle dispatcher loop, an ended instance its WaitForCompletion, at once.
	hints, err := openHints(ctx, tel, pool, o.hints, o.opsAddr, notify.Orchestrations, notify.Tasks, notify.Ended)
	if err != nil {
		return err
	}
	defer hints.close()
	apiCfg := api.Config{
		Store: st, Notifier: hints, Verifier: verifier, Minter: minter, Addr: o.listen, TokenKey: deriveKey(secret, "api-tokens"),
		TracerProvider: tel.TracerProvider, MeterProvider: tel.MeterProvider, Console: cons, EraseGrace: 5 * time.Second,
	}
	if jan != nil {
		apiCfg.Janitor = jan.Queue()
	}
	// The API and the dispatcher share a process: an ack hands the tasks
	// it schedules to the polls waiting here, with no claim.
	disp, err := colocatedDispatcher(tel, crdb.New(loopsPool, crdb.Options{MeterProvider: tel.MeterProvider}), hints, o.hints.mode != "off", o.loops, &apiCfg)
	if err != nil {
		return err
	}
	if o.hints.mode != "off" {
		hintedPolls(&apiCfg)
	}
	apiSrv, err := api.New(apiCfg)
	if err != nil {
		return err
	}
	if err := apiSrv.Start(ctx); err != nil {
		return err
	}
	if err := disp.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	if jan != nil {
		if err := jan.Start(context.WithoutCancel(ctx)); err != nil {
			return err
		}
	}
	// Stopped before the pool closes, whichever way this returns.
	var stopOnce sync.Once
	var stopErr error
	stopServices := func() error {
		stopOnce.Do(func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stopErr = errors.Join(apiSrv.Stop(stopCtx), disp.Stop(stopCtx))
			if jan != nil {
				stopErr = errors.Join(stopErr, jan.Stop(stopCtx))
			}
		})
		return stopErr
	}
	defer stopServices()
	stopOps, opsURL, err := serveDevOps(tel, o.opsAddr, pool, hints.receiver...)
	if err != nil {
		return err
	}
	defer stopOps()

	tokens, err := devTokens(minter, o.dir)
	if err != nil {
		return err
	}
	base := "http://" + apiSrv.Addr()
	if o.demo {
		stopDemo, err := startDemo(ctx, out, base, tokens[0].token, tokens[1].token, tokens[2].token)
		if err != nil {
			return err
		}
		defer stopDemo()
	}
	link, err := cons.SignInLink(base)
	if err != nil {
		return err
	}
	printDevBanner(out, devBanner{api: base, console: link, ops: opsURL, database: srv.URL, dir: o.dir, tokens: tokens, printTokens: o.printTokens})

	<-ctx.Done()
	fmt.Fprintln(out, "stopping")
	return stopServices()
}

// serveDevOps serves the ops endpoint and returns its URL (empty: none).
func serveDevOps(tel *telemetry.Telemetry, addr string, pool *pgxpool.Pool, routes ...opsRoute) (stop func(), url string, err error) {
	stop, err = serveOps(tel, addr, pool, routes...)
	if err != nil || addr == "" {
		return stop, "", err
	}
	return stop, "http://" + addr, nil
}

// devBanner is what `orchard dev` says once it is ready.
type devBanner struct {
	api, console, ops, database, dir string
	tokens                           []devToken
	printTokens                      bool
}

// printDevBanner prints a few lines that matter, after the start's logs:
// where things are, and the line that points the client verbs here.
func printDevBanner(out io.Writer, b devBanner) {
	tokensDir := filepath.Join(b.dir, "tokens")
	names := make([]string, len(b.tokens))
	for i, t := range b.tokens {
		names[i] = t.name
	}
	fmt.Fprintf(out, "\nOrchard dev: tenant %q\n", devTenant)
	fmt.Fprintf(out, "api:      %s\n", b.api)
	fmt.Fprintf(out, "console:  %s (one sign-in, within 15 minutes)\n", b.console)
	if b.ops != "" {
		fmt.Fprintf(out, "metrics:  %s/metrics\n", b.ops)
	}
	fmt.Fprintf(out, "database: %s\n", b.database)
	fmt.Fprintf(out, "tokens:   %s/{%s}\n", tokensDir, strings.Join(names, ","))
	if b.printTokens {
		for _, t := range b.tokens {
			fmt.Fprintf(out, "%s token: %s\n", t.name, t.token)
		}
	}
	fmt.Fprintf(out, "\n  export ORCHARD_ADDR=%s ORCHARD_TOKEN=$(cat %s)\n\n", b.api, filepath.Join(tokensDir, "client"))
	fmt.Fprintln(out, "ready; Ctrl-C to stop")
}

// devSecret is the dev server's secret for page and task tokens, kept in
// dir so that tokens survive a restart.
func devSecret(dir string) (string, error) {
	path := filepath.Join(dir, "secret")
	if b, err := os.ReadFile(path); err == nil {
		return string(b), nil
	}
	priv, _, err := tenancy.GenerateKeyPairPEM()
	if err != nil {
		return "", err
	}
	sum := deriveKey(string(priv), "dev-secret")
	secret := fmt.Sprintf("%x", sum)
	return secret, os.WriteFile(path, []byte(secret), 0o600)
}

// devKeys loads the dev signing key from dir, or makes one, and returns a
// minter and a verifier for it.
func devKeys(ctx context.Context, dir string) (*tenancy.Minter, *tenancy.Verifier, error) {
	path := filepath.Join(dir, "signing-key.pem")
	privPEM, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if privPEM, _, err = tenancy.GenerateKeyPairPEM(); err != nil {
			return nil, nil, err
		}
		err = os.WriteFile(path, privPEM, 0o600)
	}
	if err != nil {
		return nil, nil, err
	}
	key, err := tenancy.ParsePrivateKeyPEM(privPEM)
	if err != nil {
		return nil, nil, err
	}
	minter, err := tenancy.NewMinter(tenancy.MinterConfig{PrivateKey: key, Issuer: devIssuer, Audience: devAudience, MaxTTL: 365 * 24 * time.Hour})
	if err != nil {
		return nil, nil, err
	}
	verifier, err := tenancy.NewVerifier(ctx, tenancy.VerifierConfig{Issuer: devIssuer, Audience: devAudience, PublicKeys: []crypto.PublicKey{minter.PublicKey()}})
	if err != nil {
		return nil, nil, err
	}
	return minter, verifier, nil
}

// devConsole is the dev server's web console, whose one-time sign-in links
// mint fresh 12-hour tokens: the demo tenant's admin and client first, then
// the platform admin.
func devConsole(m *tenancy.Minter) *console.Console {
	return console.New(console.Config{SignIn: func(context.Context) ([]string, error) {
		var out []string
		for _, c := range []tenancy.Claims{
			{Tenant: devTenant, Subject: "dev-console", Roles: []tenancy.Role{tenancy.RoleTenantAdmin, tenancy.RoleClient}},
			{Subject: "dev-console-admin", Roles: []tenancy.Role{tenancy.RolePlatformAdmin}},
		} {
			tok, err := m.Mint(c, 12*time.Hour)
			if err != nil {
				return nil, err
			}
			out = append(out, tok)
		}
		return out, nil
	}})
}

type devToken struct{ name, token string }

// devTokens mints the demo tenant's tokens (30 days) and writes each to
// dir/tokens/<name>.
func devTokens(m *tenancy.Minter, dir string) ([]devToken, error) {
	kinds := []struct {
		name   string
		claims tenancy.Claims
	}{
		{"client", tenancy.Claims{Tenant: devTenant, Subject: "dev-client", Roles: []tenancy.Role{tenancy.RoleClient}}},
		{"worker", tenancy.Claims{Tenant: devTenant, Subject: "dev-worker", Roles: []tenancy.Role{tenancy.RoleWorker}}},
		{"tenant-admin", tenancy.Claims{Tenant: devTenant, Subject: "dev-tenant-admin", Roles: []tenancy.Role{tenancy.RoleTenantAdmin, tenancy.RoleClient}}},
		{"admin", tenancy.Claims{Subject: "dev-admin", Roles: []tenancy.Role{tenancy.RolePlatformAdmin}}},
	}
	if err := os.MkdirAll(filepath.Join(dir, "tokens"), 0o700); err != nil {
		return nil, err
	}
	var out []devToken
	for _, k := range kinds {
		tok, err := m.Mint(k.claims, 30*24*time.Hour)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "tokens", k.name), []byte(tok), 0o600); err != nil {
			return nil, err
		}
		out = append(out, devToken{k.name, tok})
	}
	return out, nil
}

// devJanitor migrates River's tables into the embedded database and builds
// the janitor; on CockroachDB, which River does not support, there is none
// (retention does not run, and the API says so).
func devJanitor(ctx context.Context, out io.Writer, tel *telemetry.Telemetry, pool *pgxpool.Pool, st *crdb.Store, interval time.Duration) (*janitor.Janitor, error) {
	cockroach, err := schema.IsCockroach(ctx, pool)
	if err != nil {
		return nil, err
	}
	if cockroach {
		fmt.Fprintln(out, "janitor: off (River needs PostgreSQL)")
		return nil, nil
	}
	if _, err := janitor.Migrate(ctx, pool, ""); err != nil {
		return nil, err
	}
	metrics, err := janitor.NewMetrics(tel.MeterProvider)
	if err != nil {
		return nil, err
	}
	return janitor.New(janitor.Config{
		Store: st, RiverPool: pool, Interval: interval, Metrics: metrics, TracerProvider: tel.TracerProvider,
	})
}

// devSharedConns are the connections of `orchard dev`'s API pool for the
// janitor, River (whose listener keeps one) and the hints' membership.
const devSharedConns = 8
