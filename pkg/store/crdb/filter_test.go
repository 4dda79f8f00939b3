package crdb

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestPrefixEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prefix, end string
		ok          bool
	}{
		{"ab", "ac", true},
		{"3a", "3b", true},
		{"orders.", "orders/", true},
		{"a\u00ff", "a\u0100", true},
		{"a\ud7ff", "a\ue000", true}, // past the surrogates
		{"a" + string(utf8.MaxRune), "b", true},
		{string(utf8.MaxRune), "", false},
		{"", "", false},
	} {
		end, ok := prefixEnd(tc.prefix)
		require.Equal(t, tc.ok, ok, "%q", tc.prefix)
		require.Equal(t, tc.end, end, "%q", tc.prefix)
		if !ok {
			continue
		}
		// Every string with the prefix sorts below the end, byte by byte.
		for _, suffix := range []string{"", "\x00", "z", "\u00ff", string(utf8.MaxRune) + "zz"} {
			s := tc.prefix + suffix
			require.Less(t, strings.Compare(s, end), 0, "%q < %q", s, end)
		}
	}
}
