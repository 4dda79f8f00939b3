package dispatcher_test

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"fmt"
	"testing"
)

func BenchmarkZZStatements(b *testing.B) {
	bs := newBenchSystem(b, benchShape{8, 16, 8})
	pool := bs.store
	_ = pool
	conn := testdbPool(b, bs.url)
	if _, err := conn.Exec(b.Context(), "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		b.Fatal(err)
	}
	bs.startMany(3000)
	conn.Exec(b.Context(), "SELECT pg_stat_statements_reset()")
	bs.run()
	bs.waitTurns(6000)
	bs.stop()
	rows, err := conn.Query(b.Context(), `SELECT calls, round(total_exec_time::numeric,1), round(mean_exec_time::numeric,3), rows, left(regexp_replace(query, '\s+', ' ', 'g'), 110) FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 25`)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var calls, r int64
		var tot, mean float64
		var q string
		rows.Scan(&calls, &tot, &mean, &r, &q)
		fmt.Printf("%7d %9.1f %8.3f %7d %s\n", calls, tot, mean, r, q)
	}
}

func testdbPool(b *testing.B, url string) *pgxpool.Pool {
	p, err := pgxpool.New(b.Context(), url)
	if err != nil {
		b.Fatal(err)
	}
	return p
}
