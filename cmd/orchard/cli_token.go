package main

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/orchardhq/orchard/pkg/sdk"
	"github.com/orchardhq/orchard/pkg/tenancy"
)

func tokenCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Mint tokens: through the API, or offline from the signing key"}
	var (
		tenant, subject           string
		keyFile, issuer, audience string
		roles                     []string
		ttl                       time.Duration = 30 * 24 * time.Hour
	)
	mint := &cobra.Command{
		Use:   "mint --tenant T --role client,worker[,tenant-admin] [--ttl 720h] | --key-file F --role platform-admin",
		Short: "Mint a token for a tenant, with roles",
		Long: `mint asks the API (AdminService.MintToken, with a platform-admin --token) for a
token of the tenant --tenant granting --role (client, worker, tenant-admin;
repeatable or comma-separated) for --ttl (1 minute to 365 days). It prints the
token alone on stdout, so that

  export ORCHARD_TOKEN=$(orchard token mint --tenant acme --role client)

works; the expiry goes to stderr. The API server needs a signing key.

With --key-file, mint signs the token itself with that Ed25519 private key
(the API's --jwt-signing-key-file), for --jwt-issuer and --jwt-audience, and
calls no API: this is how a fresh deployment gets its first platform-admin
token (--role platform-admin, no --tenant), to create its first tenant.`,
		Example: `  orchard token mint --key-file signing-key.pem --jwt-issuer https://orchard.example.com \
    --jwt-audience orchard --role platform-admin --ttl 1h
  orchard token mint --tenant acme --role client,worker`,
		Args: cobra.NoArgs,
		RunE: run(func(c *cli, cmd *cobra.Command, _ []string) error {
			if keyFile != "" {
				return c.mintOffline(keyFile, issuer, audience, tenant, subject, roles, ttl)
			}
			if tenant == "" {
				return usageErrorf("--tenant is required (or --key-file, to mint offline)")
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
	f.StringVar(&keyFile, "key-file", "", "mint offline, signing with this Ed25519 private key (PEM)")
	f.StringVar(&issuer, "jwt-issuer", envString("ORCHARD_JWT_ISSUER", ""), "with --key-file: the issuer the API expects (env ORCHARD_JWT_ISSUER)")
	f.StringVar(&audience, "jwt-audience", envString("ORCHARD_JWT_AUDIENCE", ""), "with --key-file: the audience the API expects (env ORCHARD_JWT_AUDIENCE)")
	cmd.AddCommand(mint)
	return cmd
}

// mintOffline signs a token with the key in keyFile, without the API.
func (c *cli) mintOffline(keyFile, issuer, audience, tenant, subject string, roles []string, ttl time.Duration) error {
	if issuer == "" || audience == "" {
		return usageErrorf("--key-file needs --jwt-issuer and --jwt-audience (ORCHARD_JWT_ISSUER, ORCHARD_JWT_AUDIENCE), as the API has them")
	}
	var rs []tenancy.Role
	for _, r := range roles {
		switch role := tenancy.Role(strings.ToLower(strings.TrimSpace(r))); role {
		case tenancy.RoleClient, tenancy.RoleWorker, tenancy.RoleTenantAdmin, tenancy.RolePlatformAdmin:
			rs = append(rs, role)
		default:
			return usageErrorf("unknown role %q (client, worker, tenant-admin, platform-admin)", r)
		}
	}
	if len(rs) == 0 {
		return usageErrorf("--role is required (client, worker, tenant-admin, platform-admin)")
	}
	key, err := tenancy.ReadPrivateKeyFile(keyFile)
	if err != nil {
		return &codedError{msg: err.Error(), err: err, code: exitUsage}
	}
	m, err := tenancy.NewMinter(tenancy.MinterConfig{PrivateKey: key, Issuer: issuer, Audience: audience, MaxTTL: 365 * 24 * time.Hour})
	if err != nil {
		return usageErrorf("%v", err)
	}
	if subject == "" {
		subject = cmp.Or(tenant, "platform-admin")
	}
	tok, err := m.Mint(tenancy.Claims{Tenant: tenant, Subject: subject, Roles: rs}, ttl)
	if err != nil {
		return usageErrorf("%v", err)
	}
	expires := time.Now().Add(ttl)
	if c.json {
		return c.printJSON(map[string]string{"token": tok, "expiresAt": jsonTime(expires)})
	}
	fmt.Fprintf(c.errOut, "token for %s (%s), expires %s\n", cmp.Or(tenant, "the platform"), strings.Join(roles, ","), tableTime(expires))
	_, err = fmt.Fprintln(c.out, tok)
	return err
}
