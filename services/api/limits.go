package api

import (
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/tenancy"
)

// The limits the API enforces, in force with their defaults (a zero field
// means the default).

// DefaultCallsInFlight is how many calls, long polls aside, the API of one
// process runs at once by default. Its pool has a connection for each, and
// more for the long polls' queries and any dispatcher loops, so that none
// of them queue behind the calls (`orchard api`, `orchard dev`).
// DefaultCallsWaiting bounds a tenant's calls waiting for one, and
// DefaultCallBytesWaiting their requests' bytes; beyond either they are
// refused (ResourceExhausted, calls_in_flight or call_bytes_waiting). A
// slot frees in a few milliseconds, so a wait is short where a refusal
// makes the caller send its request again: a tenant's fan-out, its workers
// completing hundreds of tasks at once, waits.
const (
	DefaultCallsInFlight    = 24
	DefaultCallsWaiting     = 1024
	DefaultCallBytesWaiting = 32 << 20
)

// requestRate is the tenant's request rate for the rate limiter.
func requestRate(l store.Limits) tenancy.Rate {
	e := l.Effective()
	return tenancy.Rate{PerSecond: e.RequestsPerSecond, Burst: e.Burst}
}

// startRate is the tenant's rate of starts for the rate limiter.
func startRate(l store.Limits) tenancy.Rate {
	e := l.Effective()
	return tenancy.Rate{PerSecond: e.StartsPerSecond, Burst: e.StartsBurst, Resource: tenancy.ResourceStarts}
}

// requestBucket names the rate limiter's bucket of a tenant's call: its
// workers' calls have their own. A NUL cannot be in a tenant id.
func requestBucket(tenant string, rule access) string {
	if rule.worker {
		return tenant + "\x00worker"
	}
	return tenant
}

// startBucket names the rate limiter's bucket of a tenant's starts.
func startBucket(tenant string) string { return tenant + "\x00start" }

// checkPayload returns an *tenancy.ExhaustedError when a payload of size
// bytes is larger than the tenant may send.
func checkPayload(l store.Limits, size int) error {
	if limit := l.Effective().MaxPayloadBytes; int64(size) > limit {
		return &tenancy.ExhaustedError{Resource: tenancy.ResourcePayloadBytes, Limit: limit}
	}
	return nil
}
