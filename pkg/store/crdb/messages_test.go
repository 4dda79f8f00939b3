package crdb

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Error messages name instances in one style, whatever their number.
func TestNamedInstances(t *testing.T) {
	t.Parallel()
	require.Equal(t, `instance "a"`, namedInstances([]string{"a"}))
	require.Equal(t, `instances "a", "b"`, namedInstances([]string{"a", "b"}))
	require.Equal(t, `instances "a", "b", "c", "d", "e" and 2 more`, namedInstances([]string{"a", "b", "c", "d", "e", "f", "g"}))
}
