package tenancy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Role is what a token allows its bearer to do.
type Role string

// The roles Orchard knows. Tokens naming any other role are rejected.
const (
	// RoleClient starts, queries and manages a tenant's instances.
	RoleClient Role = "client"
	// RoleWorker polls and completes a tenant's activity tasks.
	RoleWorker Role = "worker"
	// RoleTenantAdmin manages a tenant's definitions, retention and limits view.
	RoleTenantAdmin Role = "tenant-admin"
	// RolePlatformAdmin runs the Admin service across tenants. It does NOT
	// imply any tenant role: a platform admin that should also act as a
	// tenant's client needs a token naming that tenant and RoleClient. Its
	// token may name no tenant.
	RolePlatformAdmin Role = "platform-admin"
)

// Known reports whether r is one of the roles above.
func (r Role) Known() bool {
	switch r {
	case RoleClient, RoleWorker, RoleTenantAdmin, RolePlatformAdmin:
		return true
	}
	return false
}

// Claims are what a token says about its bearer: the input of Mint.
type Claims struct {
	// Tenant is the tenant the bearer acts for. Required unless the only role
	// is RolePlatformAdmin.
	Tenant string
	// Subject names the bearer (a user, a service, a worker pool) for audit.
	Subject string
	// Roles must be non-empty and known.
	Roles []Role
}

// Identity is the verified caller of a request.
type Identity struct {
	Tenant  string
	Subject string
	// Roles are known, without duplicates, in the order the token gave them.
	Roles []Role
	// TokenID is the token's jti claim, empty when it has none.
	TokenID string
	// ExpiresAt is when the token stops being accepted (without leeway).
	ExpiresAt time.Time
}

// Has reports whether the identity holds role. A nil identity holds nothing.
// RolePlatformAdmin implies no other role.
func (id *Identity) Has(role Role) bool {
	return id != nil && slices.Contains(id.Roles, role)
}

// RequireAny returns nil when the identity holds at least one of anyOf, and
// an error matching ErrPermissionDenied otherwise. An empty anyOf is a
// programming error and denies (fail closed).
func (id *Identity) RequireAny(anyOf ...Role) error {
	if id == nil {
		return unauthenticated(ErrTokenMissing, "no identity in context")
	}
	if len(anyOf) == 0 {
		return fmt.Errorf("%w: operation names no role", ErrPermissionDenied)
	}
	for _, r := range anyOf {
		if id.Has(r) {
			return nil
		}
	}
	names := make([]string, len(anyOf))
	for i, r := range anyOf {
		names[i] = string(r)
	}
	if len(names) == 1 {
		return fmt.Errorf("%w: this call needs a token with the role %s: use a %s token", ErrPermissionDenied, names[0], names[0])
	}
	return fmt.Errorf("%w: this call needs a token with one of the roles %s: use a %s token", ErrPermissionDenied,
		strings.Join(names, ", "), strings.Join(names[:len(names)-1], ", ")+" or "+names[len(names)-1])
}

type identityKey struct{}

// WithIdentity returns a context carrying id.
func WithIdentity(ctx context.Context, id *Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the identity WithIdentity stored, if any.
func IdentityFrom(ctx context.Context) (*Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(*Identity)
	return id, ok && id != nil
}

// Authorize returns the context's identity when it holds at least one of
// anyOf. Without an identity the error matches ErrUnauthenticated; without a
// required role it matches ErrPermissionDenied.
func Authorize(ctx context.Context, anyOf ...Role) (*Identity, error) {
	id, ok := IdentityFrom(ctx)
	if !ok {
		return nil, unauthenticated(ErrTokenMissing, "no identity in context")
	}
	if err := id.RequireAny(anyOf...); err != nil {
		return nil, err
	}
	return id, nil
}

// Bounds on claim text, so that ids are safe to log and index.
const (
	maxTenantBytes  = 128
	maxSubjectBytes = 256
	maxRoles        = 8
)

// checkClaims validates claims as both Mint and Verify require and returns
// the roles without duplicates. Errors are plain detail text; callers wrap
// them. They never quote claim values.
func checkClaims(tenant, subject string, roles []string) ([]Role, error) {
	if len(roles) == 0 {
		return nil, errors.New("no roles")
	}
	if len(roles) > maxRoles {
		return nil, fmt.Errorf("more than %d roles", maxRoles)
	}
	out := make([]Role, 0, len(roles))
	tenantRole := false
	for _, s := range roles {
		r := Role(s)
		if !r.Known() {
			return nil, errors.New("unknown role")
		}
		if r != RolePlatformAdmin {
			tenantRole = true
		}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	if tenant == "" && tenantRole {
		return nil, errors.New("tenant claim required for tenant roles")
	}
	if err := checkName(tenant, maxTenantBytes); err != nil {
		return nil, fmt.Errorf("tenant claim %w", err)
	}
	if subject == "" {
		return nil, errors.New("subject claim required")
	}
	if err := checkName(subject, maxSubjectBytes); err != nil {
		return nil, fmt.Errorf("subject claim %w", err)
	}
	return out, nil
}

// checkName accepts text of at most max bytes of valid UTF-8 without spaces
// or control characters.
func checkName(s string, maxBytes int) error {
	if len(s) > maxBytes {
		return fmt.Errorf("longer than %d bytes", maxBytes)
	}
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	for _, c := range s {
		if unicode.IsSpace(c) || unicode.IsControl(c) {
			return errors.New("contains space or control characters")
		}
	}
	return nil
}
