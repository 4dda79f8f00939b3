package tenancy

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
)

// Signing algorithms a Verifier can accept. EdDSA (Ed25519) is the default;
// the others only when configured.
const (
	AlgEdDSA = "EdDSA"
	AlgRS256 = "RS256"
	AlgES256 = "ES256"
)

// minRSABits is the smallest RSA modulus accepted.
const minRSABits = 2048

// GenerateKeyPairPEM makes a new Ed25519 key pair, the private key as a PKCS
// #8 "PRIVATE KEY" block and the public key as a PKIX "PUBLIC KEY" block.
func GenerateKeyPairPEM() (privatePEM, publicPEM []byte, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate Ed25519 key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal private key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), nil
}

// ParsePrivateKeyPEM reads an Ed25519 private key from a PKCS #8 "PRIVATE
// KEY" block, the only block the data may hold.
func ParsePrivateKeyPEM(data []byte) (ed25519.PrivateKey, error) {
	block, rest := pem.Decode(data)
	if block == nil {
		return nil, errors.New("private key: no PEM block")
	}
	if next, _ := pem.Decode(rest); next != nil {
		return nil, errors.New("private key: more than one PEM block")
	}
	if block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("private key: PEM block type %q, want \"PRIVATE KEY\" (PKCS #8)", block.Type)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	priv, ok := key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("private key: %T is not an Ed25519 key", key)
	}
	return priv, nil
}

// ReadPrivateKeyFile reads an Ed25519 private key from a PEM file.
func ReadPrivateKeyFile(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read private key: %w", err)
	}
	return ParsePrivateKeyPEM(data)
}

// ParsePublicKeysPEM reads one or more PKIX "PUBLIC KEY" blocks: Ed25519,
// RSA (at least 2048 bits) or ECDSA P-256 keys. Several keys let a verifier
// accept tokens signed by the old and the new key while keys rotate. Any
// other block (a private key, a certificate) is an error.
func ParsePublicKeysPEM(data []byte) ([]crypto.PublicKey, error) {
	var keys []crypto.PublicKey
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("public key %d: PEM block type %q, want \"PUBLIC KEY\" (PKIX)", len(keys)+1, block.Type)
		}
		key, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("public key %d: %w", len(keys)+1, err)
		}
		if _, err := algorithmFor(key); err != nil {
			return nil, fmt.Errorf("public key %d: %w", len(keys)+1, err)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, errors.New("public keys: no PEM block")
	}
	return keys, nil
}

// ReadPublicKeysFile reads public keys from a PEM file (see
// ParsePublicKeysPEM).
func ReadPublicKeysFile(path string) ([]crypto.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read public keys: %w", err)
	}
	return ParsePublicKeysPEM(data)
}

// algorithmFor names the one algorithm a public key verifies, and rejects
// keys this package does not accept.
func algorithmFor(key crypto.PublicKey) (string, error) {
	switch k := key.(type) {
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return "", errors.New("Ed25519 key of wrong size")
		}
		return AlgEdDSA, nil
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return "", fmt.Errorf("RSA key of %d bits, want at least %d", k.N.BitLen(), minRSABits)
		}
		return AlgRS256, nil
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return "", errors.New("ECDSA key not on P-256")
		}
		return AlgES256, nil
	default:
		return "", fmt.Errorf("unsupported key type %T", key)
	}
}

// jwkMembers returns the required JWK members of a public key (RFC 7517,
// RFC 8037), which are also the members its thumbprint hashes (RFC 7638).
func jwkMembers(key crypto.PublicKey) (map[string]string, error) {
	if _, err := algorithmFor(key); err != nil {
		return nil, err
	}
	b64 := base64.RawURLEncoding.EncodeToString
	switch k := key.(type) {
	case ed25519.PublicKey:
		return map[string]string{"kty": "OKP", "crv": "Ed25519", "x": b64(k)}, nil
	case *rsa.PublicKey:
		return map[string]string{"kty": "RSA", "n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}, nil
	case *ecdsa.PublicKey:
		pub, err := k.ECDH()
		if err != nil {
			return nil, err
		}
		raw := pub.Bytes() // 0x04 || X || Y, each 32 bytes on P-256
		return map[string]string{"kty": "EC", "crv": "P-256", "x": b64(raw[1:33]), "y": b64(raw[33:])}, nil
	}
	return nil, fmt.Errorf("unsupported key type %T", key)
}

// KeyID is the RFC 7638 thumbprint of a public key (SHA-256, base64url).
// Minter puts it in the "kid" header and JWKS publishes it, so a verifier
// finds the key that signed a token, and keys can rotate.
func KeyID(key crypto.PublicKey) (string, error) {
	m, err := jwkMembers(key)
	if err != nil {
		return "", err
	}
	// encoding/json writes map keys sorted and without whitespace: the
	// canonical form RFC 7638 hashes.
	canon, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// JWKS returns a JSON Web Key Set publishing the public keys, each with its
// KeyID, algorithm and "use": "sig", for a JWKS endpoint (orchard dev) or a
// test server.
func JWKS(keys ...crypto.PublicKey) ([]byte, error) {
	set := struct {
		Keys []map[string]string `json:"keys"`
	}{Keys: make([]map[string]string, 0, len(keys))}
	for i, key := range keys {
		m, err := jwkMembers(key)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i+1, err)
		}
		kid, err := KeyID(key)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i+1, err)
		}
		alg, _ := algorithmFor(key)
		m["kid"], m["alg"], m["use"] = kid, alg, "sig"
		set.Keys = append(set.Keys, m)
	}
	return json.Marshal(set)
}
