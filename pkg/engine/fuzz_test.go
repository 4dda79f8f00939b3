package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseDefinition feeds arbitrary documents to the parser and validator. Whatever
// the input, parsing returns a definition or a *ValidationError with at least one
// problem, and a definition that parses can run a first turn without the engine
// panicking.
func FuzzParseDefinition(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("examples", "*.yaml"))
	require.NoError(f, err)
	for _, file := range files {
		doc, err := os.ReadFile(file)
		require.NoError(f, err)
		f.Add(doc)
	}
	f.Add([]byte(raceDoc))
	f.Add([]byte(`{"name":"j","version":"1","steps":[{"return":"${ input }"}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		def, err := ParseDefinition(doc)
		if err != nil {
			var ve *ValidationError
			require.True(t, errors.As(err, &ve), "error %v is not a *ValidationError", err)
			require.NotEmpty(t, ve.Errors)
			return
		}
		again, err := ParseDefinition(def.Document())
		require.NoError(t, err, "the JSON document of a valid definition parses")
		require.Equal(t, string(def.Document()), string(again.Document()))
		d, err := Turn(def, TurnInput{
			InstanceID: "fuzz", ExecutionID: 1, Now: epoch,
			Messages: []Message{StartMessage{Input: json.RawMessage(`{"items":[1,2],"n":1}`)}},
		})
		require.NoError(t, err)
		if d.Outcome.Failure != nil {
			require.NotEqual(t, "internal", d.Outcome.Failure.Kind, d.Outcome.Failure.Message)
		}
	})
}

// FuzzDecodeJSON checks the replay's own JSON parser against encoding/json: it accepts
// exactly the valid documents (apart from numbers beyond float64 and nesting beyond its
// limit, which it refuses) and decodes them to the same values.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{``, `null`, ` {"a":[1,-2.5e3,"x\u00e9\n",true,false,null]} `, `9223372036854775808`, `1e999`, `"\xff"`, `{"a":1,"a":2}`, `[1,]`, `-`, `01`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeJSON(data)
		valid := len(data) == 0 || json.Valid(data)
		if err != nil {
			if valid {
				require.Regexp(t, `out of range|nested more than`, err.Error())
			}
			return
		}
		require.True(t, valid, "accepted invalid JSON %q", data)
		var want any
		if len(data) > 0 {
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.UseNumber()
			require.NoError(t, dec.Decode(&want))
			want = normalizeNumbers(want)
		}
		require.Equal(t, want, got)
	})
}
