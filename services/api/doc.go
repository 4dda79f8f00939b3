// Package api serves Orchard's public API (proto/orchard/v1): the Client,
// Worker, Definition, Tenant and Admin services over Connect, gRPC and
// gRPC-Web on one port, with gRPC health and reflection beside them.
//
// Every call passes the same chain of interceptors, outermost first:
// telemetry (OpenTelemetry through internal/rpcotel), the error mapping and the
// call's log line, authentication (a Bearer JWT verified by
// tenancy.Verifier), authorization by procedure (the table in authz.go),
// the tenant's state and request rate, and request validation
// (protovalidate). Handlers then act on the tenant of the verified token
// and nothing else; only Admin calls name tenants in their requests.
//
// In front of the tenants' services, before Connect reads a request's body,
// the rate gate (refuse.go) authenticates, authorizes and admits the call
// from its headers: a tenant past its request rate is refused there, with
// the error, telemetry and log line the chain would have given it, and
// every other call goes on to the chain with what the gate found, so that
// each call is verified and takes a token of its rate once.
//
// Domain errors (store sentinels, tenancy errors) become Connect codes in
// exactly one function, connectError; anything it does not know becomes
// Internal with a generic message, its detail only logged.
//
// This package must never take a tenant from a request body outside the
// Admin service, never write SQL (everything goes through pkg/store), never
// send a database error's text to a client, and never log a token.
package api
