package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The components' default ops ports differ (they run side by side on one
// host), none is Prometheus's 9090, and the Helm chart's defaults match.
func TestOpsPortsAgreeWithTheChart(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../deploy/helm/orchard/values.yaml")
	require.NoError(t, err)
	type component struct {
		OpsPort int `yaml:"opsPort"`
	}
	var values struct {
		API        component `yaml:"api"`
		Dispatcher component `yaml:"dispatcher"`
		Janitor    component `yaml:"janitor"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &values))
	seen := map[string]string{}
	for _, c := range []struct {
		name, addr string
		chart      int
	}{{"api", apiOpsAddr, values.API.OpsPort}, {"dispatcher", dispatcherOpsAddr, values.Dispatcher.OpsPort}, {"janitor", janitorOpsAddr, values.Janitor.OpsPort}} {
		component, addr := c.name, c.addr
		require.NotEqual(t, ":9090", addr, component)
		require.NotContains(t, seen, addr, "%s and %s default to one port", component, seen[addr])
		seen[addr] = component
		require.Equal(t, addr, fmt.Sprintf(":%d", c.chart), "the chart's %s.opsPort", component)
	}
}
