package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/sdk"
)

// Seconds is a duration in seconds, rounded to the millisecond in JSON.
type Seconds float64

// MarshalJSON writes the seconds with three decimals.
func (s Seconds) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf("%.3f", float64(s))), nil
}

// Report is what a campaign found.
type Report struct {
	Plan      string    `json:"plan"`
	Seed      uint64    `json:"seed"`
	StartedAt time.Time `json:"started_at"`
	// WallSeconds is the whole campaign, start to judgement; LoadSeconds
	// the load (and faults); DrainSeconds the wait for the last instances.
	WallSeconds  Seconds `json:"wall_s"`
	LoadSeconds  Seconds `json:"load_s"`
	DrainSeconds Seconds `json:"drain_s"`
	Dispatchers  int     `json:"dispatchers"`
	Workers      int     `json:"workers"`

	// Started counts the starts the API acknowledged; Unacknowledged
	// those it never answered before the load ended, of which
	// CreatedAnyway exist (and were judged).
	Started        int `json:"started"`
	Unacknowledged int `json:"unacknowledged"`
	CreatedAnyway  int `json:"created_anyway"`
	// Instances counts the instances judged (children included), by verdict.
	Instances int             `json:"instances"`
	Verdicts  map[Verdict]int `json:"verdicts"`
	// Findings are the instances judged other than ok (the first 100).
	Findings []Finding `json:"findings,omitempty"`
	// StartErrors counts the failed start attempts, by code (each was tried again).
	StartErrors map[string]int `json:"start_errors,omitempty"`

	Faults       []Fault           `json:"faults"`
	FaultsByKind map[FaultKind]int `json:"faults_by_kind"`
	// Recovery summarises, per kind of fault, how long the turns due
	// around a fault waited past it (see Fault.Recovery).
	Recovery map[FaultKind]Spread `json:"recovery"`
	// DBDowntimes are the database restarts, stop to accepting connections.
	DBDowntimes []Seconds `json:"db_downtimes_s,omitempty"`
	// TurnWait is how long turns waited away from any fault: from when a
	// turn could run (a start sent, a timer due, an activity scheduled, a
	// child ended) to when its event was recorded.
	TurnWait        Spread         `json:"turn_wait"`
	UnexpectedExits map[string]int `json:"unexpected_exits,omitempty"`
	Notes           []string       `json:"notes,omitempty"`
}

// Spread is a set of durations: how many, the median, the 99th
// percentile and the longest.
type Spread struct {
	Count int     `json:"count"`
	P50   Seconds `json:"p50_s"`
	P99   Seconds `json:"p99_s"`
	Max   Seconds `json:"max_s"`
}

func spreadOf(ds []time.Duration) Spread {
	if len(ds) == 0 {
		return Spread{}
	}
	slices.Sort(ds)
	at := func(q float64) Seconds {
		return Seconds(ds[int(math.Ceil(q*float64(len(ds))))-1].Seconds())
	}
	return Spread{Count: len(ds), P50: at(0.5), P99: at(0.99), Max: Seconds(ds[len(ds)-1].Seconds())}
}

// Failed reports whether the campaign found a defect: an instance lost,
// duplicated, failed or stuck, a fault that could not be injected, or
// nothing judged at all.
func (r *Report) Failed() bool {
	for v, n := range r.Verdicts {
		if v != OK && n > 0 {
			return true
		}
	}
	for _, f := range r.Faults {
		if f.Error != "" {
			return true
		}
	}
	return r.Verdicts[OK] == 0
}

// judge reads every instance of every tenant through the API and judges it.
func (c *campaign) judge(ctx context.Context, clients map[string]*sdk.Client, faults []Fault) (*Report, error) {
	rep := &Report{Verdicts: map[Verdict]int{}, StartErrors: c.startErrors, Faults: faults, FaultsByKind: map[FaultKind]int{}}
	type subject struct {
		client *sdk.Client
		exp    Expectation
		// startedAt: when the instance could first run (a root's start
		// sent); zero for a child (its parent's child_scheduled says).
		startedAt time.Time
		// parent is a child's parent.
		parent string
	}
	subjects := map[string]map[string]*subject{} // tenant → id → subject
	for _, s := range c.starts {
		if subjects[s.tenant] == nil {
			subjects[s.tenant] = map[string]*subject{}
		}
		exp, _ := expectationOf(s.load, s.id)
		subjects[s.tenant][s.id] = &subject{client: s.client, exp: exp, startedAt: s.at}
		if s.acked {
			rep.Started++
		} else {
			rep.Unacknowledged++
		}
		for _, child := range exp.Children {
			subjects[s.tenant][child] = &subject{client: s.client, exp: childExpectation, parent: s.id}
		}
	}
	acked := map[string]bool{}
	for _, s := range c.starts {
		acked[s.tenant+"/"+s.id] = s.acked
	}

	type judged struct {
		tenant string
		obs    Observed
		sub    *subject
		f      Finding
	}
	var all []*judged
	for tenant, client := range clients {
		listed := map[string]*sdk.Instance{}
		for in, err := range client.List(ctx, sdk.Filter{}, sdk.WithPageSize(1000)) {
			if err != nil {
				return nil, fmt.Errorf("list the instances of %s: %w", tenant, err)
			}
			listed[in.ID] = in
		}
		for id := range listed {
			if subjects[tenant][id] == nil {
				all = append(all, &judged{tenant: tenant, f: Finding{Instance: id, Verdict: Duplicated,
					Problems: []string{"duplicated: an instance nobody started"}}})
			}
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		var firstErr error
		sem := make(chan struct{}, 8)
		// A start never acknowledged whose instance does not exist never
		// happened. A missing child is judged only beside a parent that
		// completed: the verdict of a parent that did not (lost, stuck,
		// failed, never started) already covers it.
		for id, sub := range subjects[tenant] {
			in := listed[id]
			isChild := sub.parent != ""
			if !isChild && in == nil && !acked[tenant+"/"+id] {
				continue
			}
			if parent := listed[sub.parent]; isChild && in == nil && (parent == nil || parent.Status != sdk.StatusCompleted) {
				continue
			}
			if in != nil && !isChild && !acked[tenant+"/"+id] {
				rep.CreatedAnyway++
			}
			j := &judged{tenant: tenant, sub: sub, obs: Observed{ID: id}}
			mu.Lock()
			all = append(all, j)
			mu.Unlock()
			if in == nil {
				continue
			}
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				err := observe(ctx, sub.client, in, &j.obs)
				if err != nil {
					mu.Lock()
					firstErr = cmp0(firstErr, fmt.Errorf("read %s/%s: %w", tenant, id, err))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if firstErr != nil {
			return nil, firstErr
		}
	}
	for _, j := range all {
		if j.sub != nil {
			j.f = Check(j.sub.exp, j.obs)
		}
		rep.Instances++
		rep.Verdicts[j.f.Verdict]++
		if j.f.Verdict != OK && len(rep.Findings) < 100 {
			rep.Findings = append(rep.Findings, j.f)
		}
	}
	sort.Slice(rep.Findings, func(a, b int) bool { return rep.Findings[a].Instance < rep.Findings[b].Instance })

	// How long turns waited, around the faults and away from them.
	observed := map[string]*Observed{}
	for _, j := range all {
		if j.sub != nil && j.obs.Found {
			observed[j.tenant+"/"+j.obs.ID] = &j.obs
		}
	}
	var waits []turnWait
	for _, j := range all {
		if j.sub != nil && j.obs.Found {
			waits = append(waits, turnWaits(j.tenant, &j.obs, j.sub.startedAt, observed)...)
		}
	}
	rep.Recovery, rep.TurnWait = recoveries(faults, waits)
	for _, f := range faults {
		rep.FaultsByKind[f.Kind]++
	}
	return rep, nil
}

func cmp0(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// observe reads an instance's executions and their histories.
func observe(ctx context.Context, c *sdk.Client, in *sdk.Instance, o *Observed) error {
	o.Found, o.Status = true, in.Status
	execs, err := c.Executions(ctx, in.ID)
	if err != nil {
		return err
	}
	for _, e := range execs {
		h, err := c.History(ctx, in.ID, e.ID)
		if err != nil {
			return err
		}
		o.Executions = append(o.Executions, ObservedExecution{ID: e.ID, Status: e.Status, Events: h.Events})
	}
	return nil
}

// turnWait is one turn: when it could have run, and when its event was recorded.
type turnWait struct{ ready, recorded time.Time }

// turnWaits are the turns of an instance whose readiness is known: its
// start (from when it was sent, or from its parent's child_scheduled), a
// continued execution's start, a timer firing, an activity's result (from
// its scheduling: the workloads' activity returns at once), a child's
// result (from the child's end).
func turnWaits(tenant string, o *Observed, startedAt time.Time, observed map[string]*Observed) []turnWait {
	var out []turnWait
	var prevEnd time.Time
	for i, ex := range o.Executions {
		at := map[int64]time.Time{}
		fireAt := map[int64]time.Time{}
		childOf := map[int64]string{}
		for _, e := range ex.Events {
			at[e.ID] = e.CreatedAt
			var p struct {
				ScheduledID int64  `json:"scheduled_id"`
				TimerID     int64  `json:"timer_id"`
				FireAt      int64  `json:"fire_at"`
				InstanceID  string `json:"instance_id"`
			}
			_ = json.Unmarshal(e.Payload, &p)
			var ready time.Time
			switch engine.EventKind(e.Kind) {
			case engine.KindExecutionStarted:
				ready = prevEnd
				if i == 0 {
					ready = startedAt
				}
			case engine.KindTimerCreated:
				fireAt[e.ID] = time.UnixMilli(p.FireAt)
			case engine.KindTimerFired:
				ready = fireAt[p.TimerID]
			case engine.KindActivityCompleted, engine.KindActivityFailed:
				ready = at[p.ScheduledID]
			case engine.KindChildScheduled:
				childOf[e.ID] = p.InstanceID
				if child := observed[tenant+"/"+p.InstanceID]; child != nil && len(child.Executions) > 0 {
					evs := child.Executions[0].Events
					if len(evs) > 0 {
						out = append(out, turnWait{ready: e.CreatedAt, recorded: evs[0].CreatedAt})
					}
				}
			case engine.KindChildCompleted, engine.KindChildFailed:
				if child := observed[tenant+"/"+childOf[p.ScheduledID]]; child != nil && len(child.Executions) > 0 {
					evs := child.Executions[len(child.Executions)-1].Events
					if len(evs) > 0 {
						ready = evs[len(evs)-1].CreatedAt
					}
				}
			}
			if !ready.IsZero() && !e.CreatedAt.IsZero() {
				out = append(out, turnWait{ready: ready, recorded: e.CreatedAt})
			}
		}
		if n := len(ex.Events); n > 0 {
			prevEnd = ex.Events[n-1].CreatedAt
		}
	}
	return out
}

// Around a fault, the turns due from this long before it began to this
// long after it ended are its.
const (
	faultLead  = time.Second
	faultTrail = time.Second
	// quietAfter: turns due this long after a fault ended count again
	// in the turn wait away from faults.
	quietAfter = 5 * time.Second
)

// recoveries sets each fault's recovery: the longest a turn due in
// [At − 1s, End + 1s] waited past At (a turn the fault did not hold
// waits little; one a killed dispatcher held waits until another takes
// it over; one due while the database was down waits for it and for the
// services to reconnect). It returns them by kind, and the turn wait of
// the turns due away from every fault.
func recoveries(faults []Fault, waits []turnWait) (map[FaultKind]Spread, Spread) {
	byKind := map[FaultKind][]time.Duration{}
	for i := range faults {
		f := &faults[i]
		var worst time.Duration
		found := false
		for _, w := range waits {
			if w.ready.Before(f.At.Add(-faultLead)) || w.ready.After(f.End.Add(faultTrail)) || w.recorded.Before(f.At) {
				continue
			}
			found = true
			worst = max(worst, w.recorded.Sub(w.ready.Add(max(f.At.Sub(w.ready), 0))))
		}
		if found {
			s := Seconds(worst.Seconds())
			f.Recovery = &s
			byKind[f.Kind] = append(byKind[f.Kind], worst)
		}
	}
	var quiet []time.Duration
	for _, w := range waits {
		near := slices.ContainsFunc(faults, func(f Fault) bool {
			return !w.ready.Before(f.At.Add(-faultLead)) && !w.ready.After(f.End.Add(quietAfter))
		})
		if !near {
			quiet = append(quiet, w.recorded.Sub(w.ready))
		}
	}
	out := map[FaultKind]Spread{}
	for k, ds := range byKind {
		out[k] = spreadOf(ds)
	}
	return out, spreadOf(quiet)
}

// WriteSummary writes the report for a reader.
func (r *Report) WriteSummary(w io.Writer) error {
	var err error
	p := func(format string, args ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, args...)
		}
	}
	p("chaos campaign %q (seed %d): %.0fs of load, %.1fs drain, %.0fs in all; %d dispatchers, %d workers\n",
		r.Plan, r.Seed, r.LoadSeconds, r.DrainSeconds, r.WallSeconds, r.Dispatchers, r.Workers)
	p("starts: %d acknowledged, %d never acknowledged (%d of them created anyway); failed attempts by code: %v\n",
		r.Started, r.Unacknowledged, r.CreatedAnyway, r.StartErrors)
	p("instances judged: %d (children included): ok %d, lost %d, duplicated %d, stuck %d, failed %d\n",
		r.Instances, r.Verdicts[OK], r.Verdicts[Lost], r.Verdicts[Duplicated], r.Verdicts[Stuck], r.Verdicts[Failed])
	p("faults: %d", len(r.Faults))
	for _, k := range FaultKinds {
		if n := r.FaultsByKind[k]; n > 0 {
			p(", %s %d", k, n)
		}
	}
	p("\n")
	p("turn wait away from faults: p50 %.3fs, p99 %.3fs, max %.3fs (%d turns)\n", r.TurnWait.P50, r.TurnWait.P99, r.TurnWait.Max, r.TurnWait.Count)
	for _, k := range FaultKinds {
		if s, ok := r.Recovery[k]; ok {
			p("recovery after %-15s p50 %6.2fs, max %6.2fs (%d faults)\n", k+":", s.P50, s.Max, s.Count)
		}
	}
	for _, d := range r.DBDowntimes {
		p("database restart: %.2fs from stop to accepting connections\n", d)
	}
	for _, f := range r.Faults {
		if f.Error != "" {
			p("fault %s %s failed: %s\n", f.Kind, f.Target, f.Error)
		}
	}
	for _, n := range r.Notes {
		p("note: %s\n", n)
	}
	for i, f := range r.Findings {
		if i == 20 {
			p("... %d more in report.json\n", len(r.Findings)-i)
			break
		}
		p("%s %s: %v\n", f.Verdict, f.Instance, f.Problems)
	}
	if r.Failed() {
		p("FAILED\n")
	} else {
		p("PASSED\n")
	}
	return err
}

// Save writes the report as dir/report.json.
func (r *Report) Save(dir string) (string, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "report.json")
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}
