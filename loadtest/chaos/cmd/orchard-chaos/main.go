// Command orchard-chaos runs Orchard's fault campaign (package chaos): the
// whole system as separate processes under a load, faults injected on a
// schedule, then every instance judged through the API. It exits 1 when
// an instance was lost, duplicated, failed or stuck. See
// loadtest/chaos/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/orchardhq/orchard/loadtest"
	"github.com/orchardhq/orchard/loadtest/chaos"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		err = worker(ctx, os.Args[2:])
	} else {
		err = campaign(ctx, os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "orchard-chaos:", err)
		os.Exit(1)
	}
}

var errFailed = errors.New("the campaign found defects")

func campaign(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("orchard-chaos", flag.ExitOnError)
	var cfg chaos.Config
	orchard := fs.String("orchard", "bin/orchard", "the orchard binary")
	planName := fs.String("plan", "chaos", "load plan: a built-in loadtest plan's name, a YAML file, or chaos (the campaign's own)")
	duration := fs.Duration("duration", 0, "how long the load runs and faults are injected (0: the plan's)")
	faults := fs.String("faults", "dispatcher-kill,db-restart,api-kill,db-cut,worker-kill,db-latency", "faults, cycled through in this order")
	fs.StringVar(&cfg.Dir, "dir", ".orchard/chaos", "where the logs, keys and report.json go (emptied first)")
	fs.IntVar(&cfg.Dispatchers, "dispatchers", 2, "dispatcher processes")
	fs.IntVar(&cfg.DispatcherLoops, "dispatcher-loops", 2, "loops per dispatcher")
	fs.DurationVar(&cfg.DispatcherLease, "dispatcher-lease", 0, "the dispatchers' instance lease (0: their default)")
	fs.DurationVar(&cfg.WorkerLease, "worker-lease", 5*time.Second, "the workers' activity task lease")
	fs.DurationVar(&cfg.Settle, "settle", 3*time.Second, "load before the first fault")
	fs.DurationVar(&cfg.Interval, "interval", 5*time.Second, "time between the starts of two faults")
	fs.DurationVar(&cfg.RestartDelay, "restart-delay", time.Second, "how long a killed process stays dead")
	fs.DurationVar(&cfg.CutDuration, "cut", 2*time.Second, "how long a database connection cut lasts")
	fs.DurationVar(&cfg.Latency, "latency", 100*time.Millisecond, "latency added each way to the database connections")
	fs.DurationVar(&cfg.LatencyDuration, "latency-duration", 3*time.Second, "how long the latency is added")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", 60*time.Second, "how long to wait, after the load, for the instances to end")
	fs.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()), "seed of the faults' targets")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if cfg.Faults, err = chaos.ParseFaults(*faults); err != nil {
		return err
	}
	if cfg.Plan, err = chaos.LoadPlan(*planName); err != nil {
		return err
	}
	if *duration > 0 {
		cfg.Plan.Duration = loadtest.Duration(*duration)
	}
	if cfg.Orchard, err = filepath.Abs(*orchard); err != nil {
		return err
	}
	if cfg.Self, err = os.Executable(); err != nil {
		return err
	}
	cfg.Progress = os.Stderr
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := rep.WriteSummary(os.Stdout); err != nil {
		return err
	}
	path, err := rep.Save(cfg.Dir)
	if err != nil {
		return err
	}
	fmt.Println("report:", path, "logs:", filepath.Join(cfg.Dir, "logs"))
	if rep.Failed() {
		return errFailed
	}
	return nil
}

func worker(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("orchard-chaos worker", flag.ExitOnError)
	var cfg chaos.WorkerConfig
	tokenFile := fs.String("token-file", "", "file holding the tenant's token")
	fs.StringVar(&cfg.API, "api", "", "the API's URL")
	fs.StringVar(&cfg.Identity, "identity", "", "the worker's identity")
	fs.IntVar(&cfg.Concurrency, "concurrency", 16, "activities at once")
	fs.DurationVar(&cfg.Lease, "lease", 5*time.Second, "activity task lease")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tok, err := os.ReadFile(*tokenFile)
	if err != nil {
		return err
	}
	cfg.Token = string(tok)
	return chaos.RunWorker(ctx, cfg)
}
