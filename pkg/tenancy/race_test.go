//go:build race

package tenancy

// raceEnabled: the race detector slows each call tenfold; loops shrink.
const raceEnabled = true
