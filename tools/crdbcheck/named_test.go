package main

import "testing"

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
