package chaos

import (
	_ "embed"

	"github.com/orchardhq/orchard/loadtest"
)

//go:embed plans/chaos.yaml
var ownPlan []byte

// LoadPlan reads the campaign's load: "chaos", its own plan, or what
// loadtest.LoadPlanFile reads (a built-in load test plan, or a file).
func LoadPlan(name string) (*loadtest.Plan, error) {
	if name == "chaos" {
		return loadtest.ParsePlan(ownPlan)
	}
	return loadtest.LoadPlanFile(name)
}
