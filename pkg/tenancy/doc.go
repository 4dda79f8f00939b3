// Package tenancy says who is calling Orchard and how much of it a tenant may
// use: it verifies and mints the JWTs every request carries, turns them into
// an Identity (tenant, subject, roles) kept in the request's context, checks
// the roles an RPC requires, and holds each tenant's request rate. A tenant's
// limits themselves are store.Limits, read with the tenant; the API turns a
// limit reached into an *ExhaustedError from here.
//
// The tenant always comes from a verified token, never from a request body.
// Rejections are sentinel errors the API maps to Connect codes in one place:
// ErrUnauthenticated (with a wrapped reason such as ErrTokenExpired),
// ErrPermissionDenied and ErrResourceExhausted (as *ExhaustedError, which
// carries a retry-after hint).
//
// This package must never put a token, or any part of one, in an error, a log
// line or a panic; never trust an unverified claim; never accept the "none"
// algorithm or an algorithm it was not configured for; never talk to the
// database; and never import other Orchard packages, so that the API service,
// the CLI and tests can all use it on its own.
package tenancy
