package main

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/orchardhq/orchard/internal/telemetry"
	"github.com/orchardhq/orchard/pkg/notify"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/pkg/tenancy"
	"github.com/orchardhq/orchard/services/api"
	"github.com/orchardhq/orchard/services/console"
	"github.com/orchardhq/orchard/services/dispatcher"
)

// apiCommand runs the API service: `orchard api`.
func apiCommand() *cobra.Command {
	var (
		listen, databaseURL, opsAddr           string
		publicKeyFile, jwksURL, signingKeyFile string
		issuer, audience, secret               string
		hints                                  hintsFlags
		algorithms                             []string
		maxMessageBytes, dispatcherLoops       int
		callsInFlight                          int
		drain, shutdownDelay                   time.Duration
		withConsole                            bool
	)
	cmd := &cobra.Command{
		Use:   "api",
		Short: "Serve the Connect/gRPC API (ORCHARD_* environment variables configure it)",
		Long: `api serves Orchard's API — Connect, gRPC and gRPC-Web on one port — with
gRPC health (grpc.health.v1.Health) and reflection. /metrics, /livez and
/readyz are served on --ops-addr.

SIGTERM drains: the health service and /readyz report not serving at once,
calls are still served for --shutdown-delay (while load balancers and
Kubernetes endpoints notice), then the server stops accepting calls, ends
the long polls with what they have and waits --drain-timeout for the calls
in flight.

Tokens are verified with the public keys of --jwt-public-key-file or the JWKS
at --jwks-url, for the issuer and audience given. With --jwt-signing-key-file
the Admin service can also mint tokens. API servers behind one load balancer
must share --secret, which signs page and task tokens.

With --dispatcher-loops the process also runs that many dispatcher loops,
as ` + "`orchard dispatcher`" + ` would, beside the API: with local hints, a start, a
task's result or an event wakes them at once, and an ack hands the tasks it
schedules straight to the worker polls waiting in this process, with no
claim of their own. Further ` + "`orchard dispatcher`" + ` processes may run beside it.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if databaseURL == "" {
				return errors.New("no database: set ORCHARD_DATABASE_URL or pass --database-url")
			}
			if issuer == "" || audience == "" {
				return errors.New("set the token issuer and audience (ORCHARD_JWT_ISSUER, ORCHARD_JWT_AUDIENCE)")
			}
			verifier, err := tenancy.NewVerifier(ctx, tenancy.VerifierConfig{
				Issuer: issuer, Audience: audience, Algorithms: algorithms,
				PublicKeyFile: publicKeyFile, JWKSURL: jwksURL,
			})
			if err != nil {
				return err
			}
			var minter *tenancy.Minter
			if signingKeyFile != "" {
				key, err := tenancy.ReadPrivateKeyFile(signingKeyFile)
				if err != nil {
					return err
				}
				if minter, err = tenancy.NewMinter(tenancy.MinterConfig{
					PrivateKey: key, Issuer: issuer, Audience: audience, MaxTTL: 365 * 24 * time.Hour,
				}); err != nil {
					return err
				}
			}
			var tokenKey []byte
			if secret != "" {
				tokenKey = deriveKey(secret, "api-tokens")
			} else {
				slog.WarnContext(ctx, "orchard api: no --secret (ORCHARD_API_SECRET): page and task tokens only work on this process")
			}
			tel, err := telemetry.Setup(ctx, "orchard-api")
			if err != nil {
				return err
			}
			defer shutdownTelemetry(tel)
			if dispatcherLoops < 0 {
				return fmt.Errorf("--dispatcher-loops %d: must be 0 (none) or more", dispatcherLoops)
			}
			if callsInFlight < 1 {
				return fmt.Errorf("--calls-in-flight %d: must be 1 or more", callsInFlight)
			}
			pool, err := openPool(ctx, tel, databaseURL, apiPoolConns(callsInFlight, dispatcherLoops))
			if err != nil {
				return err
			}
			defer pool.Close()
			// An API waits for tasks and ends; its dispatcher loops, if
			// any, for orchestrations.
			waits := []notify.Kind{notify.Tasks, notify.Ended}
			if dispatcherLoops > 0 {
				waits = append(waits, notify.Orchestrations)
			}
			hinted, err := openHints(ctx, tel, pool, hints, opsAddr, waits...)
			if err != nil {
				return err
			}
			defer hinted.close()
			stopOps, err := serveOps(tel, opsAddr, pool, hinted.receiver...)
			if err != nil {
				return err
			}
			defer stopOps()
			st := crdb.New(pool, crdb.Options{MeterProvider: tel.MeterProvider})
			defer st.Close()
			var cons http.Handler
			if withConsole {
				cons = console.New(console.Config{})
			}
			cfg := api.Config{
				Store: st, Notifier: hinted, Verifier: verifier, Minter: minter, Addr: listen,
				TokenKey: tokenKey, MaxMessageBytes: maxMessageBytes,
				TracerProvider: tel.TracerProvider, MeterProvider: tel.MeterProvider, Console: cons,
				CallShare: tenancy.NewFairShare(callsInFlight, api.DefaultCallsWaiting, api.DefaultCallBytesWaiting),
			}
			var disp *dispatcher.Dispatcher
			if dispatcherLoops > 0 {
				if disp, err = colocatedDispatcher(tel, st, hinted, hints.mode != "off", dispatcherLoops, &cfg); err != nil {
					return err
				}
			}
			// Local hints reach this process's own dispatcher loops only.
			if hints.acrossProcesses() || hints.mode == "local" && disp != nil {
				hintedPolls(&cfg)
			}
			srv, err := api.New(cfg)
			if err != nil {
				return err
			}
			if err := srv.Start(ctx); err != nil {
				return err
			}
			if disp != nil {
				// Its own context: the signal starts a drain, it does not
				// cut the turns in flight.
				if err := disp.Start(context.WithoutCancel(ctx)); err != nil {
					return errors.Join(err, srv.Stop(context.WithoutCancel(ctx)))
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), "orchard api: listening on", srv.Addr())
			<-ctx.Done()
			srv.Drain()
			slog.Info("draining", "shutdown_delay", shutdownDelay, "timeout", drain)
			time.Sleep(shutdownDelay)
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
			defer cancel()
			err = srv.Stop(stopCtx)
			if disp != nil {
				err = errors.Join(err, disp.Stop(stopCtx))
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", envString("ORCHARD_API_ADDR", ":8080"), "listen address (env ORCHARD_API_ADDR)")
	f.StringVar(&opsAddr, "ops-addr", envString("ORCHARD_OPS_ADDR", apiOpsAddr), "address of /metrics, /livez and /readyz (env ORCHARD_OPS_ADDR; empty: none)")
	addHintsFlags(f, &hints)
	f.StringVar(&databaseURL, "database-url", envString("ORCHARD_DATABASE_URL", ""), "database URL (env ORCHARD_DATABASE_URL)")
	f.StringVar(&publicKeyFile, "jwt-public-key-file", envString("ORCHARD_JWT_PUBLIC_KEY_FILE", ""),
		"PEM file of the public keys that verify tokens (env ORCHARD_JWT_PUBLIC_KEY_FILE)")
	f.StringVar(&jwksURL, "jwks-url", envString("ORCHARD_JWKS_URL", ""), "JWKS URL of the keys that verify tokens (env ORCHARD_JWKS_URL)")
	f.StringVar(&issuer, "jwt-issuer", envString("ORCHARD_JWT_ISSUER", ""), "issuer tokens must name (env ORCHARD_JWT_ISSUER)")
	f.StringVar(&audience, "jwt-audience", envString("ORCHARD_JWT_AUDIENCE", ""), "audience tokens must name (env ORCHARD_JWT_AUDIENCE)")
	f.StringSliceVar(&algorithms, "jwt-algorithms", envList("ORCHARD_JWT_ALGORITHMS"),
		"token algorithms accepted: EdDSA, RS256, ES256 (env ORCHARD_JWT_ALGORITHMS; default EdDSA)")
	f.StringVar(&signingKeyFile, "jwt-signing-key-file", envString("ORCHARD_JWT_SIGNING_KEY_FILE", ""),
		"Ed25519 private key PEM with which AdminService.MintToken signs (env ORCHARD_JWT_SIGNING_KEY_FILE; optional)")
	f.StringVar(&secret, "secret", envString("ORCHARD_API_SECRET", ""),
		"secret shared by the API servers, signing page and task tokens (env ORCHARD_API_SECRET)")
	f.IntVar(&maxMessageBytes, "max-message-bytes", envInt("ORCHARD_API_MAX_MESSAGE_BYTES", 4<<20),
		"largest request message accepted (env ORCHARD_API_MAX_MESSAGE_BYTES)")
	f.DurationVar(&shutdownDelay, "shutdown-delay", envDuration("ORCHARD_SHUTDOWN_DELAY", 0),
		"how long a draining server still serves while load balancers stop sending to it (env ORCHARD_SHUTDOWN_DELAY)")
	f.DurationVar(&drain, "drain-timeout", envDuration("ORCHARD_DRAIN_TIMEOUT", 30*time.Second),
		"how long calls in flight may finish at shutdown (env ORCHARD_DRAIN_TIMEOUT)")
	f.IntVar(&dispatcherLoops, "dispatcher-loops", envInt("ORCHARD_API_DISPATCHER_LOOPS", 0),
		"dispatcher loops to run in this process beside the API (env ORCHARD_API_DISPATCHER_LOOPS; 0: none)")
	f.IntVar(&callsInFlight, "calls-in-flight", envInt("ORCHARD_API_CALLS_IN_FLIGHT", api.DefaultCallsInFlight),
		"calls, long polls aside, this process runs at once, shared fairly across tenants past it; its database pool grows with it (env ORCHARD_API_CALLS_IN_FLIGHT)")
	f.BoolVar(&withConsole, "console", envBool("ORCHARD_CONSOLE", false),
		"serve the web console at /console/ (env ORCHARD_CONSOLE); it calls this API with its users' tokens")
	return cmd
}

// deriveKey derives a purpose's 32-byte key from the shared secret with
// HKDF-SHA256 (RFC 5869): the secret is the input keying material and the
// purpose, as HKDF's info, separates the keys, so that one purpose's key
// tells nothing of another's.
func deriveKey(secret, purpose string) []byte {
	key, err := hkdf.Key(sha256.New, []byte(secret), nil, "orchard "+purpose, 32)
	if err != nil {
		// Only a length beyond 255 hashes fails.
		panic(err)
	}
	return key
}

// longPollConns are the connections `orchard api` keeps for its long polls'
// queries beside those of the calls in flight: the long polls take no slot
// of the fair share, and must not wait behind the calls that do.
const longPollConns = 8

// apiPoolConns sizes the database pool of an API process: the calls in
// flight, the long polls' queries and the dispatcher loops each have
// connections of their own. Fewer, and the calls wait for a connection
// inside the pool, in no tenant's turn, instead of in the fair share.
func apiPoolConns(callsInFlight, dispatcherLoops int) int32 {
	return int32(callsInFlight + longPollConns + dispatcherLoops)
}

// colocatedDispatcher is the dispatcher `orchard api --dispatcher-loops`
// runs beside the API: it shares the API's hints and a hand-over (set in
// cfg too) of tasks to the worker polls waiting in the process, and of its
// idle loops' places to the API's starts and task completions, which run
// the turns of the instances they make due in their own transactions. A
// poll that comes within 100 ms of a query that found its queue empty
// skips its own query, as in `orchard dev`: the tasks no hint announces (a
// retry's after its delay) are found that much later at most.
func colocatedDispatcher(tel *telemetry.Telemetry, st store.Store, notifier notify.Notifier, hinted bool, loops int, cfg *api.Config) (*dispatcher.Dispatcher, error) {
	metrics, err := dispatcher.NewMetrics(tel.MeterProvider)
	if err != nil {
		return nil, err
	}
	cfg.Handoff = notify.NewHandoff(100 * time.Millisecond)
	dcfg := dispatcher.Config{Store: st, Notifier: notifier, Handoff: cfg.Handoff, Loops: loops,
		TracerProvider: tel.TracerProvider, Metrics: metrics}
	if hinted {
		hintedDispatcherPolls(&dcfg)
	}
	return dispatcher.New(dcfg)
}
