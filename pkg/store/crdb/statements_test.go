package crdb

import (
	"maps"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/internal/testdb"
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

// namedArgs binds by name as pgx.StrictNamedArgs does, on the call that
// rewrites a statement and on the calls that reuse its rewrite: a name
// used twice is one parameter, and a name missing from either side fails.
func TestNamedArgs(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, 2)
	ctx := t.Context()
	const sql = `-- @a and @b in a comment are not parameters
SELECT @a::INT8 + @b::INT8, @a::INT8, '@c'`
	for range 2 {
		var sum, a int64
		var text string
		require.NoError(t, pool.QueryRow(ctx, sql, namedArgs{"a": 2, "b": 3}).Scan(&sum, &a, &text))
		require.Equal(t, []any{int64(5), int64(2), "@c"}, []any{sum, a, text})
	}
	_, err := pool.Exec(ctx, sql, namedArgs{"a": 2})
	require.ErrorContains(t, err, "b")
	_, err = pool.Exec(ctx, sql, namedArgs{"a": 2, "b": 3, "c": 4})
	require.ErrorContains(t, err, "binds 3 names")
	// The first call of a statement is judged as strictly.
	_, err = pool.Exec(ctx, `SELECT @x::INT8`, namedArgs{"x": 1, "y": 2})
	require.ErrorContains(t, err, "y")
	_, err = pool.Exec(ctx, `SELECT @x::INT8, @z::INT8`, namedArgs{"x": 1})
	require.ErrorContains(t, err, "z")
	// A UUID[] is bound with uuidArray, never as strings (see uuidArray).
	const uuids = `SELECT cardinality(@ids::UUID[])`
	id := "0b3a1c2e-8f4d-4c1a-9b7e-2d5f6a7b8c9d"
	_, err = pool.Exec(ctx, uuids, namedArgs{"ids": []string{id}})
	require.ErrorContains(t, err, "uuidArray")
	var n int
	require.NoError(t, pool.QueryRow(ctx, uuids, namedArgs{"ids": uuidArray([]string{id})}).Scan(&n))
	require.Equal(t, 1, n)
}

// UUID arrays go to pgx as UUIDs, which it encodes in binary at once; a
// string that is no UUID is NULL.
func TestUUIDArray(t *testing.T) {
	t.Parallel()
	got := uuidArray([]string{"0b3a1c2e-8f4d-4c1a-9b7e-2d5f6a7b8c9d", "not a uuid", ""})
	require.Len(t, got, 3)
	require.True(t, got[0].Valid)
	require.Equal(t, "0b3a1c2e-8f4d-4c1a-9b7e-2d5f6a7b8c9d", uuid.UUID(got[0].Bytes).String())
	require.False(t, got[1].Valid)
	require.False(t, got[2].Valid)
	_, err := pgtype.NewMap().Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, got, nil)
	require.NoError(t, err)
}
