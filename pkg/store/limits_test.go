package store_test

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/store"
)

func TestLimitsJSONDefaults(t *testing.T) {
	t.Parallel()
	d := store.DefaultLimits()
	tests := []struct {
		name string
		json string
		want store.Limits // effective
	}{
		{"empty column", ``, d},
		{"null", `null`, d},
		{"empty object", `{}`, d},
		{"one field set", `{"max_payload_bytes": 4096}`, func() store.Limits { l := d; l.MaxPayloadBytes = 4096; return l }()},
		{"all fields set", `{"requests_per_second": 5.5, "burst": 10, "starts_per_second": 2.5, "starts_burst": 4, "max_running_instances": 7, "max_payload_bytes": 100, "max_history_events_per_execution": 50, "max_value_bytes": 60, "max_turn_state_bytes": 70, "turn_budget_millis": 80}`,
			store.Limits{RequestsPerSecond: 5.5, Burst: 10, StartsPerSecond: 2.5, StartsBurst: 4, MaxRunningInstances: 7, MaxPayloadBytes: 100, MaxHistoryEventsPerExecution: 50, MaxValueBytes: 60, MaxTurnStateBytes: 70, TurnBudgetMillis: 80}},
		{"explicit zero means default", `{"burst": 0}`, d},
		// Starts follow the request rate unless they are set.
		{"request rate alone", `{"requests_per_second": 1000}`, func() store.Limits { l := d; l.RequestsPerSecond, l.StartsPerSecond = 1000, 1000; return l }()},
		{"starts set", `{"requests_per_second": 1000, "starts_per_second": 25}`, func() store.Limits { l := d; l.RequestsPerSecond, l.StartsPerSecond = 1000, 25; return l }()},
		// And the starts' burst follows the requests' unless it is set.
		{"burst alone", `{"burst": 30}`, func() store.Limits { l := d; l.Burst, l.StartsBurst = 30, 30; return l }()},
		{"starts burst set", `{"burst": 30, "starts_burst": 5}`, func() store.Limits { l := d; l.Burst, l.StartsBurst = 30, 5; return l }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := store.ParseLimits([]byte(tt.json))
			require.NoError(t, err)
			require.Equal(t, tt.want, l.Effective())

			// Plain encoding/json (as a JSONB scan would do) agrees.
			var plain store.Limits
			if tt.json != "" {
				require.NoError(t, json.Unmarshal([]byte(tt.json), &plain))
			}
			require.Equal(t, tt.want, plain.Effective())
		})
	}

	// Defaults are not written back, so they keep following DefaultLimits.
	out, err := json.Marshal(store.Limits{MaxPayloadBytes: 4096})
	require.NoError(t, err)
	require.JSONEq(t, `{"max_payload_bytes": 4096}`, string(out))

	require.Equal(t, store.Limits{RequestsPerSecond: 100, Burst: 200, StartsPerSecond: 100, StartsBurst: 200, MaxRunningInstances: 10_000, MaxPayloadBytes: 1 << 20, MaxHistoryEventsPerExecution: 10_000,
		MaxValueBytes: 1 << 20, MaxTurnStateBytes: 8 << 20, TurnBudgetMillis: 10_000}, d)
}

func TestLimitsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limits store.Limits
		fields []string // JSON names the error must mention; none means valid
	}{
		{name: "zero is valid", limits: store.Limits{}},
		{name: "defaults are valid", limits: store.DefaultLimits()},
		{name: "ceilings are valid", limits: store.Limits{RequestsPerSecond: store.MaxRequestsPerSecond, Burst: store.MaxBurst,
			StartsPerSecond: store.MaxRequestsPerSecond, MaxRunningInstances: store.MaxRunningInstancesCeiling, MaxPayloadBytes: store.MaxPayloadBytesCeiling, MaxHistoryEventsPerExecution: store.MaxHistoryEventsCeiling}},
		{name: "negative rate", limits: store.Limits{RequestsPerSecond: -1}, fields: []string{"requests_per_second"}},
		{name: "NaN rate", limits: store.Limits{RequestsPerSecond: math.NaN()}, fields: []string{"requests_per_second"}},
		{name: "infinite rate", limits: store.Limits{RequestsPerSecond: math.Inf(1)}, fields: []string{"requests_per_second"}},
		{name: "negative start rate", limits: store.Limits{StartsPerSecond: -1}, fields: []string{"starts_per_second"}},
		{name: "NaN start rate", limits: store.Limits{StartsPerSecond: math.NaN()}, fields: []string{"starts_per_second"}},
		{name: "start rate above ceiling", limits: store.Limits{StartsPerSecond: store.MaxRequestsPerSecond + 1}, fields: []string{"starts_per_second"}},
		{name: "negative burst", limits: store.Limits{Burst: -1}, fields: []string{"burst"}},
		{name: "negative starts burst", limits: store.Limits{StartsBurst: -1}, fields: []string{"starts_burst"}},
		{name: "starts burst above ceiling", limits: store.Limits{StartsBurst: store.MaxBurst + 1}, fields: []string{"starts_burst"}},
		{name: "payload above ceiling", limits: store.Limits{MaxPayloadBytes: store.MaxPayloadBytesCeiling + 1}, fields: []string{"max_payload_bytes"}},
		{name: "several at once", limits: store.Limits{MaxRunningInstances: -1, MaxHistoryEventsPerExecution: -5},
			fields: []string{"max_running_instances", "max_history_events_per_execution"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.limits.Validate()
			if len(tt.fields) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, f := range tt.fields {
				require.Contains(t, err.Error(), f)
			}
		})
	}
}

func TestParseLimitsRejects(t *testing.T) {
	t.Parallel()
	for _, data := range []string{
		`{"max_payload_bytes": -1}`,
		`{"max_payload": 10}`, // unknown field: a typo must not silently mean default
		`{"burst": "ten"}`,
		`[1]`,
		`{} {}`,
	} {
		_, err := store.ParseLimits([]byte(data))
		require.Error(t, err, data)
	}
}

func TestLimitsEffectiveIgnoresInvalid(t *testing.T) {
	t.Parallel()
	bad := store.Limits{RequestsPerSecond: math.Inf(1), StartsPerSecond: math.NaN(), Burst: -3, StartsBurst: -4, MaxRunningInstances: -1, MaxPayloadBytes: store.MaxPayloadBytesCeiling + 1, MaxHistoryEventsPerExecution: -1}
	require.Error(t, bad.Validate())
	require.Equal(t, store.DefaultLimits(), bad.Effective())
}
