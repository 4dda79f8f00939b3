package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Both profiles are written, gzipped protobufs as `go tool pprof` reads
// them; an empty path writes none.
func TestStartProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, allocs := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "allocs.pprof")
	stop, err := startProfiles(cpu, allocs)
	require.NoError(t, err)
	sink := make([][]byte, 0, 64)
	for range 64 {
		sink = append(sink, make([]byte, 1<<10))
	}
	require.Len(t, sink, 64)
	require.NoError(t, stop())
	for _, p := range []string{cpu, allocs} {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		require.True(t, bytes.HasPrefix(b, []byte{0x1f, 0x8b}), "%s is not a gzipped profile", p)
	}

	stop, err = startProfiles("", "")
	require.NoError(t, err)
	require.NoError(t, stop())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2)
}
