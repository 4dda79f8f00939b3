package engine

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func nested(levels int) string {
	return strings.Repeat("[", levels) + strings.Repeat("]", levels)
}

// TestCheckPayload: what the API takes from outside, by the engine's own rules; and
// whatever it takes, a turn can start from (wrapped in a start message and decoded).
func TestCheckPayload(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		raw  string
		want string // the error; empty: accepted
	}{
		"empty is null":           {raw: ``},
		"an object":               {raw: `{"a":[1,2.5,"x",null,true]}`},
		"non-ASCII text":          {raw: `"héllo ✓ 😀"`},
		"an escaped pair":         {raw: `"\ud83d\ude00"`},
		"other escapes":           {raw: `"\n\"\\\u00e9"`},
		"as deep as allowed":      {raw: nested(MaxPayloadDepth)},
		"too deep":                {raw: nested(MaxPayloadDepth + 1), want: "nested more than 128 levels"},
		"ten thousand deep":       {raw: nested(10_000), want: "nested more than 128 levels"},
		"invalid UTF-8":           {raw: "\"ab\xffcd\"", want: "invalid UTF-8 at offset 3"},
		"truncated UTF-8":         {raw: "\"\xe2\x9c\"", want: "invalid UTF-8 at offset 1"},
		"a lone high surrogate":   {raw: `"a\ud83dz"`, want: `\ud83d is half of a surrogate pair`},
		"a lone low surrogate":    {raw: `"\ude00"`, want: `\ude00 is half of a surrogate pair`},
		"a high then not low":     {raw: `"\ud83d\u0041"`, want: `\ud83d is half of a surrogate pair`},
		"not JSON":                {raw: `{a:1}`, want: "expected an object key"},
		"two documents":           {raw: `1 2`, want: "trailing data"},
		"an escaped backslash-u":  {raw: `"\\ud800"`},
		"a number out of float64": {raw: `1e999`, want: "out of range"},
	}
	def, err := ParseDefinition([]byte("name: echo\nversion: 1\nsteps:\n  - return: \"${ input }\"\n"))
	require.NoError(t, err)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := CheckPayload([]byte(tc.raw))
			if tc.want != "" {
				require.ErrorContains(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			kind, payload, err := EncodeMessage(StartMessage{Input: raw(tc.raw)})
			require.NoError(t, err)
			msg, err := DecodeMessage(kind, payload)
			require.NoError(t, err)
			d, err := Turn(def, TurnInput{InstanceID: "i", ExecutionID: 1, Now: epoch, Messages: []Message{msg}})
			require.NoError(t, err)
			require.Equal(t, StatusCompleted, d.Outcome.Status, "%+v", d.Outcome.Failure)
			if tc.raw != "" {
				require.JSONEq(t, tc.raw, string(d.Outcome.Output), "the payload comes back as it went in")
			}
		})
	}
}

// TestEncodedValuesDecode: the engine refuses to write a value nested deeper than it
// reads (a continue-as-new chain that wraps its input once per generation, say).
func TestEncodedValuesDecode(t *testing.T) {
	t.Parallel()
	var v any = []any{}
	for range maxJSONDepth {
		v = []any{v}
	}
	// v holds 1001 arrays, one more than the decoder takes.
	_, err := encodeJSON(v)
	require.ErrorContains(t, err, "nested more than 1000 levels")
	raw, err := encodeJSON(v.([]any)[0])
	require.NoError(t, err)
	_, err = decodeJSON(raw)
	require.NoError(t, err)
}
