package dbserver

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The helper process of TestServerGoneAfterCrash: it starts a throwaway
// server, prints where it lives, and dies without cleaning up.
func TestHelperCrashWithServer(t *testing.T) {
	if os.Getenv("ORCHARD_TESTDB_CRASH_HELPER") != "1" {
		return // only meaningful as the child of TestServerGoneAfterCrash
	}
	srv, err := StartPostgres(context.Background(), PostgresOptions{})
	require.NoError(t, err)
	os.Stdout.WriteString("URL " + srv.URL + "\n")
	panic("crash with the server running")
}

func TestServerGoneAfterCrash(t *testing.T) {
	t.Parallel()
	if _, err := postgresBinDir(); err != nil {
		t.Fatalf("this test needs PostgreSQL's binaries: %v", err)
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperCrashWithServer$", "-test.v")
	cmd.Env = append(os.Environ(), "ORCHARD_TESTDB_CRASH_HELPER=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the helper should have crashed:\n%s", out)
	require.Contains(t, string(out), "crash with the server running")

	var dsn string
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "URL "); ok {
			dsn = rest
		}
	}
	require.NotEmpty(t, dsn, "helper output:\n%s", out)

	// The supervisor notices the closed pipe and stops the server: poll until
	// connections are refused.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		conn, err := pgx.Connect(ctx, dsn)
		cancel()
		if err != nil {
			break
		}
		conn.Close(t.Context())
		require.True(t, time.Now().Before(deadline), "server still accepts connections after its owner crashed")
		waitABit(t)
	}
	// And no postgres process for that port is left.
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	port := u.Port()
	for {
		ps, _ := exec.Command("pgrep", "-f", "port="+port+" ").Output()
		if len(strings.TrimSpace(string(ps))) == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "postgres processes left: %s", ps)
		waitABit(t)
	}
}

func TestStopRemovesServerAndFiles(t *testing.T) {
	t.Parallel()
	srv, err := StartPostgres(t.Context(), PostgresOptions{})
	require.NoError(t, err)
	conn, err := pgx.Connect(t.Context(), srv.URL)
	require.NoError(t, err)
	var dir string
	require.NoError(t, conn.QueryRow(t.Context(), "SHOW data_directory").Scan(&dir))
	if !strings.Contains(os.Getenv("ORCHARD_TESTDB_SETTINGS"), "shared_buffers") {
		var buffers, want int64
		require.NoError(t, conn.QueryRow(t.Context(), "SELECT pg_size_bytes(current_setting('shared_buffers')), pg_size_bytes($1)",
			sharedBuffers(memTotal())).Scan(&buffers, &want))
		require.Equal(t, want, buffers, "the server's buffer cache is sized from this machine's memory")
	}
	if !strings.Contains(os.Getenv("ORCHARD_TESTDB_SETTINGS"), "autovacuum_naptime") {
		var naptime string
		require.NoError(t, conn.QueryRow(t.Context(), "SHOW autovacuum_naptime").Scan(&naptime))
		require.Equal(t, autovacuumNaptime, naptime)
	}
	conn.Close(t.Context())
	require.DirExists(t, dir)

	require.NoError(t, srv.Stop())
	require.NoDirExists(t, dir)
	_, err = pgx.Connect(t.Context(), srv.URL)
	require.Error(t, err)
}

func TestPostgresKeepsItsPortAcrossRestarts(t *testing.T) {
	t.Parallel()
	// Not t.TempDir: when the tests run as root the server runs as another
	// account, which must be able to traverse the path.
	dir, err := os.MkdirTemp("", "orchard-pg-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	first, err := StartPostgres(t.Context(), PostgresOptions{Dir: dir})
	require.NoError(t, err)
	require.NoError(t, first.Stop())
	second, err := StartPostgres(t.Context(), PostgresOptions{Dir: dir})
	require.NoError(t, err)
	defer second.Stop()
	require.Equal(t, first.URL, second.URL)
}

func waitABit(t *testing.T) {
	select {
	case <-t.Context().Done():
	case <-time.After(50 * time.Millisecond):
	}
}

func TestSharedBuffersFollowMemory(t *testing.T) {
	t.Parallel()
	const gb = 1 << 30
	for mem, want := range map[int64]string{
		0:       "128MB", // unknown
		1 * gb:  "128MB",
		4 * gb:  "256MB",
		8 * gb:  "512MB",
		24 * gb: "1024MB",
		64 * gb: "1024MB",
	} {
		require.Equal(t, want, sharedBuffers(mem), "memory %d", mem)
	}
	require.Positive(t, memTotal(), "this machine's memory, from /proc/meminfo")
}
