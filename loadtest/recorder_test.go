package loadtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/sdk"
)

func TestRecorderCountsOnlyTheMeasuredWindow(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := NewRecorder(start, start.Add(10*time.Second))
	r.Record("a", "x", start.Add(-time.Millisecond), time.Second, nil) // warmup
	r.Record("a", "x", start, 10*time.Millisecond, nil)
	r.Record("a", "x", start.Add(1500*time.Millisecond), 30*time.Millisecond, nil)
	r.Record("a", "x", start.Add(2*time.Second), 0, &startedError{&endedError{status: "Failed"}})
	refused := &sdk.Error{Code: connect.CodeResourceExhausted}
	r.Record("a", "x", start.Add(3*time.Second), 0, refused)                // its start
	r.Record("a", "x", start.Add(3*time.Second), 0, &startedError{refused}) // its wait
	r.Record("a", "x", start.Add(10*time.Second), time.Second, nil)         // after the end
	done, _, ended, failed := r.Progress()
	require.Equal(t, int64(4), done, "progress counts the warmup too")
	require.Equal(t, int64(7), ended)
	require.Equal(t, int64(3), failed)
	keys, all := r.snapshot()
	require.Equal(t, []seriesKey{{"a", "x"}}, keys)
	s := all[keys[0]]
	require.Equal(t, int64(2), s.completed)
	require.Equal(t, int64(4), s.started, "the completed, the failed and the one whose wait was refused")
	require.Equal(t, map[string]int64{"ended_Failed": 1, "resource_exhausted": 2}, s.errors)
	require.Len(t, s.seconds, 2)
	require.Equal(t, int64(1), s.seconds[1].TotalCount())
	done, _, _, _ = r.Progress()
	require.Zero(t, done, "progress restarts after each call")
}

func TestRecorderSplitsLatenciesByWhenTheyWereDue(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// A warmup of 5 s, windows of 10 s: off [0, 10), on [10, 20), off [20, 30).
	r := NewRecorder(t0.Add(5*time.Second), t0.Add(30*time.Second))
	r.splitByWindow(t0, 10*time.Second)
	due := func(at, latency time.Duration) {
		r.Record("a", "x", t0.Add(at+latency), latency, nil)
	}
	due(6*time.Second, 3*time.Millisecond)
	due(9500*time.Millisecond, 800*time.Millisecond)             // due off, ends on: off
	due(10*time.Second+500*time.Millisecond, time.Millisecond)   // in the first second of an on window: its onset
	due(20*time.Second+500*time.Millisecond, 2*time.Millisecond) // in the first second of an off window: neither
	due(12*time.Second, 7*time.Millisecond)
	due(13*time.Second, 9*time.Millisecond)
	due(21*time.Second, 4*time.Millisecond)
	r.Record("a", "x", t0.Add(14*time.Second), 0, &sdk.Error{Code: connect.CodeResourceExhausted})
	_, all := r.snapshot()
	s := all[seriesKey{"a", "x"}]
	require.Equal(t, int64(7), s.hist.TotalCount(), "every completion counts in the whole")
	require.Equal(t, map[int][]int64{0: {3000, 800_000}, 1: {7000, 9000}, 2: {4000}}, s.windows)
	require.Equal(t, []int64{1000}, s.onsets)

	plain := NewRecorder(t0, t0.Add(10*time.Second))
	plain.Record("a", "x", t0.Add(time.Second), time.Millisecond, nil)
	_, all = plain.snapshot()
	require.Nil(t, all[seriesKey{"a", "x"}].windows, "no windows without a cycle")
}

func TestErrorCode(t *testing.T) {
	t.Parallel()
	require.Equal(t, "resource_exhausted", ErrorCode(fmt.Errorf("start: %w", &sdk.Error{Code: connect.CodeResourceExhausted})))
	require.Equal(t, "ended_Cancelled", ErrorCode(&startedError{&endedError{status: "Cancelled"}}))
	require.Equal(t, "resource_exhausted", ErrorCode(&startedError{&sdk.Error{Code: connect.CodeResourceExhausted}}))
	require.Equal(t, "deadline_exceeded", ErrorCode(context.DeadlineExceeded))
	require.Equal(t, "canceled", ErrorCode(context.Canceled))
	require.Equal(t, "other", ErrorCode(errors.New("boom")))
}

func TestACallEndedByTheRunsDeadlineIsACutOffNotAFailure(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	running := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	deadline := fmt.Errorf("wait: %w", context.DeadlineExceeded)

	// The server holds the deadline to the millisecond below the client's.
	require.True(t, cutOff(running, deadline, end.Add(-700*time.Microsecond), end))
	require.True(t, cutOff(running, deadline, end, end))
	require.True(t, cutOff(ended, errors.New("canceled"), end.Add(time.Millisecond), end))

	require.False(t, cutOff(running, deadline, end.Add(-2*time.Millisecond), end),
		"a deadline met well before the run's end is a failure")
	require.False(t, cutOff(running, errors.New("unavailable"), end, end))
	require.False(t, cutOff(ended, errors.New("canceled"), end.Add(-time.Second), end),
		"a run stopped early records what its calls met")
}
