//go:build !race

package tenancy

const raceEnabled = false
