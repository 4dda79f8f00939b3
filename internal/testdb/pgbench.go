package testdb

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

var pgbenchOnce struct {
	sync.Once
	tps float64
	err error
}

// PgbenchInsertRate measures, once per test binary, the single-row INSERT
// commit rate of the shared server with pgbench (16 clients, 2 threads, 10
// seconds, the server's own settings), for benchmarks to report their rates
// beside it. It returns 0 on CockroachDB, which has no pgbench comparison.
func PgbenchInsertRate(b *testing.B, url string) float64 {
	b.Helper()
	if SharedServer(b).Cockroach {
		b.Log("pgbench comparison only on PostgreSQL")
		return 0
	}
	pgbenchOnce.Do(func() {
		pgbenchOnce.tps, pgbenchOnce.err = runPgbench(url)
	})
	if pgbenchOnce.err != nil {
		b.Fatalf("pgbench: %v", pgbenchOnce.err)
	}
	b.Logf("pgbench single-row INSERT, 16 clients: %.0f tps", pgbenchOnce.tps)
	return pgbenchOnce.tps
}

func runPgbench(url string) (float64, error) {
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
		if len(matches) == 0 {
			return 0, fmt.Errorf("no pgbench binary")
		}
		bin = matches[len(matches)-1]
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS pgbench_insert (id UUID PRIMARY KEY DEFAULT gen_random_uuid(), v INT8 NOT NULL)`)
	conn.Close(ctx)
	if err != nil {
		return 0, err
	}
	script, err := os.CreateTemp("", "pgbench-*.sql")
	if err != nil {
		return 0, err
	}
	defer os.Remove(script.Name())
	if _, err := script.WriteString("\\set v random(1, 1000000)\nINSERT INTO pgbench_insert (v) VALUES (:v);\n"); err != nil {
		return 0, err
	}
	script.Close()
	out, err := exec.Command(bin, "-n", "-c", "16", "-j", "2", "-T", "10", "-M", "prepared", "-f", script.Name(), url).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%w: %s", err, out)
	}
	m := regexp.MustCompile(`tps = ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no tps in output: %s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}
