package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/orchardhq/orchard/pkg/sdk"
)

// ruleJSON is a retention rule in JSON output; unset fields are absent.
type ruleJSON struct {
	Completed string `json:"completed,omitempty"`
	Failed    string `json:"failed,omitempty"`
	Cancelled string `json:"cancelled,omitempty"`
	KeepLast  *int   `json:"keepLast,omitempty"`
	MaxAge    string `json:"maxAge,omitempty"`
	AutoPrune *bool  `json:"autoPrune,omitempty"`
}

type policyJSON struct {
	DefaultRule *ruleJSON           `json:"defaultRule,omitempty"`
	RulesByName map[string]ruleJSON `json:"rulesByName,omitempty"`
}

func optString(d *time.Duration) string {
	if d == nil {
		return ""
	}
	return d.String()
}

func ruleView(r sdk.RetentionRule) ruleJSON {
	return ruleJSON{Completed: optString(r.Completed), Failed: optString(r.Failed), Cancelled: optString(r.Cancelled),
		KeepLast: r.KeepLast, MaxAge: optString(r.MaxAge), AutoPrune: r.AutoPrune}
}

func policyView(p sdk.RetentionPolicy) policyJSON {
	var v policyJSON
	if !p.Default.IsZero() {
		r := ruleView(p.Default)
		v.DefaultRule = &r
	}
	for name, r := range p.ByName {
		if v.RulesByName == nil {
			v.RulesByName = map[string]ruleJSON{}
		}
		v.RulesByName[name] = ruleView(r)
	}
	return v
}

type limitsJSON struct {
	RequestsPerSecond            float64 `json:"requestsPerSecond"`
	Burst                        int     `json:"burst"`
	StartsPerSecond              float64 `json:"startsPerSecond"`
	StartsBurst                  int     `json:"startsBurst"`
	MaxRunningInstances          int64   `json:"maxRunningInstances"`
	MaxPayloadBytes              int64   `json:"maxPayloadBytes"`
	MaxHistoryEventsPerExecution int64   `json:"maxHistoryEventsPerExecution"`
}

type tenantJSON struct {
	TenantID        string     `json:"tenantId"`
	State           string     `json:"state"`
	Limits          limitsJSON `json:"limits"`
	RetentionPolicy policyJSON `json:"retentionPolicy"`
	CreatedAt       string     `json:"createdAt"`
	UpdatedAt       string     `json:"updatedAt,omitempty"`
}

func tenantView(t *sdk.Tenant) tenantJSON {
	l := t.Limits
	return tenantJSON{
		TenantID: t.ID, State: string(t.State),
		Limits: limitsJSON{RequestsPerSecond: l.RequestsPerSecond, Burst: l.Burst, StartsPerSecond: l.StartsPerSecond, StartsBurst: l.StartsBurst, MaxRunningInstances: l.MaxRunningInstances,
			MaxPayloadBytes: l.MaxPayloadBytes, MaxHistoryEventsPerExecution: l.MaxHistoryEventsPerExecution},
		RetentionPolicy: policyView(t.RetentionPolicy),
		CreatedAt:       jsonTime(t.CreatedAt), UpdatedAt: jsonTime(t.UpdatedAt),
	}
}

// printTenants prints tenants: a table, or JSON (an object for one, an
// array for a listing).
func (c *cli) printTenants(one bool, tenants ...*sdk.Tenant) error {
	if c.json {
		if one {
			return c.printJSON(tenantView(tenants[0]))
		}
		out := make([]tenantJSON, 0, len(tenants))
		for _, t := range tenants {
			out = append(out, tenantView(t))
		}
		return c.printJSON(out)
	}
	t := c.table("TENANT", "STATE", "CREATED", "UPDATED")
	for _, ten := range tenants {
		t.row(ten.ID, string(ten.State), tableTime(ten.CreatedAt), tableTime(ten.UpdatedAt))
	}
	return t.flush()
}

func tenantCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "Manage tenants (platform-admin token) and a tenant's retention (tenant-admin token)",
	}
	admin := func(use, short string, do func(c *cli, cmd *cobra.Command, id string) (*sdk.Tenant, error)) *cobra.Command {
		return &cobra.Command{
			Use:   use + " ID",
			Short: short + " (platform-admin token)",
			Args:  cobra.ExactArgs(1),
			RunE: run(func(c *cli, cmd *cobra.Command, args []string) error {
				t, err := do(c, cmd, args[0])
				if err != nil {
					return err
				}
				return c.printTenants(true, t)
			}),
		}
	}
	cmd.AddCommand(
		admin("create", "Create a tenant", func(c *cli, cmd *cobra.Command, id string) (*sdk.Tenant, error) {
			return c.adminClient().CreateTenant(cmd.Context(), id)
		}),
		admin("get", "Print a tenant", func(c *cli, cmd *cobra.Command, id string) (*sdk.Tenant, error) {
			return c.adminClient().GetTenant(cmd.Context(), id)
		}),
		admin("suspend", "Suspend a tenant: its calls are refused and its instances pause; nothing is deleted",
			func(c *cli, cmd *cobra.Command, id string) (*sdk.Tenant, error) {
				return c.adminClient().SuspendTenant(cmd.Context(), id)
			}),
		admin("resume", "Resume a suspended tenant", func(c *cli, cmd *cobra.Command, id string) (*sdk.Tenant, error) {
			return c.adminClient().ResumeTenant(cmd.Context(), id)
		}),
		&cobra.Command{
			Use:   "list",
			Short: "List the tenants (platform-admin token)",
			Args:  cobra.NoArgs,
			RunE: run(func(c *cli, cmd *cobra.Command, _ []string) error {
				var tenants []*sdk.Tenant
				for t, err := range c.adminClient().ListTenants(cmd.Context()) {
					if err != nil {
						return err
					}
					tenants = append(tenants, t)
				}
				return c.printTenants(false, tenants...)
			}),
		},
		retentionCommand(),
	)
	cmd.AddCommand(janitorAdminCommands()...)
	return cmd
}

func retentionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "retention",
		Short: "Read and set the retention policy of the token's tenant (tenant-admin token)",
	}
	get := &cobra.Command{
		Use:   "get",
		Short: "Print the tenant's retention policy",
		Args:  cobra.NoArgs,
		RunE: run(func(c *cli, cmd *cobra.Command, _ []string) error {
			p, err := c.tenantClient().RetentionPolicy(cmd.Context())
			if err != nil {
				return err
			}
			return c.printPolicy(p)
		}),
	}
	var (
		name                                 string
		completed, failed, cancelled, maxAge time.Duration
		keepLast                             int
		autoPrune, clear, dryRun             bool
	)
	set := &cobra.Command{
		Use:   "set",
		Short: "Change the tenant's retention policy",
		Long: `set changes one rule of the tenant's retention policy: the default rule, or
with --name the rule of one orchestration name (which overrides the default
rule field by field). The flags given change their fields; the rule's other
fields and the other rules are kept. --clear empties the rule first (alone, it
removes it). Durations run from an instance's completion; 0 deletes at the
janitor's next run. The janitor applies the policy at its next run.

A dash in a name's rule takes the default rule's value when the rule applies.

--dry-run changes nothing: it prints what the changed policy would delete if
the janitor ran now.`,
		Example: `  orchard tenant retention set --completed 30d --failed 90d --keep-last 10 --auto-prune
  orchard tenant retention set --name nightly-report --clear --completed 7d`,
		Args: cobra.NoArgs,
		RunE: run(func(c *cli, cmd *cobra.Command, _ []string) error {
			changed := cmd.Flags().Changed
			if !slices.ContainsFunc([]string{"completed", "failed", "cancelled", "keep-last", "max-age", "auto-prune", "clear"}, changed) {
				return usageErrorf("give the fields to change (--completed, --failed, --cancelled, --keep-last, --max-age, --auto-prune) or --clear")
			}
			tc := c.tenantClient()
			ctx := cmd.Context()
			p, err := tc.RetentionPolicy(ctx)
			if err != nil {
				return err
			}
			rule := p.Default
			if name != "" {
				rule = p.ByName[name]
			}
			if clear {
				rule = sdk.RetentionRule{}
			}
			if changed("completed") {
				rule.Completed = &completed
			}
			if changed("failed") {
				rule.Failed = &failed
			}
			if changed("cancelled") {
				rule.Cancelled = &cancelled
			}
			if changed("max-age") {
				rule.MaxAge = &maxAge
			}
			if changed("keep-last") {
				rule.KeepLast = &keepLast
			}
			if changed("auto-prune") {
				rule.AutoPrune = &autoPrune
			}
			if name == "" {
				p.Default = rule
			} else {
				if p.ByName == nil {
					p.ByName = map[string]sdk.RetentionRule{}
				}
				p.ByName[name] = rule
				if rule.IsZero() {
					delete(p.ByName, name)
				}
			}
			if dryRun {
				preview, err := tc.PreviewRetention(ctx, p)
				if err != nil {
					return err
				}
				fmt.Fprintln(c.errOut, "dry run: the policy is unchanged")
				return c.printPreview(preview)
			}
			if p, err = tc.SetRetentionPolicy(ctx, *p); err != nil {
				return err
			}
			return c.printPolicy(p)
		}),
	}
	f := set.Flags()
	f.StringVar(&name, "name", "", "change the rule of this orchestration name (default: the default rule)")
	durationFlag(f, &completed, "completed", "keep completed instances this long (720h, 30d)")
	durationFlag(f, &failed, "failed", "keep failed instances this long")
	durationFlag(f, &cancelled, "cancelled", "keep cancelled instances this long")
	f.IntVar(&keepLast, "keep-last", 0, "keep the newest N executions of continue-as-new chains")
	durationFlag(f, &maxAge, "max-age", "prune past executions that ended longer ago than this")
	f.BoolVar(&autoPrune, "auto-prune", false, "prune at each continue-as-new (needs --keep-last)")
	f.BoolVar(&clear, "clear", false, "empty the rule before applying the other flags")
	f.BoolVar(&dryRun, "dry-run", false, "change nothing: print what the changed policy would delete now")
	cmd.AddCommand(get, set, retentionPreviewCommand())
	return cmd
}

func (c *cli) printPolicy(p *sdk.RetentionPolicy) error {
	if c.json {
		return c.printJSON(policyView(*p))
	}
	if p.Default.IsZero() && len(p.ByName) == 0 {
		_, err := fmt.Fprintln(c.out, "no retention policy: instances are kept until deleted")
		return err
	}
	d := func(v *time.Duration) string {
		if v == nil {
			return ""
		}
		return humanDuration(*v)
	}
	t := c.table("RULE", "COMPLETED", "FAILED", "CANCELLED", "KEEP-LAST", "MAX-AGE", "AUTO-PRUNE")
	row := func(name string, r sdk.RetentionRule) {
		keep, auto := "", ""
		if r.KeepLast != nil {
			keep = strconv.Itoa(*r.KeepLast)
		}
		if r.AutoPrune != nil {
			auto = strconv.FormatBool(*r.AutoPrune)
		}
		t.row(name, d(r.Completed), d(r.Failed), d(r.Cancelled), keep, d(r.MaxAge), auto)
	}
	row("(default)", p.Default)
	for _, name := range slices.Sorted(maps.Keys(p.ByName)) {
		row(name, p.ByName[name])
	}
	return t.flush()
}
