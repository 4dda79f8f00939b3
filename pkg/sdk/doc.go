// Package sdk is Orchard's Go SDK: the package tenants import to talk to an
// Orchard API server.
//
// A [Client] starts orchestration instances and looks after them: raise
// events, cancel, read, wait for completion, read history, list (an
// iterator over every page), count, delete (one tree, or in bulk, driven to
// completion), prune continue-as-new chains, and register definitions. A
// [Worker] runs the tenant's activity code: it polls a task queue, runs the
// handler registered for each task's activity name ([Register]), keeps the
// task's lease alive with heartbeats, cancels the handler as soon as the
// task is cancelled or lost, and reports the result.
//
// Values cross the API as JSON: inputs, outputs, event payloads and
// activity results are encoded with encoding/json ([json.RawMessage] passes
// as it is). Errors are [*Error] values that match this package's sentinels
// with [errors.Is] (ErrNotFound, ErrRunning, ErrInvalidArgument, ...).
// Calls that are safe to repeat are retried on Unavailable, and every call
// is retried on a rate limit that says when to come back, with bounded,
// jittered exponential backoff ([RetryPolicy]).
//
// The token (a JWT with the client or worker role) comes from [WithToken]
// or the ORCHARD_TOKEN environment variable; the tenant is the token's, so
// no call names a tenant.
//
// This package depends only on the generated API (proto/orchard/v1), Connect
// and protobuf. It must never import Orchard's server packages (pkg/store,
// pkg/engine, services/...), never log or print a token, never retry a call
// whose repetition could do something twice (an event raised twice, a second
// instance started), and never report an activity result after its task's
// lease is known to be lost.
package sdk
