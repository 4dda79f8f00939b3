// Package loadtest drives a running Orchard through its public API, with
// the Go SDK only, and reports what a user would see: completions per
// second, start-to-completion latency (p50, p90, p99, p99.9) per load and
// per tenant, errors by code, the server's CPU when it can be read, and a
// latency-over-time chart.
//
// A plan (a YAML file, or one of the plans built in: see Plans) names the
// tenants, each with its limits and its loads. A load is a workload kind
// (one-activity, fan-out, continue-as-new, timer, event,
// sub-orchestration) run closed-loop (a fixed number in flight, each
// started when the last ended) or open-loop (a fixed arrival rate). Open
// loops measure each latency from when the orchestration was due to start,
// not from when the generator got round to it, so that a server that
// stalls the generator is not flattered by it (coordinated omission).
//
// The generator never reads the database and never imports a server
// package: what it measures is what a client sees. It must never be
// pointed at a deployment it may not load: it creates tenants (with an
// admin token) and runs orchestrations in them.
package loadtest
