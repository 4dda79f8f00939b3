package loadtest

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/orchardhq/orchard/pkg/sdk"
)

// Latencies are recorded in microseconds, from 1µs to 1 hour, to three
// significant digits.
const (
	minLatencyMicros = 1
	maxLatencyMicros = int64(time.Hour / time.Microsecond)
	sigFigs          = 3
)

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(minLatencyMicros, maxLatencyMicros, sigFigs)
}

// seriesKey names what a latency belongs to.
type seriesKey struct{ tenant, load string }

// series is one load's record: the measured window's latencies, its
// errors by code, and one histogram per second for the timeline.
type series struct {
	hist *hdrhistogram.Histogram
	// started counts the orchestrations that started, completed or not.
	started   int64
	completed int64
	errors    map[string]int64
	seconds   map[int]*hdrhistogram.Histogram
	// windows has the latencies (µs) counted in the plan's windows (see
	// Plan.Cycle), by window, when it has them: the report compares the
	// on and off windows, and resamples them by cycle.
	windows map[int][]int64
	// onsets has the latencies (µs) of the orchestrations due in the first
	// settle of an on window, which windows leaves out: the on/off loads'
	// first burst goes through their tenants' limits then.
	onsets []int64
}

// Recorder gathers the outcomes of orchestrations. Outcomes that end before
// the measurement starts (in the warmup) or after it ends are not counted.
// It is safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	start  time.Time // the measurement's start
	end    time.Time // the measurement's end
	series map[seriesKey]*series
	// recent counts what ended since the last Progress.
	recent      int64
	recentHist  *hdrhistogram.Histogram
	totalEnded  int64
	totalErrors int64
	// t0 and cycle place the plan's windows (zero cycle: none).
	t0    time.Time
	cycle time.Duration
}

// NewRecorder records outcomes that end within [start, end).
func NewRecorder(start, end time.Time) *Recorder {
	return &Recorder{start: start, end: end, series: map[seriesKey]*series{}, recentHist: newHistogram()}
}

// splitByWindow has the recorder also split each series' latencies by the
// windows of a plan of this cycle, run from t0 (see Plan.Cycle). It is
// called before the first Record.
func (r *Recorder) splitByWindow(t0 time.Time, cycle time.Duration) { r.t0, r.cycle = t0, cycle }

// Record records one orchestration of a load that ended at end after
// latency, with err nil when it completed (a startedError when it failed
// after it started).
func (r *Recorder) Record(tenant, load string, end time.Time, latency time.Duration, err error) {
	micros := max(latency.Microseconds(), minLatencyMicros)
	micros = min(micros, maxLatencyMicros)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.totalEnded++
	if err != nil {
		r.totalErrors++
	} else {
		r.recent++
		_ = r.recentHist.RecordValue(micros)
	}
	if end.Before(r.start) || !end.Before(r.end) {
		return
	}
	k := seriesKey{tenant, load}
	s := r.series[k]
	if s == nil {
		s = &series{hist: newHistogram(), errors: map[string]int64{}, seconds: map[int]*hdrhistogram.Histogram{}}
		r.series[k] = s
	}
	if err != nil {
		if errors.As(err, new(*startedError)) {
			s.started++
		}
		s.errors[ErrorCode(err)]++
		return
	}
	s.started++
	s.completed++
	_ = s.hist.RecordValue(micros)
	if r.cycle > 0 {
		switch n, settled, _ := window(r.cycle, r.t0, end.Add(-latency)); {
		case settled:
			if s.windows == nil {
				s.windows = map[int][]int64{}
			}
			s.windows[n] = append(s.windows[n], micros)
		case onWindow(n):
			s.onsets = append(s.onsets, micros)
		}
	}
	sec := int(end.Sub(r.start) / time.Second)
	h := s.seconds[sec]
	if h == nil {
		h = newHistogram()
		s.seconds[sec] = h
	}
	_ = h.RecordValue(micros)
}

// Progress is what ended since the last call: completions and their p99,
// and the totals so far (warmup included).
func (r *Recorder) Progress() (completed int64, p99 time.Duration, ended, failed int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	completed, p99 = r.recent, time.Duration(r.recentHist.ValueAtQuantile(99))*time.Microsecond
	r.recent = 0
	r.recentHist.Reset()
	return completed, p99, r.totalEnded, r.totalErrors
}

// ErrorCode names an error for the report: the Connect code of an API
// error, the status of an orchestration that did not complete, or what
// else it was.
func ErrorCode(err error) string {
	var api *sdk.Error
	var ended *endedError
	switch {
	case errors.As(err, &ended):
		return "ended_" + ended.status
	case errors.As(err, &api):
		return api.Code.String()
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, context.Canceled):
		return "canceled"
	default:
		return "other"
	}
}

// snapshot returns the series in a stable order (tenant, load).
func (r *Recorder) snapshot() ([]seriesKey, map[seriesKey]*series) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]seriesKey, 0, len(r.series))
	for k := range r.series {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].tenant != keys[j].tenant {
			return keys[i].tenant < keys[j].tenant
		}
		return keys[i].load < keys[j].load
	})
	return keys, r.series
}
