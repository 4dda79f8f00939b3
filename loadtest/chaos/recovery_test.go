package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A fault's recovery is the longest a turn due around it waited past its
// start; turns far from every fault make the quiet turn wait.
func TestRecoveries(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	faults := []Fault{
		{Kind: FaultDispatcherKill, At: at(10), End: at(11)},
		{Kind: FaultDBRestart, At: at(40), End: at(43)},
		{Kind: FaultDBCut, At: at(70), End: at(72)},
	}
	waits := []turnWait{
		{ready: at(1), recorded: at(1.1)},     // quiet
		{ready: at(9.5), recorded: at(40)},    // held by the killed dispatcher: 30s past the kill
		{ready: at(10.5), recorded: at(10.6)}, // another dispatcher's: quick
		{ready: at(41), recorded: at(44)},     // due while the database was down: waited 3s
		{ready: at(39.5), recorded: at(39.6)}, // done before the restart: not the fault's
		{ready: at(60), recorded: at(60.3)},   // quiet
	}
	byKind, quiet := recoveries(faults, waits)
	require.InDelta(t, 30, float64(*faults[0].Recovery), 0.001)
	require.InDelta(t, 3, float64(*faults[1].Recovery), 0.001)
	require.Nil(t, faults[2].Recovery, "no turn was due around the cut")
	require.Equal(t, 1, byKind[FaultDispatcherKill].Count)
	require.NotContains(t, byKind, FaultDBCut)
	require.Equal(t, 2, quiet.Count)
	require.InDelta(t, 0.3, float64(quiet.Max), 0.001)
}

func TestSchedule(t *testing.T) {
	t.Parallel()
	s := schedule([]FaultKind{FaultAPIKill}, 3*time.Second, 4*time.Second, 5*time.Second, 30*time.Second)
	require.Equal(t, []time.Duration{3 * time.Second, 7 * time.Second, 11 * time.Second, 15 * time.Second, 19 * time.Second, 23 * time.Second}, s)
	require.Empty(t, schedule(nil, time.Second, time.Second, time.Second, time.Minute))
}
