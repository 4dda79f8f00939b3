package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestNumberNamedArgs(t *testing.T) {
	for in, want := range map[string]string{
		"SELECT @a, @b, @a":                          "SELECT $1, $2, $1",
		"SELECT '@a', \"@b\", @c -- @d\n, @e":        "SELECT '@a', \"@b\", $1 -- @d\n, $2",
		"SELECT /* @x */ @tenant_id::TEXT, @a_1 + 1": "SELECT /* @x */ $1::TEXT, $2 + 1",
		"SELECT @1": "SELECT @1",
	} {
		if got := numberNamedArgs(in); got != want {
			t.Errorf("numberNamedArgs(%q) = %q, want %q", in, got, want)
		}
	}
}

// Captured statements are numbered too: pgx's tracers see the named form.
func TestCapturedNamedArgsNumbered(t *testing.T) {
	dir := t.TempDir()
	line := `{"sql":"SELECT @tenant_id, @now","isolation":"","caller":["github.com/orchardhq/orchard/pkg/store/crdb.(*Store).X"]}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "x.jsonl"), []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := loadCaptured("../..", dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].SQL != "SELECT $1, $2" {
		t.Fatalf("captured: %+v", got)
	}
}
