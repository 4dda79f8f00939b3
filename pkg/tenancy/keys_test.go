package tenancy_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/tenancy"
)

func pemBlock(t *testing.T, typ string, key any) []byte {
	t.Helper()
	var der []byte
	var err error
	switch typ {
	case "PUBLIC KEY":
		der, err = x509.MarshalPKIXPublicKey(key)
	case "PRIVATE KEY":
		der, err = x509.MarshalPKCS8PrivateKey(key)
	}
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func TestKeyFilesMintAndVerify(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	dir := t.TempDir()

	// Two generated key pairs, as `orchard dev` would write them; the public
	// key file holds both, as during a rotation.
	oldPriv, oldPub, err := tenancy.GenerateKeyPairPEM()
	require.NoError(t, err)
	newPriv, newPub, err := tenancy.GenerateKeyPairPEM()
	require.NoError(t, err)
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o600))
		return p
	}
	oldPrivFile := write("old.key", oldPriv)
	newPrivFile := write("new.key", newPriv)
	pubFile := write("keys.pub", append(append([]byte{}, oldPub...), newPub...))

	keys, err := tenancy.ReadPublicKeysFile(pubFile)
	require.NoError(t, err)
	require.Len(t, keys, 2)

	v, err := tenancy.NewVerifier(t.Context(), tenancy.VerifierConfig{
		Issuer: testIssuer, Audience: testAudience, PublicKeyFile: pubFile, Now: clock.Now,
	})
	require.NoError(t, err)
	for _, f := range []string{oldPrivFile, newPrivFile} {
		priv, err := tenancy.ReadPrivateKeyFile(f)
		require.NoError(t, err)
		tok, err := newMinter(t, priv, clock.Now).Mint(tenancy.Claims{Tenant: "acme", Subject: "cli", Roles: []tenancy.Role{tenancy.RoleTenantAdmin}}, time.Hour)
		require.NoError(t, err)
		id, err := v.Verify(t.Context(), tok)
		require.NoError(t, err)
		require.True(t, id.Has(tenancy.RoleTenantAdmin))
	}

	// A third key, not in the file, is refused.
	_, strayPriv := newEd25519(t)
	tok, err := newMinter(t, strayPriv, clock.Now).Mint(tenancy.Claims{Tenant: "acme", Subject: "cli", Roles: []tenancy.Role{tenancy.RoleClient}}, time.Hour)
	require.NoError(t, err)
	_, err = v.Verify(t.Context(), tok)
	require.ErrorIs(t, err, tenancy.ErrTokenSignature)
}

func TestParsePublicKeysPEM(t *testing.T) {
	t.Parallel()
	edPub, edPriv := newEd25519(t)
	rsaSmall, err := rsa.GenerateKey(rand.Reader, 1024)
	require.NoError(t, err)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ec384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	require.NoError(t, err)

	tests := []struct {
		name    string
		data    []byte
		want    int
		wantErr bool
	}{
		{name: "Ed25519", data: pemBlock(t, "PUBLIC KEY", edPub), want: 1},
		{name: "RSA 2048", data: pemBlock(t, "PUBLIC KEY", &rsaKey.PublicKey), want: 1},
		{name: "P-256", data: pemBlock(t, "PUBLIC KEY", &ecKey.PublicKey), want: 1},
		{name: "three keys", data: append(append(pemBlock(t, "PUBLIC KEY", edPub), pemBlock(t, "PUBLIC KEY", &rsaKey.PublicKey)...), pemBlock(t, "PUBLIC KEY", &ecKey.PublicKey)...), want: 3},
		{name: "empty", data: nil, wantErr: true},
		{name: "not PEM", data: []byte("hello"), wantErr: true},
		{name: "private key", data: pemBlock(t, "PRIVATE KEY", edPriv), wantErr: true},
		{name: "RSA 1024", data: pemBlock(t, "PUBLIC KEY", &rsaSmall.PublicKey), wantErr: true},
		{name: "P-384", data: pemBlock(t, "PUBLIC KEY", &ec384.PublicKey), wantErr: true},
		{name: "corrupt DER", data: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1, 2, 3}}), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			keys, err := tenancy.ParsePublicKeysPEM(tt.data)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Len(t, keys, tt.want)
		})
	}
}

func TestParsePrivateKeyPEM(t *testing.T) {
	t.Parallel()
	privPEM, pubPEM, err := tenancy.GenerateKeyPairPEM()
	require.NoError(t, err)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)

	priv, err := tenancy.ParsePrivateKeyPEM(privPEM)
	require.NoError(t, err)
	pubs, err := tenancy.ParsePublicKeysPEM(pubPEM)
	require.NoError(t, err)
	require.Equal(t, priv.Public(), pubs[0], "the pair's halves match")

	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"public key", pubPEM},
		{"RSA private key", pemBlock(t, "PRIVATE KEY", rsaKey)},
		{"two blocks", append(append([]byte{}, privPEM...), privPEM...)},
		{"corrupt", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tenancy.ParsePrivateKeyPEM(tt.data)
			require.Error(t, err)
		})
	}
	_, err = tenancy.ReadPrivateKeyFile(filepath.Join(t.TempDir(), "missing.key"))
	require.Error(t, err)
}

// TestKeyIDThumbprint checks KeyID against RFC 8037 appendix A.3.
func TestKeyIDThumbprint(t *testing.T) {
	t.Parallel()
	seed := []byte{
		0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60, 0xba, 0x84, 0x4a, 0xf4, 0x92, 0xec, 0x2c, 0xc4,
		0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32, 0x69, 0x19, 0x70, 0x3b, 0xac, 0x03, 0x1c, 0xae, 0x7f, 0x60,
	}
	pub := ed25519.NewKeyFromSeed(seed).Public()
	kid, err := tenancy.KeyID(pub)
	require.NoError(t, err)
	require.Equal(t, "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k", kid)

	_, err = tenancy.KeyID("not a key")
	require.Error(t, err)
}

func TestMinterRejects(t *testing.T) {
	t.Parallel()
	_, priv := newEd25519(t)
	m := newMinter(t, priv, newFakeClock().Now)
	tests := []struct {
		name   string
		claims tenancy.Claims
		ttl    time.Duration
	}{
		{"zero ttl", tenancy.Claims{Tenant: "a", Subject: "s", Roles: []tenancy.Role{tenancy.RoleClient}}, 0},
		{"ttl beyond max", tenancy.Claims{Tenant: "a", Subject: "s", Roles: []tenancy.Role{tenancy.RoleClient}}, tenancy.DefaultMaxTTL + time.Second},
		{"no roles", tenancy.Claims{Tenant: "a", Subject: "s"}, time.Hour},
		{"unknown role", tenancy.Claims{Tenant: "a", Subject: "s", Roles: []tenancy.Role{"root"}}, time.Hour},
		{"no tenant", tenancy.Claims{Subject: "s", Roles: []tenancy.Role{tenancy.RoleWorker}}, time.Hour},
		{"no subject", tenancy.Claims{Tenant: "a", Roles: []tenancy.Role{tenancy.RoleWorker}}, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := m.Mint(tt.claims, tt.ttl)
			require.Error(t, err)
		})
	}

	for name, cfg := range map[string]tenancy.MinterConfig{
		"no key":      {Issuer: testIssuer, Audience: testAudience},
		"no issuer":   {PrivateKey: priv, Audience: testAudience},
		"no audience": {PrivateKey: priv, Issuer: testIssuer},
	} {
		_, err := tenancy.NewMinter(cfg)
		require.Error(t, err, name)
	}
}
