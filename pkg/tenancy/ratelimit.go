package tenancy

import (
	"cmp"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimiter defaults.
const (
	DefaultIdleAfter  = 10 * time.Minute
	DefaultMaxTenants = 100_000
)

// RateLimiterConfig configures a RateLimiter.
type RateLimiterConfig struct {
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// IdleAfter is how long a tenant's limiter goes unused before it may be
	// dropped; zero means DefaultIdleAfter. A limiter is dropped only once
	// its bucket is full again, so dropping it loses nothing.
	IdleAfter time.Duration
	// MaxTenants bounds the limiters kept; zero means DefaultMaxTenants.
	// Past it the least recently used is dropped even if its bucket is not
	// full, which can only let that tenant burst again.
	MaxTenants int
}

// RateLimiter holds one token bucket per name its callers give (a tenant,
// or one of a tenant's budgets), created on the bucket's first request and
// updated when its rate changes. It is safe for concurrent use.
type RateLimiter struct {
	now        func() time.Time
	idleAfter  time.Duration
	maxTenants int

	mu        sync.Mutex
	tenants   map[string]*tenantBucket
	lastSweep time.Time
}

type tenantBucket struct {
	lim      *rate.Limiter
	lastUsed time.Time
	// promised is the latest time a refused request was told to come back.
	promised time.Time
}

// NewRateLimiter returns an empty RateLimiter.
func NewRateLimiter(cfg RateLimiterConfig) *RateLimiter {
	r := &RateLimiter{
		now:        cfg.Now,
		idleAfter:  cmpOr(cfg.IdleAfter, DefaultIdleAfter),
		maxTenants: cfg.MaxTenants,
		tenants:    make(map[string]*tenantBucket),
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.maxTenants <= 0 {
		r.maxTenants = DefaultMaxTenants
	}
	return r
}

// Rate is a bucket's rate: PerSecond sustained, Burst at once above it.
// Both must be positive; a tenant's effective limits give them. Resource
// names what the bucket bounds in its refusals (ResourceRequests when
// empty).
type Rate struct {
	PerSecond float64
	Burst     int
	Resource  string
}

// Allow takes one request from a bucket, sized by rate. The bucket is named
// by its caller: a tenant, or one of a tenant's budgets (the API keeps its
// workers' calls apart). When the bucket is empty it returns an
// *ExhaustedError for the rate's Resource whose RetryAfter is when the request
// may pass: the next token, or for requests refused while others wait to
// come back, the token after theirs (see retryAfterLocked).
func (r *RateLimiter) Allow(bucket string, rt Rate) error {
	perSecond := rate.Limit(rt.PerSecond)
	now := r.now()

	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(now)
	b, ok := r.tenants[bucket]
	if !ok {
		if len(r.tenants) >= r.maxTenants {
			r.evictOldestLocked()
		}
		b = &tenantBucket{lim: rate.NewLimiter(perSecond, rt.Burst)}
		r.tenants[bucket] = b
	} else {
		if b.lim.Limit() != perSecond {
			b.lim.SetLimitAt(now, perSecond)
		}
		if b.lim.Burst() != rt.Burst {
			b.lim.SetBurstAt(now, rt.Burst)
		}
	}
	b.lastUsed = now
	if b.lim.AllowN(now, 1) {
		return nil
	}
	return &ExhaustedError{Resource: cmp.Or(rt.Resource, ResourceRequests), Limit: int64(rt.Burst), RetryAfter: b.retryAfterLocked(now, rt)}
}

// retryAfterLocked is the retry hint of a request the bucket refused: the
// time of the next token, after those promised to the requests refused
// before it, one token each, up to the time the bucket takes to fill. The
// time of the next token alone, the same for all, would bring every caller
// refused meanwhile back at once, to take one token between them and be
// refused again, each refusal a call the server and the client pay for.
func (b *tenantBucket) retryAfterLocked(now time.Time, rt Rate) time.Duration {
	perToken := float64(time.Second) / rt.PerSecond
	next := now.Add(time.Duration(math.Ceil((1 - b.lim.TokensAt(now)) * perToken)))
	if after := b.promised.Add(time.Duration(math.Ceil(perToken))); after.After(next) {
		next = after
	}
	if limit := now.Add(time.Duration(math.Ceil(float64(rt.Burst) * perToken))); next.After(limit) {
		next = limit
	}
	b.promised = next
	// Whole milliseconds, rounded up: a finer hint means nothing to a
	// client, and refusals with the same hint have the same answer, which
	// the API renders once (rateGate).
	return max((next.Sub(now) + time.Millisecond - 1).Truncate(time.Millisecond), time.Millisecond)
}

// Len is the number of tenants with a limiter.
func (r *RateLimiter) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.tenants)
}

// sweepLocked drops idle tenants whose bucket is full, at most twice per
// IdleAfter so that Allow stays O(1) amortised.
func (r *RateLimiter) sweepLocked(now time.Time) {
	if now.Sub(r.lastSweep) < r.idleAfter/2 {
		return
	}
	r.lastSweep = now
	for tenant, b := range r.tenants {
		if now.Sub(b.lastUsed) >= r.idleAfter && b.lim.TokensAt(now) >= float64(b.lim.Burst()) {
			delete(r.tenants, tenant)
		}
	}
}

func (r *RateLimiter) evictOldestLocked() {
	var oldest string
	var at time.Time
	first := true
	for tenant, b := range r.tenants {
		if first || b.lastUsed.Before(at) {
			oldest, at, first = tenant, b.lastUsed, false
		}
	}
	delete(r.tenants, oldest)
}
