package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// Limits is what one tenant may use: the API enforces the request rate,
// running instances and payload size, the dispatcher the rest. It is stored
// as JSON in the tenants table (limits column) and parsed once, where the
// store reads a tenant. A zero field, whether missing from the JSON or left
// zero in Go, means the default below, so stored limits follow the defaults
// unless a field is set; Effective gives the values in force.
type Limits struct {
	// RequestsPerSecond is the sustained API request rate. Default 100. The
	// tenant's worker calls and its other calls each have a bucket of this
	// rate and Burst (services/api, access.worker).
	RequestsPerSecond float64 `json:"requests_per_second,omitempty"`
	// Burst is how many requests may come at once above the rate.
	// Default 200.
	Burst int `json:"burst,omitempty"`
	// StartsPerSecond is the sustained rate of orchestration starts: a
	// start takes a request and a start, so the tenant's reads, waits and
	// other calls keep the whole request rate while the work it creates
	// is bounded. Default: the request rate (a start is then bounded by
	// the request bucket alone).
	StartsPerSecond float64 `json:"starts_per_second,omitempty"`
	// StartsBurst is how many starts may come at once above
	// StartsPerSecond. Default: Burst. Each start a burst lets through
	// runs at once, beside every other tenant's work.
	StartsBurst int `json:"starts_burst,omitempty"`
	// MaxRunningInstances bounds the instances not yet terminal. Default 10,000.
	MaxRunningInstances int64 `json:"max_running_instances,omitempty"`
	// MaxPayloadBytes bounds one input, output or event payload. Default 1 MiB.
	MaxPayloadBytes int64 `json:"max_payload_bytes,omitempty"`
	// MaxHistoryEventsPerExecution bounds one execution's history; past it
	// an orchestration should continue-as-new. Default 10,000.
	MaxHistoryEventsPerExecution int64 `json:"max_history_events_per_execution,omitempty"`
	// MaxValueBytes bounds one value an orchestration builds or receives (a
	// variable, a step's output, an activity's input, ...), measured as JSON
	// while it is built. Default 1 MiB.
	MaxValueBytes int64 `json:"max_value_bytes,omitempty"`
	// MaxTurnStateBytes bounds what one turn of an orchestration holds at
	// once (variables, step outputs, new history). Default 8 MiB.
	MaxTurnStateBytes int64 `json:"max_turn_state_bytes,omitempty"`
	// TurnBudgetMillis bounds the time one turn may run; past it the
	// execution fails. Default 10 s.
	TurnBudgetMillis int64 `json:"turn_budget_millis,omitempty"`
}

// DefaultLimits are the limits of a tenant that sets none.
func DefaultLimits() Limits {
	return Limits{
		RequestsPerSecond:            100,
		Burst:                        200,
		StartsPerSecond:              100, // unset, it follows RequestsPerSecond
		StartsBurst:                  200, // unset, it follows Burst
		MaxRunningInstances:          10_000,
		MaxPayloadBytes:              1 << 20,
		MaxHistoryEventsPerExecution: 10_000,
		MaxValueBytes:                1 << 20,
		MaxTurnStateBytes:            8 << 20,
		TurnBudgetMillis:             10_000,
	}
}

// Ceilings Validate enforces, whatever a platform admin sets.
const (
	MaxRequestsPerSecond       = 100_000
	MaxBurst                   = 1_000_000
	MaxRunningInstancesCeiling = 100_000_000
	MaxPayloadBytesCeiling     = 16 << 20
	MaxHistoryEventsCeiling    = 1_000_000
	MaxValueBytesCeiling       = 16 << 20
	MaxTurnStateBytesCeiling   = 256 << 20
	TurnBudgetMillisCeiling    = 600_000
)

// Effective returns l with every zero field replaced by its default. A field
// Validate would reject (negative, NaN, above its ceiling) also gets the
// default, so limits that bypassed validation can never disable a check.
func (l Limits) Effective() Limits {
	d := DefaultLimits()
	if !(l.RequestsPerSecond > 0 && l.RequestsPerSecond <= MaxRequestsPerSecond) {
		l.RequestsPerSecond = d.RequestsPerSecond
	}
	if !(l.StartsPerSecond > 0 && l.StartsPerSecond <= MaxRequestsPerSecond) {
		l.StartsPerSecond = l.RequestsPerSecond
	}
	l.Burst = int(inRangeOr(int64(l.Burst), MaxBurst, int64(d.Burst)))
	l.StartsBurst = int(inRangeOr(int64(l.StartsBurst), MaxBurst, int64(l.Burst)))
	l.MaxRunningInstances = inRangeOr(l.MaxRunningInstances, MaxRunningInstancesCeiling, d.MaxRunningInstances)
	l.MaxPayloadBytes = inRangeOr(l.MaxPayloadBytes, MaxPayloadBytesCeiling, d.MaxPayloadBytes)
	l.MaxHistoryEventsPerExecution = inRangeOr(l.MaxHistoryEventsPerExecution, MaxHistoryEventsCeiling, d.MaxHistoryEventsPerExecution)
	l.MaxValueBytes = inRangeOr(l.MaxValueBytes, MaxValueBytesCeiling, d.MaxValueBytes)
	l.MaxTurnStateBytes = inRangeOr(l.MaxTurnStateBytes, MaxTurnStateBytesCeiling, d.MaxTurnStateBytes)
	l.TurnBudgetMillis = inRangeOr(l.TurnBudgetMillis, TurnBudgetMillisCeiling, d.TurnBudgetMillis)
	return l
}

func inRangeOr(v, ceiling, def int64) int64 {
	if v > 0 && v <= ceiling {
		return v
	}
	return def
}

// Validate reports every field out of range, by its JSON name. Zero is valid
// (it means the default); negative values and values above the ceilings are
// not.
func (l Limits) Validate() error {
	var errs []error
	if math.IsNaN(l.RequestsPerSecond) || l.RequestsPerSecond < 0 || l.RequestsPerSecond > MaxRequestsPerSecond {
		errs = append(errs, fmt.Errorf("requests_per_second must be in [0, %d]", MaxRequestsPerSecond))
	}
	if math.IsNaN(l.StartsPerSecond) || l.StartsPerSecond < 0 || l.StartsPerSecond > MaxRequestsPerSecond {
		errs = append(errs, fmt.Errorf("starts_per_second must be in [0, %d]", MaxRequestsPerSecond))
	}
	if l.Burst < 0 || l.Burst > MaxBurst {
		errs = append(errs, fmt.Errorf("burst must be in [0, %d]", MaxBurst))
	}
	if l.StartsBurst < 0 || l.StartsBurst > MaxBurst {
		errs = append(errs, fmt.Errorf("starts_burst must be in [0, %d]", MaxBurst))
	}
	if l.MaxRunningInstances < 0 || l.MaxRunningInstances > MaxRunningInstancesCeiling {
		errs = append(errs, fmt.Errorf("max_running_instances must be in [0, %d]", MaxRunningInstancesCeiling))
	}
	if l.MaxPayloadBytes < 0 || l.MaxPayloadBytes > MaxPayloadBytesCeiling {
		errs = append(errs, fmt.Errorf("max_payload_bytes must be in [0, %d]", MaxPayloadBytesCeiling))
	}
	if l.MaxHistoryEventsPerExecution < 0 || l.MaxHistoryEventsPerExecution > MaxHistoryEventsCeiling {
		errs = append(errs, fmt.Errorf("max_history_events_per_execution must be in [0, %d]", MaxHistoryEventsCeiling))
	}
	if l.MaxValueBytes < 0 || l.MaxValueBytes > MaxValueBytesCeiling {
		errs = append(errs, fmt.Errorf("max_value_bytes must be in [0, %d]", MaxValueBytesCeiling))
	}
	if l.MaxTurnStateBytes < 0 || l.MaxTurnStateBytes > MaxTurnStateBytesCeiling {
		errs = append(errs, fmt.Errorf("max_turn_state_bytes must be in [0, %d]", MaxTurnStateBytesCeiling))
	}
	if l.TurnBudgetMillis < 0 || l.TurnBudgetMillis > TurnBudgetMillisCeiling {
		errs = append(errs, fmt.Errorf("turn_budget_millis must be in [0, %d]", TurnBudgetMillisCeiling))
	}
	if len(errs) > 0 {
		return fmt.Errorf("limits: %w", errors.Join(errs...))
	}
	return nil
}

// ParseLimits decodes limits JSON strictly (unknown fields are errors) and
// validates it. Empty input, null and {} mean all defaults. The result keeps
// zero fields zero; use Effective to apply them.
func ParseLimits(data []byte) (Limits, error) {
	var l Limits
	data = bytes.TrimSpace(data)
	if len(data) == 0 || bytes.Equal(data, []byte("null")) {
		return l, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return Limits{}, fmt.Errorf("limits: %w", err)
	}
	if dec.More() {
		return Limits{}, errors.New("limits: trailing data after JSON object")
	}
	if err := l.Validate(); err != nil {
		return Limits{}, err
	}
	return l, nil
}
