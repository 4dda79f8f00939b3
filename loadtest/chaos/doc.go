// Package chaos is Orchard's fault campaign: it runs the whole system as
// separate processes (an embedded PostgreSQL, `orchard api`, several
// `orchard dispatcher` and SDK workers), drives orchestrations through the
// API with the load test's workloads (package loadtest) while it injects
// faults on a schedule (kill -9 of a dispatcher, of the API, of a worker,
// then their restart; a database restart; connection cuts and added latency
// between the services and the database, through an in-process toxiproxy),
// then judges what the API shows: every instance completed exactly once,
// with an intact history (Check), and how long each fault held turns up.
//
// The judge reads only the public API, never the database: what it checks
// is what a tenant would see. The campaign must never be pointed at a
// deployment: it starts and kills its own processes.
package chaos
