package tenancy

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Claim names Orchard adds to the registered ones (sub, iss, aud, exp, nbf,
// iat, jti). An external identity provider must emit these to call Orchard.
const (
	ClaimTenant = "tenant"
	ClaimRoles  = "roles"
)

// tokenClaims is the wire form of a token's payload.
type tokenClaims struct {
	Tenant string   `json:"tenant,omitempty"`
	Roles  []string `json:"roles"`
	jwt.RegisteredClaims
}

// MinterConfig configures a Minter.
type MinterConfig struct {
	// PrivateKey signs tokens (EdDSA). Required; see ParsePrivateKeyPEM.
	PrivateKey ed25519.PrivateKey
	// Issuer and Audience go into every token; both required and equal to
	// what the Verifier expects.
	Issuer   string
	Audience string
	// MaxTTL bounds the lifetime Mint accepts; zero means 90 days.
	MaxTTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// DefaultMaxTTL is the longest lifetime Mint grants unless configured.
const DefaultMaxTTL = 90 * 24 * time.Hour

// Minter signs tokens with an Ed25519 key, for `orchard dev`, `orchard token`
// and tests.
type Minter struct {
	key      ed25519.PrivateKey
	kid      string
	issuer   string
	audience string
	maxTTL   time.Duration
	now      func() time.Time
}

// NewMinter checks cfg and returns a Minter.
func NewMinter(cfg MinterConfig) (*Minter, error) {
	if len(cfg.PrivateKey) != ed25519.PrivateKeySize {
		return nil, errors.New("minter: PrivateKey must be an Ed25519 private key")
	}
	if cfg.Issuer == "" {
		return nil, errors.New("minter: Issuer required")
	}
	if cfg.Audience == "" {
		return nil, errors.New("minter: Audience required")
	}
	if cfg.MaxTTL < 0 {
		return nil, errors.New("minter: MaxTTL must not be negative")
	}
	if cfg.MaxTTL == 0 {
		cfg.MaxTTL = DefaultMaxTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pub, ok := cfg.PrivateKey.Public().(ed25519.PublicKey)
	if !ok {
		return nil, errors.New("minter: PrivateKey has no Ed25519 public key")
	}
	kid, err := KeyID(pub)
	if err != nil {
		return nil, fmt.Errorf("minter: %w", err)
	}
	return &Minter{key: cfg.PrivateKey, kid: kid, issuer: cfg.Issuer, audience: cfg.Audience, maxTTL: cfg.MaxTTL, now: cfg.Now}, nil
}

// PublicKey is the key that verifies this Minter's tokens.
func (m *Minter) PublicKey() ed25519.PublicKey {
	return m.key.Public().(ed25519.PublicKey)
}

// KeyID is the "kid" header of this Minter's tokens (see KeyID).
func (m *Minter) KeyID() string { return m.kid }

// Mint returns a signed token for c valid from now for ttl. The claims are
// checked as Verify checks them, so a minted token is never one Orchard would
// refuse for its claims.
func (m *Minter) Mint(c Claims, ttl time.Duration) (string, error) {
	if ttl <= 0 || ttl > m.maxTTL {
		return "", fmt.Errorf("mint: ttl must be in (0, %v]", m.maxTTL)
	}
	roles := make([]string, len(c.Roles))
	for i, r := range c.Roles {
		roles[i] = string(r)
	}
	if _, err := checkClaims(c.Tenant, c.Subject, roles); err != nil {
		return "", fmt.Errorf("mint: %w", err)
	}
	var jti [16]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", fmt.Errorf("mint: token id: %w", err)
	}
	now := m.now()
	claims := tokenClaims{
		Tenant: c.Tenant,
		Roles:  roles,
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    m.issuer,
			Subject:   c.Subject,
			Audience:  jwt.ClaimStrings{m.audience},
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			NotBefore: jwt.NewNumericDate(now),
			IssuedAt:  jwt.NewNumericDate(now),
			ID:        hex.EncodeToString(jti[:]),
		},
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	tok.Header["kid"] = m.kid
	s, err := tok.SignedString(m.key)
	if err != nil {
		return "", fmt.Errorf("mint: sign: %w", err)
	}
	return s, nil
}
