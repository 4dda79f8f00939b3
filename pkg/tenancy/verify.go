package tenancy

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// Verifier defaults.
const (
	DefaultLeeway               = 30 * time.Second
	MaxLeeway                   = 5 * time.Minute
	DefaultJWKSRefreshInterval  = time.Hour
	DefaultJWKSUnknownKIDPeriod = time.Minute
	DefaultJWKSHTTPTimeout      = 10 * time.Second
	// MaxTokenBytes bounds the tokens Verify parses.
	MaxTokenBytes = 8 << 10
)

// VerifierConfig configures a Verifier. Exactly one key source is set:
// PublicKeys, PublicKeyFile or JWKSURL.
type VerifierConfig struct {
	// Issuer and Audience the tokens must name. Required.
	Issuer   string
	Audience string
	// Algorithms accepted, among AlgEdDSA, AlgRS256 and AlgES256. Empty
	// means EdDSA only. "none" and HMAC algorithms can never be accepted.
	Algorithms []string
	// Leeway tolerated on exp, nbf and iat for clock skew. Zero means
	// DefaultLeeway; at most MaxLeeway.
	Leeway time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	// PublicKeys verify tokens directly (see ParsePublicKeysPEM).
	PublicKeys []crypto.PublicKey
	// PublicKeyFile is a PEM file of public keys, read once by NewVerifier.
	PublicKeyFile string
	// JWKSURL is a JSON Web Key Set endpoint. It must be https, except on a
	// loopback host. Keys are fetched at start (a failure is logged, not
	// fatal), every JWKSRefreshInterval, and when a token names a key id
	// not yet known, at most once per JWKSUnknownKIDPeriod: this is how a
	// new signing key is picked up without a restart.
	JWKSURL string
	// HTTPClient fetches the JWKS; nil means http.DefaultClient.
	HTTPClient *http.Client
	// JWKSRefreshInterval; zero means DefaultJWKSRefreshInterval.
	JWKSRefreshInterval time.Duration
	// JWKSUnknownKIDPeriod; zero means DefaultJWKSUnknownKIDPeriod.
	JWKSUnknownKIDPeriod time.Duration
	// JWKSHTTPTimeout bounds one fetch, and how long a Verify call can wait
	// for a refresh; zero means DefaultJWKSHTTPTimeout.
	JWKSHTTPTimeout time.Duration
	// Logger receives JWKS fetch failures; nil means slog.Default().
	Logger *slog.Logger
}

// Verifier checks tokens and turns them into identities. It is safe for
// concurrent use.
type Verifier struct {
	parser   *jwt.Parser
	algs     []string
	now      func() time.Time
	verified verifiedCache // with static keys only
	// Exactly one of these is set.
	static *staticKeys
	jwks   keyfunc.Keyfunc
}

// staticKeys are keys given directly or read from a PEM file.
type staticKeys struct {
	byKID map[string]crypto.PublicKey
	all   jwt.VerificationKeySet
}

// NewVerifier checks cfg and returns a Verifier. With a JWKSURL, ctx bounds
// the background refresh: cancel it when the Verifier is no longer used.
func NewVerifier(ctx context.Context, cfg VerifierConfig) (*Verifier, error) {
	if cfg.Issuer == "" {
		return nil, errors.New("verifier: Issuer required")
	}
	if cfg.Audience == "" {
		return nil, errors.New("verifier: Audience required")
	}
	algs := cfg.Algorithms
	if len(algs) == 0 {
		algs = []string{AlgEdDSA}
	}
	for _, a := range algs {
		switch a {
		case AlgEdDSA, AlgRS256, AlgES256:
		default:
			return nil, fmt.Errorf("verifier: algorithm %q not supported (want %s, %s or %s)", a, AlgEdDSA, AlgRS256, AlgES256)
		}
	}
	switch {
	case cfg.Leeway < 0 || cfg.Leeway > MaxLeeway:
		return nil, fmt.Errorf("verifier: Leeway must be in [0, %v]", MaxLeeway)
	case cfg.Leeway == 0:
		cfg.Leeway = DefaultLeeway
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	sources := 0
	for _, set := range []bool{len(cfg.PublicKeys) > 0, cfg.PublicKeyFile != "", cfg.JWKSURL != ""} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return nil, errors.New("verifier: set exactly one of PublicKeys, PublicKeyFile and JWKSURL")
	}

	v := &Verifier{
		algs: slices.Clone(algs),
		now:  cfg.Now,
		parser: jwt.NewParser(
			jwt.WithIssuer(cfg.Issuer),
			jwt.WithAudience(cfg.Audience),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithLeeway(cfg.Leeway),
			jwt.WithTimeFunc(cfg.Now),
		),
	}
	keys := cfg.PublicKeys
	if cfg.PublicKeyFile != "" {
		var err error
		if keys, err = ReadPublicKeysFile(cfg.PublicKeyFile); err != nil {
			return nil, fmt.Errorf("verifier: %w", err)
		}
	}
	if len(keys) > 0 {
		s, err := newStaticKeys(keys, algs)
		if err != nil {
			return nil, fmt.Errorf("verifier: %w", err)
		}
		v.static = s
		v.verified = newVerifiedCache()
		return v, nil
	}
	kf, err := newJWKS(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("verifier: %w", err)
	}
	v.jwks = kf
	return v, nil
}

func newStaticKeys(keys []crypto.PublicKey, algs []string) (*staticKeys, error) {
	s := &staticKeys{byKID: make(map[string]crypto.PublicKey, len(keys))}
	for i, key := range keys {
		alg, err := algorithmFor(key)
		if err != nil {
			return nil, fmt.Errorf("public key %d: %w", i+1, err)
		}
		if !slices.Contains(algs, alg) {
			return nil, fmt.Errorf("public key %d is for %s, which Algorithms does not allow", i+1, alg)
		}
		kid, err := KeyID(key)
		if err != nil {
			return nil, fmt.Errorf("public key %d: %w", i+1, err)
		}
		s.byKID[kid] = key
		s.all.Keys = append(s.all.Keys, key)
	}
	return s, nil
}

func newJWKS(ctx context.Context, cfg VerifierConfig) (keyfunc.Keyfunc, error) {
	u, err := url.Parse(cfg.JWKSURL)
	if err != nil {
		return nil, fmt.Errorf("JWKSURL: %w", err)
	}
	if u.Scheme != "https" && (u.Scheme != "http" || !loopbackHost(u.Hostname())) {
		return nil, errors.New("JWKSURL must be https (http only on a loopback host)")
	}
	refresh := cmpOr(cfg.JWKSRefreshInterval, DefaultJWKSRefreshInterval)
	unknownKID := cmpOr(cfg.JWKSUnknownKIDPeriod, DefaultJWKSUnknownKIDPeriod)
	timeout := cmpOr(cfg.JWKSHTTPTimeout, DefaultJWKSHTTPTimeout)
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKSURL}, keyfunc.Override{
		Client:      cfg.HTTPClient,
		HTTPTimeout: timeout,
		// Also bounds how long Verify waits for an unknown-kid refresh:
		// when the limiter has no token within it, Verify fails at once
		// instead of queueing, so forged key ids cannot pile up requests.
		RateLimitWaitMax:  timeout,
		RefreshInterval:   refresh,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(unknownKID), 1),
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(ctx context.Context, err error) {
				logger.WarnContext(ctx, "tenancy: JWKS refresh failed", slog.String("url", u), slog.Any("error", err))
			}
		},
	})
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Verify checks a token (without any "Bearer " prefix) and returns the
// identity it proves. Every error matches ErrUnauthenticated and one ErrToken*
// reason; none contains the token. ctx bounds a JWKS refresh.
func (v *Verifier) Verify(ctx context.Context, token string) (*Identity, error) {
	if token == "" {
		return nil, unauthenticated(ErrTokenMissing, "")
	}
	if len(token) > MaxTokenBytes {
		return nil, unauthenticated(ErrTokenMalformed, fmt.Sprintf("longer than %d bytes", MaxTokenBytes))
	}
	// Verified tokens are remembered only with fixed keys: a key withdrawn
	// from a JWKS must stop working at the next refresh.
	now, remember := v.now(), v.static != nil
	if remember {
		if id, ok := v.verified.get(token, now); ok {
			return id, nil
		}
	}
	var claims tokenClaims
	if _, err := v.parser.ParseWithClaims(token, &claims, v.keyfunc(ctx)); err != nil {
		return nil, classify(err)
	}
	roles, err := checkClaims(claims.Tenant, claims.Subject, claims.Roles)
	if err != nil {
		return nil, unauthenticated(ErrTokenClaims, err.Error())
	}
	id := &Identity{Tenant: claims.Tenant, Subject: claims.Subject, Roles: roles, TokenID: claims.ID}
	if claims.ExpiresAt != nil { // always, as WithExpirationRequired
		id.ExpiresAt = claims.ExpiresAt.Time
	}
	if remember {
		v.verified.put(token, id, now)
	}
	return id, nil
}

// keyfunc refuses algorithms not configured, then finds the key: by kid when
// the token names one, else every key. The algorithm check here, not the
// parser's WithValidMethods, is what rejects "none" and the rest, so that
// the error can say so (ErrTokenAlgorithm).
func (v *Verifier) keyfunc(ctx context.Context) jwt.Keyfunc {
	return func(t *jwt.Token) (any, error) {
		alg := t.Method.Alg()
		if !slices.Contains(v.algs, alg) {
			return nil, errAlgorithm
		}
		if v.static != nil {
			if kid, ok := t.Header["kid"].(string); ok {
				if key, ok := v.static.byKID[kid]; ok {
					return key, nil
				}
			}
			// A token from another minter may carry its own key ids: try
			// every key. The signature check still decides.
			return v.static.all, nil
		}
		key, err := v.jwks.KeyfuncCtx(ctx)(t)
		if err != nil {
			return nil, errors.Join(errNoKey, err)
		}
		return key, nil
	}
}

// Internal markers classify finds in the parser's wrapped errors.
var (
	errAlgorithm = errors.New("algorithm not allowed")
	errNoKey     = errors.New("no key")
)

// classify maps the parser's error to a reason. Only fixed texts are used:
// library messages can quote header values (a kid), which are token content.
func classify(err error) error {
	switch {
	case errors.Is(err, errAlgorithm):
		return unauthenticated(ErrTokenAlgorithm, "")
	case errors.Is(err, errNoKey):
		return unauthenticated(ErrTokenKey, "")
	case errors.Is(err, jwt.ErrTokenMalformed):
		return unauthenticated(ErrTokenMalformed, "")
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		// The parser knows no such algorithm, or none was named.
		return unauthenticated(ErrTokenAlgorithm, "")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return unauthenticated(ErrTokenSignature, "")
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return unauthenticated(ErrTokenIssuer, "")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return unauthenticated(ErrTokenAudience, "")
	case errors.Is(err, jwt.ErrTokenExpired):
		return unauthenticated(ErrTokenExpired, "")
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return unauthenticated(ErrTokenNotYetValid, "")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return unauthenticated(ErrTokenClaims, "missing exp, iss or aud")
	case errors.Is(err, jwt.ErrInvalidType):
		return unauthenticated(ErrTokenClaims, "registered claim of wrong type")
	default:
		return unauthenticated(ErrTokenClaims, "")
	}
}
