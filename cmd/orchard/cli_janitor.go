package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/orchardhq/orchard/pkg/sdk"
)

// The janitor's verbs: what retention would delete, the deletion audit
// log, erasing a tenant and running retention now.

type previewJSON struct {
	Instances        int64              `json:"instances"`
	Executions       int64              `json:"executions"`
	Events           int64              `json:"events"`
	PrunedInstances  int64              `json:"prunedInstances"`
	PrunedExecutions int64              `json:"prunedExecutions"`
	PrunedEvents     int64              `json:"prunedEvents"`
	OldestCompleted  string             `json:"oldestCompleted,omitempty"`
	NewestCompleted  string             `json:"newestCompleted,omitempty"`
	LowerBound       bool               `json:"lowerBound"`
	Groups           []previewGroupJSON `json:"groups"`
}

type previewGroupJSON struct {
	Status     string `json:"status"`
	Name       string `json:"name"`
	Instances  int64  `json:"instances"`
	Executions int64  `json:"executions"`
	Events     int64  `json:"events"`
}

func (c *cli) printPreview(p *sdk.RetentionPreview) error {
	if c.json {
		v := previewJSON{
			Instances: p.Instances, Executions: p.Executions, Events: p.Events, PrunedInstances: p.PrunedInstances,
			PrunedExecutions: p.PrunedExecutions, PrunedEvents: p.PrunedEvents, LowerBound: p.LowerBound,
			OldestCompleted: jsonTime(p.OldestCompleted), NewestCompleted: jsonTime(p.NewestCompleted), Groups: []previewGroupJSON{},
		}
		for _, g := range p.Groups {
			v.Groups = append(v.Groups, previewGroupJSON{Status: string(g.Status), Name: g.Name, Instances: g.Instances, Executions: g.Executions, Events: g.Events})
		}
		return c.printJSON(v)
	}
	atLeast := ""
	if p.LowerBound {
		atLeast = "at least "
	}
	if p.Instances == 0 && p.PrunedExecutions == 0 {
		_, err := fmt.Fprintf(c.out, "the policy would delete nothing now%s\n", map[bool]string{true: " (counting stopped at its cap)"}[p.LowerBound])
		return err
	}
	fmt.Fprintf(c.out, "the policy would delete %s%d instances (%d executions, %d history events) and prune %d executions (%d events) of %d chains\n",
		atLeast, p.Instances, p.Executions-p.PrunedExecutions, p.Events-p.PrunedEvents, p.PrunedExecutions, p.PrunedEvents, p.PrunedInstances)
	if !p.OldestCompleted.IsZero() {
		fmt.Fprintf(c.out, "completed between %s and %s\n", tableTime(p.OldestCompleted), tableTime(p.NewestCompleted))
	}
	if len(p.Groups) == 0 {
		return nil
	}
	t := c.table("STATUS", "NAME", "INSTANCES", "EXECUTIONS", "EVENTS")
	for _, g := range p.Groups {
		t.row(string(g.Status), g.Name, strconv.FormatInt(g.Instances, 10), strconv.FormatInt(g.Executions, 10), strconv.FormatInt(g.Events, 10))
	}
	return t.flush()
}

func retentionPreviewCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "preview",
		Short: "Print what the tenant's retention policy would delete now (deletes nothing)",
		Args:  cobra.NoArgs,
		RunE: run(func(c *cli, cmd *cobra.Command, _ []string) error {
			p, err := c.tenantClient().PreviewRetention(cmd.Context(), nil)
			if err != nil {
				return err
			}
			return c.printPreview(p)
		}),
	}
}

type auditJSON struct {
	TenantID   string `json:"tenantId"`
	RecordID   string `json:"recordId"`
	Actor      string `json:"actor"`
	Role       string `json:"role"`
	Action     string `json:"action"`
	Request    any    `json:"request"`
	Instances  int64  `json:"instances"`
	Executions int64  `json:"executions"`
	Events     int64  `json:"events"`
	Rows       int64  `json:"rows,omitempty"`
	Complete   bool   `json:"complete"`
	StartedAt  string `json:"startedAt"`
	FinishedAt string `json:"finishedAt,omitempty"`
	Error      string `json:"error,omitempty"`
}

func auditCommand() *cobra.Command {
	var (
		tenant, action string
		since          time.Duration
		allTenants     bool
		limit          int
	)
	list := &cobra.Command{
		Use:   "list",
		Short: "List the deletion audit log, newest first",
		Long: `list prints who deleted or pruned what and when: deletes and prunes through the
API, the janitor's retention runs, graceful deletes and erasures. With a
tenant-admin token, the token's tenant; with a platform-admin token, --tenant
ID or --all-tenants. A record without FINISHED did not finish: it goes on, or
it was cut short and is resumed.`,
		Example: `  orchard audit list --action retention --since 24h`,
		Args:    cobra.NoArgs,
		RunE: run(func(c *cli, cmd *cobra.Command, _ []string) error {
			f := sdk.AuditFilter{Action: action}
			if since > 0 {
				f.StartedAfter = time.Now().Add(-since)
			}
			ctx := cmd.Context()
			records := c.tenantClient().AuditRecords(ctx, f, sdk.WithPageSize(min(limit, 1000)))
			if tenant != "" || allTenants {
				records = c.adminClient().AuditRecords(ctx, tenant, f, sdk.WithPageSize(min(limit, 1000)))
			}
			var out []*sdk.AuditRecord
			for r, err := range records {
				if err != nil {
					return err
				}
				out = append(out, r)
				if len(out) >= limit {
					break
				}
			}
			if c.json {
				v := []auditJSON{}
				for _, r := range out {
					var req any = string(r.Request)
					if len(r.Request) > 0 {
						req = r.Request
					}
					v = append(v, auditJSON{
						TenantID: r.TenantID, RecordID: r.RecordID, Actor: r.Actor, Role: r.Role, Action: r.Action, Request: req,
						Instances: r.Instances, Executions: r.Executions, Events: r.Events, Rows: r.Rows, Complete: r.Complete,
						StartedAt: jsonTime(r.StartedAt), FinishedAt: jsonTime(r.FinishedAt), Error: r.Error,
					})
				}
				return c.printJSON(v)
			}
			t := c.table("STARTED", "FINISHED", "TENANT", "ACTOR", "ACTION", "INSTANCES", "EXECUTIONS", "EVENTS", "REQUEST", "ERROR")
			for _, r := range out {
				finished := "-"
				if !r.FinishedAt.IsZero() {
					finished = tableTime(r.FinishedAt)
				}
				t.row(tableTime(r.StartedAt), finished, r.TenantID, r.Actor, r.Action, strconv.FormatInt(r.Instances, 10),
					strconv.FormatInt(r.Executions, 10), strconv.FormatInt(r.Events, 10), compactJSON(r.Request, 60), r.Error)
			}
			return t.flush()
		}),
	}
	f := list.Flags()
	f.StringVar(&tenant, "tenant", "", "the records of this tenant (platform-admin token)")
	f.BoolVar(&allTenants, "all-tenants", false, "the records of every tenant (platform-admin token)")
	f.StringVar(&action, "action", "", "only this action: "+strings.Join([]string{"delete_instance", "delete_instances", "prune_executions",
		"prune_executions_bulk", "retention", "graceful_delete", "erase_tenant"}, ", "))
	durationFlag(f, &since, "since", "only records that started this long ago or later (24h, 7d)")
	f.IntVar(&limit, "limit", 100, "the most records to print")
	cmd := &cobra.Command{Use: "audit", Short: "Read the deletion audit log"}
	cmd.AddCommand(list)
	return cmd
}

// janitorAdminCommands are the tenant verbs that drive the janitor
// (platform-admin token).
func janitorAdminCommands() []*cobra.Command {
	var confirm string
	erase := &cobra.Command{
		Use:   "erase ID",
		Short: "Erase a tenant for good: suspend it now, then delete every row it has (platform-admin token)",
		Long: `erase suspends the tenant at once (its tokens are refused) and queues the
janitor's erasure, which deletes every row the tenant has in every table,
in batches, keeping one audit record that says when and how much went. It
cannot be undone: --confirm must repeat the id.`,
		Args: cobra.ExactArgs(1),
		RunE: run(func(c *cli, cmd *cobra.Command, args []string) error {
			if confirm != args[0] {
				return usageErrorf("erasing %s cannot be undone: pass --confirm %s", args[0], args[0])
			}
			t, job, err := c.adminClient().EraseTenant(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(c.errOut, "erasure queued (janitor job %d); follow it with: orchard audit list --tenant %s --action erase_tenant\n", job, t.ID)
			return c.printTenants(true, t)
		}),
	}
	erase.Flags().StringVar(&confirm, "confirm", "", "the tenant's id again")
	trigger := &cobra.Command{
		Use:   "run-retention [ID]",
		Short: "Queue a retention run now, for a tenant or every tenant with a policy (platform-admin token)",
		Args:  cobra.MaximumNArgs(1),
		RunE: run(func(c *cli, cmd *cobra.Command, args []string) error {
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			jobs, queued, err := c.adminClient().TriggerRetention(cmd.Context(), id)
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(map[string]any{"queued": queued, "jobIds": jobs})
			}
			_, err = fmt.Fprintf(c.out, "%d runs queued (%d already queued); janitor jobs %v\n", queued, int64(len(jobs))-queued, jobs)
			return err
		}),
	}
	runs := &cobra.Command{
		Use:   "janitor-runs [ID]",
		Short: "List recent retention runs, newest first, of a tenant or all (platform-admin token)",
		Args:  cobra.MaximumNArgs(1),
		RunE: run(func(c *cli, cmd *cobra.Command, args []string) error {
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			t := c.table("STARTED", "TENANT", "INSTANCES", "EXECUTIONS", "EVENTS", "COMPLETE", "TRIGGERED", "ERROR")
			var all []*sdk.JanitorRun
			for r, err := range c.adminClient().JanitorRuns(cmd.Context(), id, sdk.WithPageSize(100)) {
				if err != nil {
					return err
				}
				all = append(all, r)
				if len(all) == 100 {
					break
				}
			}
			if c.json {
				return c.printJSON(all)
			}
			for _, r := range all {
				t.row(tableTime(r.StartedAt), r.TenantID, strconv.FormatInt(r.InstancesDeleted, 10), strconv.FormatInt(r.ExecutionsDeleted, 10),
					strconv.FormatInt(r.EventsDeleted, 10), strconv.FormatBool(r.Complete), strconv.FormatBool(r.Triggered), r.Error)
			}
			return t.flush()
		}),
	}
	return []*cobra.Command{erase, trigger, runs}
}
