package testdb

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

func TestMain(m *testing.M) { Main(m) }

func TestEachTestGetsItsOwnMigratedDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b := URL(t), URL(t)
	require.NotEqual(t, a, b)

	ca, err := pgx.Connect(ctx, a)
	require.NoError(t, err)
	defer ca.Close(ctx)
	cb, err := pgx.Connect(ctx, b)
	require.NoError(t, err)
	defer cb.Close(ctx)

	_, err = ca.Exec(ctx, "INSERT INTO tenants (tenant_id, created_at, updated_at) VALUES ('acme', 1, 1)")
	require.NoError(t, err)
	var n int
	require.NoError(t, cb.QueryRow(ctx, "SELECT count(*) FROM tenants").Scan(&n))
	require.Zero(t, n, "a write in one test's database is visible in another's")

	var iso string
	require.NoError(t, ca.QueryRow(ctx, "SHOW transaction_isolation").Scan(&iso))
	if !SharedServer(t).Cockroach {
		require.Equal(t, "serializable", iso)
	}
}

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
	conn.Close(t.Context())
	require.DirExists(t, dir)

	require.NoError(t, srv.Stop())
	require.NoDirExists(t, dir)
	_, err = pgx.Connect(t.Context(), srv.URL)
	require.Error(t, err)
}

func waitABit(t *testing.T) {
	select {
	case <-t.Context().Done():
	case <-time.After(50 * time.Millisecond):
	}
}
