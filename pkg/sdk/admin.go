package sdk

import (
	"context"
	"fmt"
	"iter"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
)

// A tenant's settings and the platform's administration are separate
// clients, because they need separate tokens: a [TenantClient] acts with a
// tenant-admin token on its own tenant (retention policy, limits, usage);
// an [AdminClient] acts with a platform-admin token on every tenant
// (create, suspend, resume, limits, tokens, usage). Both take the same
// options as NewClient and retry the same way.

// TenantClient reads and changes the settings of one tenant (the token's):
// its retention policy, and reads its limits and usage. Its token needs the
// tenant-admin role. It is safe for concurrent use.
type TenantClient struct {
	c       *Client
	tenants orchardv1connect.TenantServiceClient
}

// NewTenantClient returns a client of the TenantService at baseURL. The
// token comes from WithToken or ORCHARD_TOKEN, as for NewClient.
func NewTenantClient(baseURL string, opts ...Option) *TenantClient {
	c, httpClient, copts := newServiceClient(baseURL, opts)
	return &TenantClient{c: c, tenants: orchardv1connect.NewTenantServiceClient(httpClient, c.baseURL, copts...)}
}

// AdminClient runs the platform: it creates, reads, lists, suspends and
// resumes tenants, sets their limits, mints their tokens and reads their
// usage. Its token needs the platform-admin role. It is safe for concurrent
// use.
type AdminClient struct {
	c     *Client
	admin orchardv1connect.AdminServiceClient
}

// NewAdminClient returns a client of the AdminService at baseURL. The token
// comes from WithToken or ORCHARD_TOKEN, as for NewClient.
func NewAdminClient(baseURL string, opts ...Option) *AdminClient {
	c, httpClient, copts := newServiceClient(baseURL, opts)
	return &AdminClient{c: c, admin: orchardv1connect.NewAdminServiceClient(httpClient, c.baseURL, copts...)}
}

// BaseURL is the API's URL the client calls.
func (t *TenantClient) BaseURL() string { return t.c.baseURL }

// BaseURL is the API's URL the client calls.
func (a *AdminClient) BaseURL() string { return a.c.baseURL }

// RetentionRule says how long terminal instances are kept and how
// continue-as-new chains are trimmed. A nil field is unset: it keeps the
// value of the rule it overrides (a name's rule overrides the default rule,
// which overrides "keep forever"). Durations run from the instance's
// completion; 0 deletes at the janitor's next run.
type RetentionRule struct {
	// Completed, Failed and Cancelled: how long instances that ended so are
	// kept.
	Completed, Failed, Cancelled *time.Duration
	// KeepLast keeps the newest KeepLast executions of each continue-as-new
	// chain (1 to 100000).
	KeepLast *int
	// MaxAge prunes past executions that ended longer ago than this; with
	// KeepLast, an execution goes only when both say so.
	MaxAge *time.Duration
	// AutoPrune applies KeepLast at each continue-as-new instead of waiting
	// for the janitor (it needs KeepLast).
	AutoPrune *bool
}

// IsZero reports whether the rule sets nothing.
func (r RetentionRule) IsZero() bool {
	return r.Completed == nil && r.Failed == nil && r.Cancelled == nil && r.KeepLast == nil && r.MaxAge == nil && r.AutoPrune == nil
}

// RetentionPolicy is a tenant's retention policy: a default rule, and rules
// by orchestration name that override it field by field. An instance's own
// retention (WithRetention) overrides both. The zero policy keeps
// everything.
type RetentionPolicy struct {
	Default RetentionRule
	ByName  map[string]RetentionRule
}

func optDuration(d *time.Duration) *durationpb.Duration {
	if d == nil {
		return nil
	}
	return durationpb.New(*d)
}

func fromOptDuration(d *durationpb.Duration) *time.Duration {
	if d == nil {
		return nil
	}
	v := d.AsDuration()
	return &v
}

func (r RetentionRule) toProto() *orchardv1.RetentionRule {
	p := &orchardv1.RetentionRule{Completed: optDuration(r.Completed), Failed: optDuration(r.Failed), Cancelled: optDuration(r.Cancelled)}
	if r.KeepLast != nil || r.MaxAge != nil || r.AutoPrune != nil {
		p.ContinueAsNew = &orchardv1.ContinueAsNewRetention{MaxAge: optDuration(r.MaxAge), AutoPrune: r.AutoPrune}
		if r.KeepLast != nil {
			k := int32(*r.KeepLast)
			p.ContinueAsNew.KeepLast = &k
		}
	}
	return p
}

func ruleFromProto(p *orchardv1.RetentionRule) RetentionRule {
	r := RetentionRule{Completed: fromOptDuration(p.GetCompleted()), Failed: fromOptDuration(p.GetFailed()), Cancelled: fromOptDuration(p.GetCancelled())}
	if c := p.GetContinueAsNew(); c != nil {
		r.MaxAge = fromOptDuration(c.GetMaxAge())
		if c.KeepLast != nil {
			k := int(c.GetKeepLast())
			r.KeepLast = &k
		}
		if c.AutoPrune != nil {
			b := c.GetAutoPrune()
			r.AutoPrune = &b
		}
	}
	return r
}

func (p RetentionPolicy) toProto() *orchardv1.RetentionPolicy {
	out := &orchardv1.RetentionPolicy{}
	if !p.Default.IsZero() {
		out.DefaultRule = p.Default.toProto()
	}
	for name, r := range p.ByName {
		if out.RulesByName == nil {
			out.RulesByName = map[string]*orchardv1.RetentionRule{}
		}
		out.RulesByName[name] = r.toProto()
	}
	return out
}

func policyFromProto(p *orchardv1.RetentionPolicy) RetentionPolicy {
	var out RetentionPolicy
	if d := p.GetDefaultRule(); d != nil {
		out.Default = ruleFromProto(d)
	}
	for name, r := range p.GetRulesByName() {
		if out.ByName == nil {
			out.ByName = map[string]RetentionRule{}
		}
		out.ByName[name] = ruleFromProto(r)
	}
	return out
}

// Limits are a tenant's quotas; a call that would exceed one fails with
// ErrResourceExhausted. A zero field means the platform's default.
type Limits struct {
	// RequestsPerSecond is the sustained API request rate; Burst the
	// requests allowed at once above it. StartsPerSecond is the rate of
	// orchestration starts (zero: as many as the request rate lets
	// through); StartsBurst the starts allowed at once above it (zero:
	// Burst).
	RequestsPerSecond float64
	Burst             int
	StartsPerSecond   float64
	StartsBurst       int
	// MaxRunningInstances bounds the instances running at once.
	MaxRunningInstances int64
	// MaxPayloadBytes bounds one input, output or event.
	MaxPayloadBytes int64
	// MaxHistoryEventsPerExecution bounds one execution's history.
	MaxHistoryEventsPerExecution int64
	// MaxValueBytes bounds one value an orchestration builds or receives,
	// MaxTurnStateBytes what one turn holds at once, and TurnBudget how
	// long one turn may run.
	MaxValueBytes, MaxTurnStateBytes int64
	TurnBudget                       time.Duration
}

func (l Limits) toProto() *orchardv1.Limits {
	return &orchardv1.Limits{
		RequestsPerSecond: l.RequestsPerSecond, Burst: int32(l.Burst), StartsPerSecond: l.StartsPerSecond, StartsBurst: int32(l.StartsBurst), MaxRunningInstances: l.MaxRunningInstances,
		MaxPayloadBytes: l.MaxPayloadBytes, MaxHistoryEventsPerExecution: l.MaxHistoryEventsPerExecution,
		MaxValueBytes: l.MaxValueBytes, MaxTurnStateBytes: l.MaxTurnStateBytes, TurnBudgetMillis: l.TurnBudget.Milliseconds(),
	}
}

func limitsFromProto(p *orchardv1.Limits) Limits {
	return Limits{
		RequestsPerSecond: p.GetRequestsPerSecond(), Burst: int(p.GetBurst()), StartsPerSecond: p.GetStartsPerSecond(), StartsBurst: int(p.GetStartsBurst()), MaxRunningInstances: p.GetMaxRunningInstances(),
		MaxPayloadBytes: p.GetMaxPayloadBytes(), MaxHistoryEventsPerExecution: p.GetMaxHistoryEventsPerExecution(),
		MaxValueBytes: p.GetMaxValueBytes(), MaxTurnStateBytes: p.GetMaxTurnStateBytes(), TurnBudget: time.Duration(p.GetTurnBudgetMillis()) * time.Millisecond,
	}
}

// Usage is what a tenant stores.
type Usage struct {
	// Instances counts the instances stored, in total and by status.
	Instances Counts
	// Executions and Events count the executions and history events
	// stored; QueuedMessages the messages waiting in the queues.
	Executions, Events, QueuedMessages int64
	// MeasuredAt is when the counts were taken.
	MeasuredAt time.Time
}

func usageFromProto(p *orchardv1.Usage) *Usage {
	u := &Usage{Executions: p.GetExecutions(), Events: p.GetEvents(), QueuedMessages: p.GetQueuedMessages(), MeasuredAt: fromTimestamp(p.GetMeasuredAt())}
	b := p.GetInstances()
	u.Instances.ByStatus = map[Status]int64{
		StatusRunning:        b.GetRunning(),
		StatusCompleted:      b.GetCompleted(),
		StatusFailed:         b.GetFailed(),
		StatusCancelled:      b.GetCancelled(),
		StatusContinuedAsNew: b.GetContinuedAsNew(),
	}
	for _, n := range u.Instances.ByStatus {
		u.Instances.Total += n
	}
	return u
}

// RetentionPolicy reads the tenant's retention policy.
func (t *TenantClient) RetentionPolicy(ctx context.Context) (*RetentionPolicy, error) {
	resp, err := call(ctx, t.c, idempotent, t.tenants.GetRetentionPolicy, &orchardv1.GetRetentionPolicyRequest{})
	if err != nil {
		return nil, err
	}
	p := policyFromProto(resp.GetPolicy())
	return &p, nil
}

// SetRetentionPolicy replaces the tenant's retention policy and returns it
// as stored. The janitor applies it at its next run for the tenant.
func (t *TenantClient) SetRetentionPolicy(ctx context.Context, policy RetentionPolicy) (*RetentionPolicy, error) {
	resp, err := call(ctx, t.c, idempotent, t.tenants.SetRetentionPolicy, &orchardv1.SetRetentionPolicyRequest{Policy: policy.toProto()})
	if err != nil {
		return nil, err
	}
	p := policyFromProto(resp.GetPolicy())
	return &p, nil
}

// Limits reads the limits the platform set for the tenant, with the
// platform's defaults filled in.
func (t *TenantClient) Limits(ctx context.Context) (*Limits, error) {
	resp, err := call(ctx, t.c, idempotent, t.tenants.GetLimits, &orchardv1.GetLimitsRequest{})
	if err != nil {
		return nil, err
	}
	l := limitsFromProto(resp.GetLimits())
	return &l, nil
}

// Usage reads what the tenant stores now.
func (t *TenantClient) Usage(ctx context.Context) (*Usage, error) {
	resp, err := call(ctx, t.c, idempotent, t.tenants.GetUsage, &orchardv1.GetUsageRequest{})
	if err != nil {
		return nil, err
	}
	return usageFromProto(resp.GetUsage()), nil
}

// TenantState is the lifecycle state of a tenant.
type TenantState string

// Tenant states.
const (
	// TenantActive: the tenant's calls are served and its instances run.
	TenantActive TenantState = "Active"
	// TenantSuspended: the tenant's calls are refused (ErrPermissionDenied)
	// and its instances do not progress; nothing is deleted.
	TenantSuspended TenantState = "Suspended"
	// TenantDeleting: the tenant's data is being deleted.
	TenantDeleting TenantState = "Deleting"
)

var tenantStateToProto = map[TenantState]orchardv1.TenantState{
	TenantActive:    orchardv1.TenantState_TENANT_STATE_ACTIVE,
	TenantSuspended: orchardv1.TenantState_TENANT_STATE_SUSPENDED,
	TenantDeleting:  orchardv1.TenantState_TENANT_STATE_DELETING,
}

func tenantStateFromProto(s orchardv1.TenantState) TenantState {
	for st, p := range tenantStateToProto {
		if p == s {
			return st
		}
	}
	return TenantState(fmt.Sprintf("Unknown(%d)", s))
}

// Tenant is a customer of the platform: the unit of isolation.
type Tenant struct {
	ID    string
	State TenantState
	// Limits are as set (zero fields: the platform's defaults).
	Limits          Limits
	RetentionPolicy RetentionPolicy
	// CreatedAt is when the tenant was created, UpdatedAt when it last
	// changed.
	CreatedAt, UpdatedAt time.Time
}

func tenantFromProto(p *orchardv1.Tenant) *Tenant {
	return &Tenant{
		ID: p.GetTenantId(), State: tenantStateFromProto(p.GetState()),
		Limits: limitsFromProto(p.GetLimits()), RetentionPolicy: policyFromProto(p.GetRetentionPolicy()),
		CreatedAt: fromTimestamp(p.GetCreatedAt()), UpdatedAt: fromTimestamp(p.GetUpdatedAt()),
	}
}

// Role is what a token allows.
type Role string

// Roles a minted token may grant.
const (
	// RoleClient starts, queries and manages the tenant's instances.
	RoleClient Role = "client"
	// RoleWorker polls and completes the tenant's activity tasks.
	RoleWorker Role = "worker"
	// RoleTenantAdmin manages the tenant's definitions and retention
	// policy, and reads its limits and usage.
	RoleTenantAdmin Role = "tenant-admin"
)

var roleToProto = map[Role]orchardv1.Role{
	RoleClient:      orchardv1.Role_ROLE_CLIENT,
	RoleWorker:      orchardv1.Role_ROLE_WORKER,
	RoleTenantAdmin: orchardv1.Role_ROLE_TENANT_ADMIN,
}

// TenantOption configures CreateTenant.
type TenantOption func(*orchardv1.CreateTenantRequest)

// WithLimits gives the new tenant these limits instead of the platform's
// defaults.
func WithLimits(l Limits) TenantOption {
	return func(r *orchardv1.CreateTenantRequest) { r.Limits = l.toProto() }
}

// WithRetentionPolicy gives the new tenant this retention policy instead of
// keeping everything.
func WithRetentionPolicy(p RetentionPolicy) TenantOption {
	return func(r *orchardv1.CreateTenantRequest) { r.RetentionPolicy = p.toProto() }
}

// CreateTenant creates an active tenant. ErrAlreadyExists: the id is taken.
// It is retried only when the request surely did not reach the server.
func (a *AdminClient) CreateTenant(ctx context.Context, id string, opts ...TenantOption) (*Tenant, error) {
	req := &orchardv1.CreateTenantRequest{TenantId: id}
	for _, opt := range opts {
		opt(req)
	}
	resp, err := call(ctx, a.c, notIdempotent, a.admin.CreateTenant, req)
	if err != nil {
		return nil, err
	}
	return tenantFromProto(resp.GetTenant()), nil
}

// GetTenant reads a tenant.
func (a *AdminClient) GetTenant(ctx context.Context, id string) (*Tenant, error) {
	resp, err := call(ctx, a.c, idempotent, a.admin.GetTenant, &orchardv1.GetTenantRequest{TenantId: id})
	if err != nil {
		return nil, err
	}
	return tenantFromProto(resp.GetTenant()), nil
}

// ListTenants iterates over every tenant, by id, fetching pages as the loop
// needs them (WithPageSize sets their size; the order is fixed). A failure
// ends the iteration with its error as the last pair.
func (a *AdminClient) ListTenants(ctx context.Context, opts ...ListOption) iter.Seq2[*Tenant, error] {
	return func(yield func(*Tenant, error) bool) {
		l, err := listOpts(opts)
		if err != nil {
			yield(nil, err)
			return
		}
		req := &orchardv1.ListTenantsRequest{PageSize: int32(l.pageSize)}
		for {
			resp, err := call(ctx, a.c, idempotent, a.admin.ListTenants, req)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, t := range resp.GetTenants() {
				if !yield(tenantFromProto(t), nil) {
					return
				}
			}
			if resp.GetNextPageToken() == "" {
				return
			}
			req = &orchardv1.ListTenantsRequest{PageSize: int32(l.pageSize), PageToken: resp.GetNextPageToken()}
		}
	}
}

func (a *AdminClient) updateTenant(ctx context.Context, req *orchardv1.UpdateTenantRequest) (*Tenant, error) {
	resp, err := call(ctx, a.c, idempotent, a.admin.UpdateTenant, req)
	if err != nil {
		return nil, err
	}
	return tenantFromProto(resp.GetTenant()), nil
}

// SuspendTenant suspends a tenant: its calls are refused and its instances
// stop progressing until ResumeTenant; nothing is deleted. Suspending a
// suspended tenant does nothing.
func (a *AdminClient) SuspendTenant(ctx context.Context, id string) (*Tenant, error) {
	return a.updateTenant(ctx, &orchardv1.UpdateTenantRequest{TenantId: id, State: orchardv1.TenantState_TENANT_STATE_SUSPENDED})
}

// ResumeTenant makes a suspended tenant active again. Resuming an active
// tenant does nothing.
func (a *AdminClient) ResumeTenant(ctx context.Context, id string) (*Tenant, error) {
	return a.updateTenant(ctx, &orchardv1.UpdateTenantRequest{TenantId: id, State: orchardv1.TenantState_TENANT_STATE_ACTIVE})
}

// SetLimits replaces all of a tenant's limits (zero fields: the platform's
// defaults).
func (a *AdminClient) SetLimits(ctx context.Context, id string, limits Limits) (*Tenant, error) {
	return a.updateTenant(ctx, &orchardv1.UpdateTenantRequest{TenantId: id, Limits: limits.toProto()})
}

// Token is a minted token.
type Token struct {
	// Token is the signed JWT, to send as "Authorization: Bearer <token>"
	// (WithToken). It is a secret: never log it.
	Token string
	// ExpiresAt is when it stops being accepted.
	ExpiresAt time.Time
}

// MintOption configures MintToken.
type MintOption func(*orchardv1.MintTokenRequest)

// WithSubject names the token's holder in its subject claim and in the
// API's logs (default: the tenant id).
func WithSubject(subject string) MintOption {
	return func(r *orchardv1.MintTokenRequest) { r.Subject = subject }
}

// MintToken issues a token for a tenant that grants roles (at least one) for
// ttl (1 minute to 365 days). The API server must have a signing key;
// without one the call fails with code Unimplemented.
func (a *AdminClient) MintToken(ctx context.Context, tenantID string, roles []Role, ttl time.Duration, opts ...MintOption) (*Token, error) {
	req := &orchardv1.MintTokenRequest{TenantId: tenantID, Ttl: duration(ttl)}
	for i, r := range roles {
		p, ok := roleToProto[r]
		if !ok {
			return nil, invalidArgument(fmt.Sprintf("roles[%d]", i), "unknown role %q (client, worker or tenant-admin)", r)
		}
		req.Roles = append(req.Roles, p)
	}
	for _, opt := range opts {
		opt(req)
	}
	resp, err := call(ctx, a.c, idempotent, a.admin.MintToken, req)
	if err != nil {
		return nil, err
	}
	return &Token{Token: resp.GetToken(), ExpiresAt: fromTimestamp(resp.GetExpiresAt())}, nil
}

// TenantUsage is one tenant's usage.
type TenantUsage struct {
	TenantID string
	Usage    *Usage
}

// Usage iterates over the usage of the tenants named (every tenant when
// none is), by tenant id, fetching pages as the loop needs them.
func (a *AdminClient) Usage(ctx context.Context, tenantIDs []string, opts ...ListOption) iter.Seq2[*TenantUsage, error] {
	return func(yield func(*TenantUsage, error) bool) {
		l, err := listOpts(opts)
		if err != nil {
			yield(nil, err)
			return
		}
		req := &orchardv1.AdminServiceGetUsageRequest{TenantIds: tenantIDs, PageSize: int32(l.pageSize)}
		for {
			resp, err := call(ctx, a.c, idempotent, a.admin.GetUsage, req)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, u := range resp.GetTenants() {
				if !yield(&TenantUsage{TenantID: u.GetTenantId(), Usage: usageFromProto(u.GetUsage())}, nil) {
					return
				}
			}
			if resp.GetNextPageToken() == "" {
				return
			}
			req = &orchardv1.AdminServiceGetUsageRequest{TenantIds: tenantIDs, PageSize: int32(l.pageSize), PageToken: resp.GetNextPageToken()}
		}
	}
}
