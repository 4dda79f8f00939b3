package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/orchardhq/orchard/loadtest"
)

func loadtestCommand() *cobra.Command {
	var (
		planName, out, tokenFile string
		cpuProfile, allocProfile string
		duration, warmup         time.Duration
		cpuPids                  []int
		quiet                    bool
	)
	cmd := &cobra.Command{
		Use:   "loadtest",
		Short: "Drive a running Orchard through its API and report throughput and latency",
		Long: `loadtest runs a plan (a built-in one: ` + strings.Join(loadtest.Plans(), ", ") + `; or a YAML
file) against the API at --addr with the Go SDK: it creates the plan's tenants
with the platform admin token (--token, ORCHARD_TOKEN or --token-file), sets
their limits, mints their tokens, registers the load test's definitions, runs
activity workers, offers the loads, and prints a summary. The report is saved
as JSON beside a latency-over-time chart (HTML) in --out.

Point it at a deployment with --addr https://orchard.example.com and a
platform admin token; tenants whose plan entry names token_env use that
token instead and need no admin token. --cpu-pid names server processes on
this machine whose CPU (with their children's, the database's apart) is
reported per orchestration.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newCLI(cmd)
			if err != nil {
				return err
			}
			plan, err := loadtest.LoadPlanFile(planName)
			if err != nil {
				return err
			}
			if duration > 0 {
				plan.Duration = loadtest.Duration(duration)
			}
			if cmd.Flags().Changed("warmup") {
				plan.Warmup = loadtest.Duration(warmup)
			}
			token := c.token
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return err
				}
				token = strings.TrimSpace(string(b))
			}
			cfg := loadtest.Config{API: c.addr, AdminToken: token, Plan: plan, CPUPids: cpuPids, Progress: c.errOut}
			if quiet {
				cfg.Progress = nil
			}
			stopProfiles, err := startProfiles(cpuProfile, allocProfile)
			if err != nil {
				return err
			}
			rep, err := loadtest.Run(cmd.Context(), cfg)
			if err := errors.Join(err, stopProfiles()); err != nil {
				return err
			}
			if err := rep.WriteSummary(c.out); err != nil {
				return err
			}
			jsonPath, chartPath, err := rep.Save(out)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.out, "saved %s and %s\n", jsonPath, chartPath)
			// A run in which nothing completed measured nothing: a script
			// (make loadtest in CI) must not take it for a result.
			if rep.Total.Completed == 0 {
				return errors.New("no orchestration completed in the measured window")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&planName, "plan", "standard", "plan: a built-in plan's name or a YAML file")
	f.DurationVar(&duration, "duration", 0, "measured duration (0: the plan's)")
	f.DurationVar(&warmup, "warmup", 0, "warmup before the measurement (default: the plan's)")
	f.StringVar(&out, "out", "loadtest-results", "directory of report.json and report.html")
	f.StringVar(&tokenFile, "token-file", "", "file holding the platform admin token (instead of --token)")
	f.IntSliceVar(&cpuPids, "cpu-pid", nil, "server process ids whose CPU to report (repeatable)")
	f.BoolVar(&quiet, "quiet", false, "no progress line")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write the generator's CPU profile (client and workers) to this file")
	f.StringVar(&allocProfile, "allocprofile", "", "write the generator's allocation profile to this file at the end")
	return cmd
}
