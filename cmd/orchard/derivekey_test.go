package main

import (
	"bytes"
	"testing"
)

// Each purpose gets its own key from one secret, the same every time, and
// another secret gives other keys.
func TestDeriveKey(t *testing.T) {
	a, b := deriveKey("s3cret", "api-tokens"), deriveKey("s3cret", "other-purpose")
	if len(a) != 32 || len(b) != 32 {
		t.Fatalf("key lengths %d, %d", len(a), len(b))
	}
	if bytes.Equal(a, b) {
		t.Fatal("two purposes share a key")
	}
	if !bytes.Equal(a, deriveKey("s3cret", "api-tokens")) {
		t.Fatal("a key changed between calls")
	}
	if bytes.Equal(a, deriveKey("other", "api-tokens")) {
		t.Fatal("two secrets share a key")
	}
}
