package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/orchardhq/orchard/schema"
	"github.com/orchardhq/orchard/services/janitor"
)

func migrateCommand() *cobra.Command {
	var url, riverURL string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the schema migrations to the database at ORCHARD_DATABASE_URL",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if url == "" {
				return fmt.Errorf("no database: set ORCHARD_DATABASE_URL or pass --database-url")
			}
			conn, err := pgx.Connect(cmd.Context(), url)
			if err != nil {
				return fmt.Errorf("connect: %w", err)
			}
			defer conn.Close(cmd.Context())
			applied, err := schema.Migrate(cmd.Context(), conn)
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "schema is up to date")
			}
			for _, v := range applied {
				fmt.Fprintln(cmd.OutOrStdout(), "applied", v)
			}
			return migrateRiver(cmd.Context(), cmd.OutOrStdout(), conn, url, riverURL)
		},
	}
	cmd.PersistentFlags().StringVar(&url, "database-url", envString("ORCHARD_DATABASE_URL", ""), "database URL (env ORCHARD_DATABASE_URL)")
	cmd.Flags().StringVar(&riverURL, "river-database-url", envString("ORCHARD_RIVER_DATABASE_URL", ""),
		"PostgreSQL URL of the janitor's River tables (env ORCHARD_RIVER_DATABASE_URL; empty: the main database, when it is PostgreSQL)")
	cmd.AddCommand(migrateStatusCommand(&url))
	return cmd
}

// migrateStatusCommand lists the migrations and when each was applied; it
// only reads, and exits 1 when some are pending.
func migrateStatusCommand(url *string) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "List the schema migrations and when each was applied (exit 1 when some are pending)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if *url == "" {
				return fmt.Errorf("no database: set ORCHARD_DATABASE_URL or pass --database-url")
			}
			conn, err := pgx.Connect(cmd.Context(), *url)
			if err != nil {
				return fmt.Errorf("connect: %w", err)
			}
			defer conn.Close(cmd.Context())
			st, err := schema.Status(cmd.Context(), conn)
			if err != nil {
				return err
			}
			pending := 0
			for _, m := range st {
				applied := "pending"
				if !m.Pending() {
					applied = m.AppliedAt.Format(time.RFC3339)
				} else {
					pending++
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%-40s %s\n", m.Version, applied)
			}
			if pending > 0 {
				return fmt.Errorf("%d of %d migrations pending: run orchard migrate", pending, len(st))
			}
			fmt.Fprintln(cmd.OutOrStdout(), "schema is up to date")
			return nil
		},
	}
}

// migrateRiver creates or upgrades the janitor's River tables: in the
// River database, or in the main one when that is PostgreSQL. On
// CockroachDB without a River database there is nothing to do here (the
// janitor refuses to start until one is set).
func migrateRiver(ctx context.Context, out io.Writer, conn *pgx.Conn, url, riverURL string) error {
	if riverURL == "" {
		cockroach, err := schema.IsCockroach(ctx, conn)
		if err != nil {
			return err
		}
		if cockroach {
			fmt.Fprintln(out, "river: skipped (CockroachDB; set ORCHARD_RIVER_DATABASE_URL to a PostgreSQL database for the janitor)")
			return nil
		}
		riverURL = url
	}
	pool, err := pgxpool.New(ctx, riverURL)
	if err != nil {
		return fmt.Errorf("river database: %w", err)
	}
	defer pool.Close()
	n, err := janitor.Migrate(ctx, pool, "")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "river: %d new migrations\n", n)
	return nil
}
