package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// A bad ORCHARD_* value stops the command before it runs, naming the
// variable; it never falls back to the default.
func TestBadEnvironmentStopsTheCommand(t *testing.T) {
	t.Setenv("ORCHARD_DISPATCHER_LOOPS", "abc")
	t.Setenv("ORCHARD_DRAIN_TIMEOUT", "30")
	t.Setenv("ORCHARD_DATABASE_URL", "postgres://127.0.0.1:1/none")
	root := rootCommand()
	root.SetArgs([]string{"dispatcher"})
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	err := root.ExecuteContext(t.Context())
	require.ErrorContains(t, err, `ORCHARD_DISPATCHER_LOOPS="abc": not an integer`)
	require.ErrorContains(t, err, `ORCHARD_DRAIN_TIMEOUT="30": not a duration with a unit`)
}

func TestCheckEnv(t *testing.T) {
	t.Parallel()
	rootCommand() // registers the variables the commands read
	for _, tc := range []struct {
		env     string
		wantErr string
	}{
		{"ORCHARD_DISPATCHER_LOOPS=8", ""},
		{"ORCHARD_DISPATCHER_LOOPS= 8 ", ""},
		{"ORCHARD_DISPATCHER_LOOPS=8x", `ORCHARD_DISPATCHER_LOOPS="8x": not an integer`},
		{"ORCHARD_DISPATCHER_LOOPS=-1", `ORCHARD_DISPATCHER_LOOPS="-1": must not be negative`},
		{"ORCHARD_DISPATCHER_LEASE=45s", ""},
		{"ORCHARD_DISPATCHER_LEASE=45", "not a duration with a unit"},
		{"ORCHARD_DISPATCHER_LEASE=-5s", "must not be negative"},
		{"ORCHARD_JWT_ALGORITHMS=EdDSA,RS256", ""},
		{"ORCHARD_JWT_ALGORITHMS=EdDSA,,RS256", "empty item"},
		{"ORCHARD_DATABASE_URL=anything", ""},
		{"ORCHARD_CONSOLE=true", ""},
		{"ORCHARD_CONSOLE=yes", `ORCHARD_CONSOLE="yes": not a boolean`},
		{"ORCHARD_PPROF=true", ""},
		{"ORCHARD_DISPATCHER_LOOPS=", ""}, // empty is unset
		{"PATH=/bin", ""},
	} {
		unknown, err := checkEnv([]string{tc.env})
		require.Empty(t, unknown, tc.env)
		if tc.wantErr == "" {
			require.NoError(t, err, tc.env)
		} else {
			require.ErrorContains(t, err, tc.wantErr, tc.env)
		}
	}
	unknown, err := checkEnv([]string{"ORCHARD_DISPATCHER_LOOP=4", "ORCHARD_TOKEN=x"})
	require.NoError(t, err)
	require.Equal(t, []string{"ORCHARD_DISPATCHER_LOOP"}, unknown, "a misspelt variable is reported")
}

func TestVersion(t *testing.T) {
	t.Parallel()
	b := currentBuild()
	require.NotEmpty(t, b.Version)
	require.Contains(t, b.String(), "go: go1.")
}
