package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/schema"
)

func devCommand() *cobra.Command {
	var (
		dir   string
		port  int
		fresh bool
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run Orchard on an embedded database, for development",
		Long: `dev starts an embedded database (a cockroach binary on PATH as a single
in-memory node; otherwise a PostgreSQL cluster from the machine's binaries,
kept in --dir so data survives a restart), migrates it and creates the demo
tenant. Ctrl-C stops everything, the database included.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			var srv *testdb.Server
			var err error
			if bin, lookErr := exec.LookPath("cockroach"); lookErr == nil {
				fmt.Fprintln(out, "starting CockroachDB (in memory) from", bin)
				srv, err = testdb.StartCockroach(bin)
			} else {
				if fresh {
					if err := os.RemoveAll(dir); err != nil {
						return err
					}
				}
				abs, _ := filepath.Abs(dir)
				fmt.Fprintln(out, "starting PostgreSQL in", abs)
				srv, err = testdb.StartPostgres(ctx, testdb.PostgresOptions{Dir: dir, Port: port, Durable: true})
			}
			if err != nil {
				return fmt.Errorf("embedded database: %w", err)
			}
			defer srv.Stop()

			conn, err := pgx.Connect(ctx, srv.URL)
			if err != nil {
				return err
			}
			applied, err := schema.Migrate(ctx, conn)
			conn.Close(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "migrated (%d new migrations)\n", len(applied))

			pool, err := pgxpool.New(ctx, srv.URL)
			if err != nil {
				return err
			}
			st := crdb.New(pool, crdb.Options{})
			defer st.Close()
			if err := st.CreateTenant(ctx, &store.CreateTenantParams{TenantID: "demo"}); err != nil && !errors.Is(err, store.ErrAlreadyExists) {
				return err
			}
			fmt.Fprintln(out, "tenant: demo")
			fmt.Fprintln(out, "database:", srv.URL)
			fmt.Fprintln(out, "started: embedded database (the API and dispatchers join in later releases); Ctrl-C to stop")
			<-ctx.Done()
			fmt.Fprintln(out, "stopping")
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".orchard/dev", "where the embedded PostgreSQL keeps its data")
	cmd.Flags().IntVar(&port, "db-port", 0, "port of the embedded database (0: a free one)")
	cmd.Flags().BoolVar(&fresh, "fresh", false, "wipe the embedded database first")
	return cmd
}
