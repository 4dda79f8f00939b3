package crdb

import (
	"maps"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

// Every statement of sql/*.sql is named by the code: a statement no code
// sends would escape no check, but would mislead its reader.
func TestStatementsAllUsed(t *testing.T) {
	var unused []string
	for _, name := range slices.Sorted(maps.Keys(statements)) {
		if !used[name] {
			unused = append(unused, name)
		}
	}
	require.Empty(t, unused, "statements in sql/*.sql that no code names")
}

func TestParseStatements(t *testing.T) {
	got, err := parseStatements(fstest.MapFS{"sql/a.sql": {Data: []byte(`-- About the file.

-- name: One
-- Why it is so.
SELECT 1;

-- name: Two
SELECT @a
FROM t
`)}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"One": "-- Why it is so.\nSELECT 1", "Two": "SELECT @a\nFROM t"}, got)

	_, err = parseStatements(fstest.MapFS{"sql/a.sql": {Data: []byte("-- name: One\nSELECT 1;\n")},
		"sql/b.sql": {Data: []byte("-- name: One\nSELECT 2;\n")}})
	require.ErrorContains(t, err, "defined twice")
	_, err = parseStatements(fstest.MapFS{"sql/a.sql": {Data: []byte("-- name: Empty\n-- nothing\n")}})
	require.Error(t, err)
}
