package loadtest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/components"
	"github.com/go-echarts/go-echarts/v2/opts"
)

// Report is a load test's result, as saved in JSON.
type Report struct {
	Plan      string    `json:"plan"`
	API       string    `json:"api"`
	StartedAt time.Time `json:"started_at"`
	// Seconds is the measured window's length (the warmup excluded).
	Seconds float64 `json:"seconds"`
	// Loads has one entry per tenant and load; Tenants sums each tenant's
	// loads; Total sums everything.
	Loads   []LoadResult `json:"loads"`
	Tenants []LoadResult `json:"tenants"`
	Total   LoadResult   `json:"total"`
	// CPU is the server's CPU over the measured window, when it was read.
	CPU *CPUReport `json:"cpu,omitempty"`
	// Timeline has each load's completions and latency second by second.
	Timeline []TimelinePoint `json:"timeline"`
	// Notes are caveats the generator saw (e.g. it could not keep a rate).
	Notes []string `json:"notes,omitempty"`
}

// LoadResult is what one load (or a sum of loads) did in the measured window.
type LoadResult struct {
	Tenant string `json:"tenant"`
	Load   string `json:"load,omitempty"`
	Kind   Kind   `json:"kind,omitempty"`
	Mode   string `json:"mode,omitempty"`
	// Offered is the open loop's rate or the closed loop's in-flight count.
	Offered float64 `json:"offered,omitempty"`
	// Of the outcomes in the measured window, Started counts those of
	// orchestrations that started (completed or not: a tenant past its
	// rate limit may start more than it is let wait for) and Completed
	// those that completed, also per second.
	Started    int64   `json:"started"`
	Completed  int64   `json:"completed"`
	Throughput float64 `json:"throughput_per_s"`
	// Generations is the continue-as-new executions per second.
	Generations float64          `json:"generations_per_s,omitempty"`
	Latency     Latency          `json:"latency_ms"`
	Errors      map[string]int64 `json:"errors,omitempty"`
	// Windows splits the latency of loads that are not on/off by the
	// plan's windows (see Plan.Cycle); nil when it has none.
	Windows *Windows `json:"windows,omitempty"`
}

// Windows is a latency split by the plan's windows: that of the
// orchestrations due while the on/off loads ran, and that of those due
// while they did not, each counted only from a settle into its window.
type Windows struct {
	On  WindowResult `json:"on"`
	Off WindowResult `json:"off"`
	// Onset is the orchestrations due in the first settle of the on
	// windows, which On leaves out: the on/off loads' first burst goes
	// through their tenants' limits then, and what it admits runs beside
	// them. Nil when none was due then.
	Onset *WindowResult `json:"onset,omitempty"`
	// P99ChangeCI is a 90% confidence interval of P99Change: the 5th and
	// 95th percentiles of the change over the run's cycles (an off window
	// and the on window after it) resampled with replacement. It tells how
	// far the change could come from chance alone: a tail of a few of the
	// slowest, and what else the machine did in one window or another. Nil
	// with fewer than minCycles cycles.
	P99ChangeCI *[2]float64 `json:"p99_change_ci90,omitempty"`
}

// WindowResult is what completed of the orchestrations due in one kind of
// window.
type WindowResult struct {
	Completed int64   `json:"completed"`
	Latency   Latency `json:"latency_ms"`
}

// P99Change is how much the on windows' p99 is above the off windows', as
// a fraction of the latter (0.1: 10% above).
func (w *Windows) P99Change() float64 { return w.On.Latency.P99/w.Off.Latency.P99 - 1 }

// P99ChangeString spells P99Change, and its confidence interval when there
// is one: "+12% (90% CI -3% to +30%)".
func (w *Windows) P99ChangeString() string {
	s := fmt.Sprintf("%+.0f%%", w.P99Change()*100)
	if ci := w.P99ChangeCI; ci != nil {
		s += fmt.Sprintf(" (90%% CI %+.0f%% to %+.0f%%)", ci[0]*100, ci[1]*100)
	}
	return s
}

// windowsOf builds a Windows from latencies (µs) by window and those of
// the on windows' onsets (nil when the on or the off windows have none).
func windowsOf(byWindow map[int][]int64, onsets []int64) *Windows {
	on, off := newHistogram(), newHistogram()
	for n, latencies := range byWindow {
		h := off
		if onWindow(n) {
			h = on
		}
		for _, v := range latencies {
			_ = h.RecordValue(v)
		}
	}
	if off.TotalCount() == 0 || on.TotalCount() == 0 {
		return nil
	}
	ws := &Windows{
		On:          WindowResult{Completed: on.TotalCount(), Latency: latencyOf(on)},
		Off:         WindowResult{Completed: off.TotalCount(), Latency: latencyOf(off)},
		P99ChangeCI: p99ChangeCI(byWindow),
	}
	if len(onsets) > 0 {
		h := newHistogram()
		for _, v := range onsets {
			_ = h.RecordValue(v)
		}
		ws.Onset = &WindowResult{Completed: h.TotalCount(), Latency: latencyOf(h)}
	}
	return ws
}

// minCycles is how many cycles with latencies in both windows a
// confidence interval of the p99's change needs; resampling fewer says
// little.
const minCycles = 4

// cycleResamples is how many resamples of the cycles p99ChangeCI draws.
const cycleResamples = 2000

// p99ChangeCI is the 90% confidence interval of Windows.P99Change, by a
// bootstrap over the cycles: a cycle is resampled whole, its off window
// with its on window, since the latencies within one window are not
// independent (a vacuum, a burst, a pause slows several at once). The
// resampling's seed is fixed: the same latencies give the same interval.
func p99ChangeCI(byWindow map[int][]int64) *[2]float64 {
	var cycles [][2][]int64 // each cycle's off and on latencies, sorted
	for _, n := range slices.Sorted(maps.Keys(byWindow)) {
		off, on := byWindow[n], byWindow[n+1]
		if onWindow(n) || len(off) == 0 || len(on) == 0 {
			continue
		}
		cycles = append(cycles, [2][]int64{slices.Sorted(slices.Values(off)), slices.Sorted(slices.Values(on))})
	}
	if len(cycles) < minCycles {
		return nil
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := make([]int, len(cycles))
	changes := make([]float64, cycleResamples)
	for i := range changes {
		for j := range pick {
			pick[j] = rng.IntN(len(cycles))
		}
		changes[i] = float64(p99Of(cycles, pick, 1))/float64(p99Of(cycles, pick, 0)) - 1
	}
	slices.Sort(changes)
	return &[2]float64{changes[cycleResamples*5/100], changes[cycleResamples*95/100-1]}
}

// p99Of is the p99 of the latencies of side w (0 off, 1 on) of the picked
// cycles, as HdrHistogram ranks it (p99Rank): the least latency with that
// many at or below it.
func p99Of(cycles [][2][]int64, pick []int, w int) int64 {
	var n int64
	lo, hi := int64(math.MaxInt64), int64(0)
	for _, c := range pick {
		s := cycles[c][w]
		n += int64(len(s))
		lo, hi = min(lo, s[0]), max(hi, s[len(s)-1])
	}
	rank := p99Rank(n)
	return lo + int64(sort.Search(int(hi-lo+1), func(i int) bool {
		var atOrBelow int64
		for _, c := range pick {
			k, _ := slices.BinarySearch(cycles[c][w], lo+int64(i)+1)
			atOrBelow += int64(k)
		}
		return atOrBelow >= rank
	}))
}

// Latency is start-to-completion latency in milliseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// TimelinePoint is one load's second.
type TimelinePoint struct {
	Second    int     `json:"second"`
	Tenant    string  `json:"tenant"`
	Load      string  `json:"load"`
	Completed int64   `json:"completed"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
}

// steadyTail is how many orchestrations a p99 should rest on before it is
// more than its few slowest: two runs of 150 differ by half.
const steadyTail = 1000

// p99Rank is the rank, from the fastest, of the latency HdrHistogram gives
// as the p99 of n (its percentileRank).
func p99Rank(n int64) int64 { return min(max(int64(0.99*float64(n)+0.5), 1), n) }

// ordinal spells n (1 or more) as "1st", "2nd", "3rd", "4th"...
func ordinal(n int64) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return strconv.FormatInt(n, 10) + suffix
}

func latencyOf(h *hdrhistogram.Histogram) Latency {
	ms := func(micros int64) float64 { return float64(micros) / 1000 }
	return Latency{
		P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)), P99: ms(h.ValueAtQuantile(99)),
		P999: ms(h.ValueAtQuantile(99.9)), Max: ms(h.Max()), Mean: h.Mean() / 1000,
	}
}

// buildReport sums the recorder's series over a measured window of
// seconds; loads describes each (tenant, load) as planned.
func buildReport(r *Recorder, plan *Plan, seconds float64) *Report {
	rep := &Report{Plan: plan.Name, Seconds: seconds, Total: LoadResult{Tenant: "all", Errors: map[string]int64{}}}
	keys, all := r.snapshot()
	total := newHistogram()
	perTenant := map[string]*hdrhistogram.Histogram{}
	tenantResults := map[string]*LoadResult{}
	// The tenants' latencies in the on and off windows, over their loads
	// that are not on/off.
	tenantWindows := map[string]map[int][]int64{}
	tenantOnsets := map[string][]int64{}
	for _, t := range plan.Tenants {
		perTenant[t.ID] = newHistogram()
		tenantResults[t.ID] = &LoadResult{Tenant: t.ID, Errors: map[string]int64{}}
		tenantWindows[t.ID] = map[int][]int64{}
	}
	for _, t := range plan.Tenants {
		for i := range t.Loads {
			l := &t.Loads[i]
			res := LoadResult{Tenant: t.ID, Load: l.Name, Kind: l.Kind, Mode: l.Mode(), Offered: l.Rate, Errors: map[string]int64{}}
			if l.InFlight > 0 {
				res.Offered = float64(l.InFlight)
			}
			if s := all[seriesKey{t.ID, l.Name}]; s != nil {
				res.Started, res.Completed = s.started, s.completed
				res.Latency = latencyOf(s.hist)
				maps.Copy(res.Errors, s.errors)
				perTenant[t.ID].Merge(s.hist)
				total.Merge(s.hist)
				if s.windows != nil && !l.OnOff {
					res.Windows = windowsOf(s.windows, s.onsets)
					for n, latencies := range s.windows {
						tenantWindows[t.ID][n] = append(tenantWindows[t.ID][n], latencies...)
					}
					tenantOnsets[t.ID] = append(tenantOnsets[t.ID], s.onsets...)
				}
			}
			res.Throughput = perSecond(res.Completed, seconds)
			if l.Kind == KindContinueAsNew {
				res.Generations = res.Throughput * float64(l.Generations)
			}
			tr := tenantResults[t.ID]
			tr.Started += res.Started
			tr.Completed += res.Completed
			tr.Generations += res.Generations
			for code, n := range res.Errors {
				tr.Errors[code] += n
				rep.Total.Errors[code] += n
			}
			rep.Total.Started += res.Started
			rep.Total.Completed += res.Completed
			rep.Total.Generations += res.Generations
			rep.Loads = append(rep.Loads, res)
		}
	}
	for _, t := range plan.Tenants {
		tr := tenantResults[t.ID]
		tr.Throughput = perSecond(tr.Completed, seconds)
		tr.Latency = latencyOf(perTenant[t.ID])
		tr.Windows = windowsOf(tenantWindows[t.ID], tenantOnsets[t.ID])
		rep.Tenants = append(rep.Tenants, *tr)
		steady := slices.ContainsFunc(t.Loads, func(l LoadPlan) bool { return !l.OnOff })
		if plan.Cycle > 0 && steady && tr.Completed > 0 && tr.Windows == nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s has no latency in both on and off windows (each counted from %v into it): "+
				"the measured window must span an on and an off window of the cycle (%v) well past their starts",
				t.ID, settle, time.Duration(plan.Cycle)))
		}
		if tr.Completed > 0 && tr.Completed < steadyTail {
			noun := "orchestrations"
			if tr.Completed == 1 {
				noun = "orchestration"
			}
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s's p99 rests on %d %s: its %s slowest; "+
				"a run long or busy enough for %d gives a steadier tail",
				t.ID, tr.Completed, noun, ordinal(tr.Completed-p99Rank(tr.Completed)+1), steadyTail))
		}
	}
	rep.Total.Throughput = perSecond(rep.Total.Completed, seconds)
	rep.Total.Latency = latencyOf(total)
	for _, k := range keys {
		s := all[k]
		secs := slices.Sorted(maps.Keys(s.seconds))
		for _, sec := range secs {
			h := s.seconds[sec]
			rep.Timeline = append(rep.Timeline, TimelinePoint{
				Second: sec, Tenant: k.tenant, Load: k.load, Completed: h.TotalCount(),
				P50: float64(h.ValueAtQuantile(50)) / 1000, P99: float64(h.ValueAtQuantile(99)) / 1000,
			})
		}
	}
	return rep
}

func perSecond(n int64, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(n) / seconds
}

// WriteSummary prints the report as a table.
func (rep *Report) WriteSummary(w io.Writer) error {
	fmt.Fprintf(w, "plan %s against %s: %.1fs measured\n", rep.Plan, rep.API, rep.Seconds)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tenant\tload\tmode\toffered\tstarted\tcompleted\tper s\tp50 ms\tp90 ms\tp99 ms\tp99.9 ms\tmax ms\terrors\t")
	row := func(r LoadResult) {
		load, mode, offered := r.Load, r.Mode, ""
		if load == "" {
			load = "(all)"
		}
		if r.Offered > 0 {
			offered = fmt.Sprintf("%g", r.Offered)
			if r.Mode == "open" {
				offered += "/s"
			}
		}
		perS := fmt.Sprintf("%.1f", r.Throughput)
		if r.Generations > 0 {
			perS += fmt.Sprintf(" (%.0f gen/s)", r.Generations)
		}
		l := r.Latency
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t\n",
			r.Tenant, load, mode, offered, r.Started, r.Completed, perS, l.P50, l.P90, l.P99, l.P999, l.Max, formatErrors(r.Errors))
	}
	for _, r := range rep.Loads {
		row(r)
	}
	if len(rep.Loads) > 1 {
		for _, r := range rep.Tenants {
			row(r)
		}
		row(rep.Total)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if c := rep.CPU; c != nil {
		fmt.Fprintf(w, "server CPU: orchard %.2f cores, database %.2f cores; per orchestration: orchard %.2f ms, database %.2f ms; load generator %.2f cores, %.2f ms per orchestration\n",
			c.OrchardCores, c.DatabaseCores, c.OrchardMillisPerOrchestration, c.DatabaseMillisPerOrchestration, c.GeneratorCores, c.GeneratorMillisPerOrchestration)
		if c.MachineCores > 0 {
			fmt.Fprintf(w, "machine: %d cores, %.2f idle, %.2f taken by its host (steal)\n", c.MachineCores, c.IdleCores, c.StolenCores)
		}
	}
	for _, r := range rep.Tenants {
		if ws := r.Windows; ws != nil {
			fmt.Fprintf(w, "%s while the on/off loads ran: p50 %.1f ms, p99 %.1f ms (%d due); while they did not: p50 %.1f ms, p99 %.1f ms (%d due); p99 %s",
				r.Tenant, ws.On.Latency.P50, ws.On.Latency.P99, ws.On.Completed, ws.Off.Latency.P50, ws.Off.Latency.P99, ws.Off.Completed, ws.P99ChangeString())
			if o := ws.Onset; o != nil {
				fmt.Fprintf(w, "; in the first %v of their turns, left out: p99 %.1f ms (%d due)", settle, o.Latency.P99, o.Completed)
			}
			fmt.Fprintln(w)
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}

func formatErrors(errs map[string]int64) string {
	if len(errs) == 0 {
		return "-"
	}
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(errs)) {
		parts = append(parts, fmt.Sprintf("%s=%d", code, errs[code]))
	}
	return strings.Join(parts, ",")
}

// Save writes the report as dir/report.json and its chart as
// dir/report.html, and returns their paths.
func (rep *Report) Save(dir string) (jsonPath, chartPath string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return "", "", err
	}
	jsonPath = filepath.Join(dir, "report.json")
	if err := os.WriteFile(jsonPath, append(data, '\n'), 0o644); err != nil {
		return "", "", err
	}
	chartPath = filepath.Join(dir, "report.html")
	f, err := os.Create(chartPath)
	if err != nil {
		return "", "", err
	}
	if err := rep.renderChart(f); err != nil {
		f.Close()
		return "", "", err
	}
	return jsonPath, chartPath, f.Close()
}

// renderChart draws latency over time (p50 and p99 of each load, second by
// second) and completions per second, as an HTML page.
func (rep *Report) renderChart(w io.Writer) error {
	seconds := 0
	type key struct{ tenant, load string }
	points := map[key]map[int]TimelinePoint{}
	var order []key
	for _, p := range rep.Timeline {
		k := key{p.Tenant, p.Load}
		if points[k] == nil {
			points[k] = map[int]TimelinePoint{}
			order = append(order, k)
		}
		points[k][p.Second] = p
		seconds = max(seconds, p.Second+1)
	}
	xs := make([]int, seconds)
	for i := range xs {
		xs[i] = i
	}
	latency := charts.NewLine()
	latency.SetGlobalOptions(
		charts.WithTitleOpts(opts.Title{Title: "Start-to-completion latency, " + rep.Plan, Subtitle: "p50 and p99 per second of the measured window (ms)"}),
		charts.WithTooltipOpts(opts.Tooltip{Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Top: "bottom"}),
		charts.WithYAxisOpts(opts.YAxis{Name: "ms", Type: "log"}),
		charts.WithXAxisOpts(opts.XAxis{Name: "s"}),
	)
	latency.SetXAxis(xs)
	rate := charts.NewLine()
	rate.SetGlobalOptions(
		charts.WithTitleOpts(opts.Title{Title: "Completions per second"}),
		charts.WithTooltipOpts(opts.Tooltip{Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Top: "bottom"}),
		charts.WithXAxisOpts(opts.XAxis{Name: "s"}),
	)
	rate.SetXAxis(xs)
	for _, k := range order {
		var p50, p99, done []opts.LineData
		for s := range seconds {
			p, ok := points[k][s]
			if !ok {
				p50, p99 = append(p50, opts.LineData{Value: nil}), append(p99, opts.LineData{Value: nil})
				done = append(done, opts.LineData{Value: 0})
				continue
			}
			p50 = append(p50, opts.LineData{Value: p.P50})
			p99 = append(p99, opts.LineData{Value: p.P99})
			done = append(done, opts.LineData{Value: p.Completed})
		}
		name := k.tenant + "/" + k.load
		latency.AddSeries(name+" p50", p50).AddSeries(name+" p99", p99)
		rate.AddSeries(name, done)
	}
	page := components.NewPage()
	page.PageTitle = "Orchard load test: " + rep.Plan
	page.AddCharts(latency, rate)
	return page.Render(w)
}
