package tenancy

import (
	"errors"
	"fmt"
	"time"
)

// The three outcomes the API maps to Connect codes: Unauthenticated,
// PermissionDenied and ResourceExhausted.
var (
	// ErrUnauthenticated means the request carries no valid token. It is
	// always joined with one of the ErrToken* reasons below.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrPermissionDenied means the caller is known but lacks every role the
	// operation accepts.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrResourceExhausted means a tenant limit was reached. Errors that match
	// it are *ExhaustedError values.
	ErrResourceExhausted = errors.New("resource exhausted")
)

// Reasons a token is rejected. Every error Verify returns matches
// ErrUnauthenticated and exactly one of these. None of their texts, nor the
// details joined to them, contain the token.
var (
	ErrTokenMissing     = errors.New("no token")
	ErrTokenMalformed   = errors.New("token malformed")
	ErrTokenAlgorithm   = errors.New("token algorithm not allowed")
	ErrTokenKey         = errors.New("no verification key for token")
	ErrTokenSignature   = errors.New("token signature invalid")
	ErrTokenExpired     = errors.New("token expired")
	ErrTokenNotYetValid = errors.New("token not yet valid")
	ErrTokenIssuer      = errors.New("token issuer not accepted")
	ErrTokenAudience    = errors.New("token audience not accepted")
	ErrTokenClaims      = errors.New("token claims invalid")
)

// unauthenticated joins ErrUnauthenticated, a reason and an optional detail.
// The detail must be our own text, never token content.
func unauthenticated(reason error, detail string) error {
	if detail == "" {
		return fmt.Errorf("%w: %w", ErrUnauthenticated, reason)
	}
	return fmt.Errorf("%w: %w: %s", ErrUnauthenticated, reason, detail)
}

// Resources named by ExhaustedError.
const (
	ResourceRequests         = "requests"
	ResourceStarts           = "starts"
	ResourceRunningInstances = "running_instances"
	ResourcePayloadBytes     = "payload_bytes"
)

// ExhaustedError reports a tenant limit that was reached. It matches
// ErrResourceExhausted with errors.Is.
type ExhaustedError struct {
	// Resource is one of the Resource* constants.
	Resource string
	// Limit is the limit that was reached: the burst for requests, the
	// maximum for the others.
	Limit int64
	// RetryAfter is how long to wait before the same request can succeed;
	// zero when waiting alone will not help (a payload too large) or the
	// time cannot be known (running instances must first complete).
	RetryAfter time.Duration
}

func (e *ExhaustedError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("%v: %s (limit %d), retry after %v", ErrResourceExhausted, e.Resource, e.Limit, e.RetryAfter)
	}
	return fmt.Sprintf("%v: %s (limit %d)", ErrResourceExhausted, e.Resource, e.Limit)
}

// Is makes errors.Is(err, ErrResourceExhausted) true.
func (e *ExhaustedError) Is(target error) bool { return target == ErrResourceExhausted }
