package loadtest

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Plan is what a load test runs: tenants and their loads, for a duration.
type Plan struct {
	// Name labels the report (default: the file's name).
	Name string `yaml:"name"`
	// Duration is how long the loads run, after Warmup (default 60s).
	Duration Duration `yaml:"duration"`
	// Warmup runs the loads before the measurement starts; what ends in
	// it is not counted (default none).
	Warmup Duration `yaml:"warmup"`
	// Workers are the activity workers run for each tenant.
	Workers WorkerPlan `yaml:"workers"`
	// Tenants are the tenants the loads run in, each with its own tokens.
	Tenants []TenantPlan `yaml:"tenants"`
	// Cycle, when set, offers the loads marked on_off only in every other
	// window of this length, counted from the run's start (warmup
	// included): off in the first, on in the second, and so on. The report
	// then splits every other load's latency by whether the on/off loads
	// were on when its orchestrations were due, so that what they cost the
	// others is read from one run, on the same machine in the same minutes.
	Cycle Duration `yaml:"cycle"`
}

// WorkerPlan is how many SDK workers a tenant runs, and how large.
type WorkerPlan struct {
	// Count is the number of SDK workers per tenant (default 4).
	Count int `yaml:"count"`
	// Concurrency is each worker's number of activities at once (default 32).
	Concurrency int `yaml:"concurrency"`
}

// TenantPlan is one tenant: its limits and its loads.
type TenantPlan struct {
	// ID is the tenant's id; created when missing (with an admin token).
	ID string `yaml:"id"`
	// Limits, when set, are applied to the tenant before the run (with an
	// admin token). Zero fields keep the platform's defaults.
	Limits *Limits `yaml:"limits"`
	// TokenEnv names an environment variable holding a token of the
	// tenant with the client and worker roles, for a deployment where the
	// load test has no admin token; empty: the token is minted.
	TokenEnv string `yaml:"token_env"`
	// Loads run in this tenant at once.
	Loads []LoadPlan `yaml:"loads"`
}

// Limits are the tenant limits a plan sets (see sdk.Limits).
type Limits struct {
	RequestsPerSecond   float64 `yaml:"requests_per_second"`
	Burst               int     `yaml:"burst"`
	StartsPerSecond     float64 `yaml:"starts_per_second"`
	StartsBurst         int     `yaml:"starts_burst"`
	MaxRunningInstances int64   `yaml:"max_running_instances"`
}

// LoadPlan is one load: a workload, and how it is offered.
type LoadPlan struct {
	// Name labels the load in the report (default: its kind).
	Name string `yaml:"name"`
	// Kind is the workload (see Kinds).
	Kind Kind `yaml:"kind"`
	// InFlight runs the load closed-loop: this many orchestrations at
	// once, each started as soon as the one before it ended.
	InFlight int `yaml:"in_flight"`
	// Rate runs the load open-loop: this many starts per second, evenly
	// spaced, whatever the server does.
	Rate float64 `yaml:"rate"`
	// MaxInFlight bounds an open loop's orchestrations at once (default
	// 10,000); past it arrivals wait, and their wait counts in their
	// latency.
	MaxInFlight int `yaml:"max_in_flight"`
	// Width is a fan-out's number of activities (default 100).
	Width int `yaml:"width"`
	// Generations is a continue-as-new chain's length (default 10).
	Generations int `yaml:"generations"`
	// Timer is a timer workload's sleep (default 1s).
	Timer Duration `yaml:"timer"`
	// OnOff offers the load only in the plan's on windows (see Plan.Cycle).
	OnOff bool `yaml:"on_off"`
	// cycle is the plan's Cycle, for Drive.
	cycle time.Duration
}

// Kind is a workload: a definition and what the client does to run it.
type Kind string

// The workloads.
const (
	// KindOneActivity: one activity, then return its result.
	KindOneActivity Kind = "one-activity"
	// KindFanOut: Width activities in parallel, then return.
	KindFanOut Kind = "fan-out"
	// KindContinueAsNew: a chain of Generations executions, each an
	// activity then a continue-as-new.
	KindContinueAsNew Kind = "continue-as-new"
	// KindTimer: a durable timer, then an activity.
	KindTimer Kind = "timer"
	// KindEvent: wait for an event the client raises right after the start.
	KindEvent Kind = "event"
	// KindSubOrchestration: a child running one activity, awaited by its parent.
	KindSubOrchestration Kind = "sub-orchestration"
)

// Kinds are the workloads a plan may name.
var Kinds = []Kind{KindOneActivity, KindFanOut, KindContinueAsNew, KindTimer, KindEvent, KindSubOrchestration}

// Duration is a time.Duration written as in Go ("1.5s", "2m").
type Duration time.Duration

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration as Go does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// Bounds of what a plan may ask, so that a typo does not melt the machine
// the generator runs on.
const (
	maxTenants     = 100
	maxLoads       = 20
	maxInFlight    = 100_000
	maxRate        = 100_000
	maxWidth       = 1000
	maxGenerations = 10_000
	maxWorkers     = 64
	maxConcurrency = 1024
	// MinCycle leaves each window more than the second after its change
	// that its latencies are not counted in (settle).
	MinCycle = 2 * time.Second
)

var tenantID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

//go:embed plans/*.yaml
var builtin embed.FS

// Plans are the names of the plans built in.
func Plans() []string {
	entries, _ := builtin.ReadDir("plans")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	return names
}

// LoadPlanFile reads a plan: the name of a built-in one, or a file.
func LoadPlanFile(name string) (*Plan, error) {
	data, err := builtin.ReadFile(path.Join("plans", name+".yaml"))
	if err != nil {
		if data, err = os.ReadFile(name); err != nil {
			return nil, fmt.Errorf("plan %q: not a built-in plan (%s) nor a readable file: %w", name, strings.Join(Plans(), ", "), err)
		}
	}
	p, err := ParsePlan(data)
	if err != nil {
		return nil, fmt.Errorf("plan %s: %w", name, err)
	}
	if p.Name == "" {
		p.Name = strings.TrimSuffix(path.Base(name), ".yaml")
	}
	return p, nil
}

// ParsePlan reads a plan document, fills in the defaults and checks it.
func ParsePlan(data []byte) (*Plan, error) {
	var p Plan
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		return nil, err
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	return &p, nil
}

func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// check fills in the defaults and reports every mistake.
func (p *Plan) check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	orDefault(&p.Duration, Duration(60*time.Second))
	orDefault(&p.Workers.Count, 4)
	orDefault(&p.Workers.Concurrency, 32)
	if p.Duration < 0 || p.Warmup < 0 {
		bad("duration and warmup must not be negative")
	}
	if p.Workers.Count < 0 || p.Workers.Count > maxWorkers || p.Workers.Concurrency < 0 || p.Workers.Concurrency > maxConcurrency {
		bad("workers: count is 1..%d, concurrency 1..%d", maxWorkers, maxConcurrency)
	}
	if len(p.Tenants) == 0 || len(p.Tenants) > maxTenants {
		bad("tenants: 1 to %d", maxTenants)
	}
	if p.Cycle != 0 && p.Cycle < Duration(MinCycle) {
		bad("cycle: at least %v", MinCycle)
	}
	onOff := 0
	seen := map[string]bool{}
	for i := range p.Tenants {
		t := &p.Tenants[i]
		at := fmt.Sprintf("tenants[%d]", i)
		if !tenantID.MatchString(t.ID) {
			bad("%s.id: %q is not a tenant id (lower-case letters, digits and dashes)", at, t.ID)
		}
		if seen[t.ID] {
			bad("%s.id: %q twice", at, t.ID)
		}
		seen[t.ID] = true
		if l := t.Limits; l != nil && (l.RequestsPerSecond < 0 || l.Burst < 0 || l.StartsPerSecond < 0 || l.StartsBurst < 0 || l.MaxRunningInstances < 0) {
			bad("%s.limits: must not be negative", at)
		}
		if len(t.Loads) == 0 || len(t.Loads) > maxLoads {
			bad("%s.loads: 1 to %d", at, maxLoads)
		}
		names := map[string]bool{}
		for j := range t.Loads {
			l := &t.Loads[j]
			at := fmt.Sprintf("%s.loads[%d]", at, j)
			if !slices.Contains(Kinds, l.Kind) {
				bad("%s.kind: %q is not one of %v", at, l.Kind, Kinds)
			}
			orDefault(&l.Name, string(l.Kind))
			if names[l.Name] {
				bad("%s.name: %q twice in the tenant", at, l.Name)
			}
			names[l.Name] = true
			switch {
			case (l.InFlight > 0) == (l.Rate > 0):
				bad("%s: exactly one of in_flight (closed loop) and rate (open loop)", at)
			case l.InFlight < 0 || l.InFlight > maxInFlight:
				bad("%s.in_flight: 1..%d", at, maxInFlight)
			case l.Rate < 0 || l.Rate > maxRate:
				bad("%s.rate: up to %d per second", at, maxRate)
			}
			orDefault(&l.MaxInFlight, 10_000)
			orDefault(&l.Width, 100)
			orDefault(&l.Generations, 10)
			orDefault(&l.Timer, Duration(time.Second))
			if l.MaxInFlight < 0 || l.MaxInFlight > maxInFlight {
				bad("%s.max_in_flight: 1..%d", at, maxInFlight)
			}
			if l.Width < 0 || l.Width > maxWidth {
				bad("%s.width: 1..%d", at, maxWidth)
			}
			if l.Generations < 0 || l.Generations > maxGenerations {
				bad("%s.generations: 1..%d", at, maxGenerations)
			}
			if l.Timer < 0 {
				bad("%s.timer: must not be negative", at)
			}
			if l.OnOff {
				onOff++
				l.cycle = time.Duration(p.Cycle)
			}
		}
	}
	switch {
	case onOff > 0 && p.Cycle == 0:
		bad("on_off loads need the plan's cycle")
	case onOff == 0 && p.Cycle != 0:
		bad("cycle: no load is on_off")
	}
	return errors.Join(errs...)
}

// settle is how long after each change of window (see Plan.Cycle) an
// orchestration's latency is counted in neither window: the work of the
// window before is still running out, or the on/off loads' first burst is
// going through their tenants' limits.
const settle = time.Second

// window tells, for a plan of the given cycle whose run started at t0,
// which window t is in (counted from 0 at t0), whether t is a settle or
// more into it, and when it ends. The on/off loads are on in the odd
// windows (onWindow).
func window(cycle time.Duration, t0, t time.Time) (n int, settled bool, next time.Time) {
	d := max(t.Sub(t0), 0)
	k := d / cycle
	return int(k), d-k*cycle >= settle, t0.Add((k + 1) * cycle)
}

// onWindow reports whether the on/off loads are on in window n.
func onWindow(n int) bool { return n%2 == 1 }

// Mode says how a load is offered: "closed" or "open".
func (l *LoadPlan) Mode() string {
	if l.Rate > 0 {
		return "open"
	}
	return "closed"
}
