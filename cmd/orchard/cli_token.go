package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/orchardhq/orchard/pkg/sdk"
)

func tokenCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Mint tokens for tenants (platform-admin token)"}
	var (
		tenant, subject string
		roles           []string
		ttl             time.Duration = 30 * 24 * time.Hour
	)
	mint := &cobra.Command{
		Use:   "mint --tenant T --role client,worker[,tenant-admin] [--ttl 720h]",
		Short: "Mint a token for a tenant, with roles",
		Long: `mint asks the API (AdminService.MintToken, with a platform-admin --token) for a
token of the tenant --tenant granting --role (client, worker, tenant-admin;
repeatable or comma-separated) for --ttl (1 minute to 365 days). It prints the
token alone on stdout, so that

  export ORCHARD_TOKEN=$(orchard token mint --tenant acme --role client)

works; the expiry goes to stderr. The API server needs a signing key.`,
		Args: cobra.NoArgs,
		RunE: run(func(c *cli, cmd *cobra.Command, _ []string) error {
			if tenant == "" {
				return usageErrorf("--tenant is required")
			}
			var rs []sdk.Role
			for _, r := range roles {
				switch role := sdk.Role(strings.ToLower(strings.TrimSpace(r))); role {
				case sdk.RoleClient, sdk.RoleWorker, sdk.RoleTenantAdmin:
					rs = append(rs, role)
				default:
					return usageErrorf("unknown role %q (client, worker, tenant-admin)", r)
				}
			}
			if len(rs) == 0 {
				return usageErrorf("--role is required (client, worker, tenant-admin)")
			}
			var opts []sdk.MintOption
			if subject != "" {
				opts = append(opts, sdk.WithSubject(subject))
			}
			tok, err := c.adminClient().MintToken(cmd.Context(), tenant, rs, ttl, opts...)
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(map[string]string{"token": tok.Token, "expiresAt": jsonTime(tok.ExpiresAt)})
			}
			fmt.Fprintf(c.errOut, "token for tenant %s (%s), expires %s\n", tenant, strings.Join(roles, ","), tableTime(tok.ExpiresAt))
			_, err = fmt.Fprintln(c.out, tok.Token)
			return err
		}),
	}
	f := mint.Flags()
	f.StringVar(&tenant, "tenant", "", "the tenant the token acts for")
	f.StringSliceVar(&roles, "role", nil, "roles: client, worker, tenant-admin (repeatable or comma-separated)")
	durationFlag(f, &ttl, "ttl", "how long the token is valid (default 720h; 1m to 365d; 30d works)")
	f.StringVar(&subject, "subject", "", "the token's subject, in logs (default: the tenant id)")
	cmd.AddCommand(mint)
	return cmd
}
