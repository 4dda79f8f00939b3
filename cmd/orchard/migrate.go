package main

import (
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/orchardhq/orchard/schema"
)

func migrateCommand() *cobra.Command {
	var url string
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
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "database-url", os.Getenv("ORCHARD_DATABASE_URL"), "database URL (env ORCHARD_DATABASE_URL)")
	return cmd
}
