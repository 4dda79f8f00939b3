package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/orchardhq/orchard/pkg/sdk"
)

// instanceJSON is an instance in JSON output.
type instanceJSON struct {
	InstanceID         string            `json:"instanceId"`
	Name               string            `json:"name"`
	Version            string            `json:"version"`
	Status             sdk.Status        `json:"status"`
	CurrentExecutionID int64             `json:"currentExecutionId"`
	ParentInstanceID   string            `json:"parentInstanceId,omitempty"`
	RootInstanceID     string            `json:"rootInstanceId"`
	Input              json.RawMessage   `json:"input,omitempty"`
	Output             json.RawMessage   `json:"output,omitempty"`
	Error              string            `json:"error,omitempty"`
	Tags               map[string]string `json:"tags,omitempty"`
	CreatedAt          string            `json:"createdAt"`
	UpdatedAt          string            `json:"updatedAt,omitempty"`
	CompletedAt        string            `json:"completedAt,omitempty"`
	ExecutionCount     int64             `json:"executionCount"`
	EventCount         int64             `json:"eventCount"`
	Retention          string            `json:"retention,omitempty"`
}

func instanceView(in *sdk.Instance) instanceJSON {
	v := instanceJSON{
		InstanceID: in.ID, Name: in.Name, Version: in.Version, Status: in.Status, CurrentExecutionID: in.CurrentExecutionID,
		ParentInstanceID: in.ParentID, RootInstanceID: in.RootID, Input: in.Input, Output: in.Output, Error: in.Error, Tags: in.Tags,
		CreatedAt: jsonTime(in.CreatedAt), UpdatedAt: jsonTime(in.UpdatedAt), CompletedAt: jsonTime(in.CompletedAt),
		ExecutionCount: in.ExecutionCount, EventCount: in.EventCount,
	}
	if in.Retention != nil {
		v.Retention = in.Retention.String()
	}
	return v
}

func formatTags(tags map[string]string) string {
	parts := make([]string, 0, len(tags))
	for k, v := range tags {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// printInstance prints one instance: "Key: value" lines, or JSON.
func (c *cli) printInstance(in *sdk.Instance) error {
	if c.json {
		return c.printJSON(instanceView(in))
	}
	retention := "tenant policy"
	if in.Retention != nil {
		retention = humanDuration(*in.Retention)
	}
	kv := []string{
		"ID", in.ID,
		"Name", in.Name,
		"Version", in.Version,
		"Status", string(in.Status),
		"Execution", fmt.Sprintf("%d (%d kept, %d events)", in.CurrentExecutionID, in.ExecutionCount, in.EventCount),
		"Parent", in.ParentID,
		"Root", in.RootID,
		"Tags", formatTags(in.Tags),
		"Created", tableTime(in.CreatedAt),
		"Updated", tableTime(in.UpdatedAt),
		"Completed", tableTime(in.CompletedAt),
		"Retention", retention,
		"Input", compactJSON(in.Input, 0),
		"Output", compactJSON(in.Output, 0),
	}
	if in.Error != "" {
		kv = append(kv, "Error", in.Error)
	}
	return c.fields(kv...)
}

func startCommand() *cobra.Command {
	var (
		input, id, version string
		tags               map[string]string
		retention          time.Duration
		wait               bool
	)
	cmd := &cobra.Command{
		Use:   "start NAME",
		Short: "Start an instance of a registered definition",
		Long: `start starts an instance of the definition NAME (its latest version, or
--version) and prints the instance's id. --input is JSON, or @file, or @- for
stdin. With --id the start is idempotent: starting the same again is the same
instance. With --wait it waits until the instance ends and prints it; it then
exits 1 when the instance failed or was cancelled.`,
		Example: `  orchard start order-fulfilment --id order-42 --input '{"order_id": "42"}' --tag team=shop --wait`,
		Args:    cobra.ExactArgs(1),
		RunE: run(func(c *cli, cmd *cobra.Command, args []string) error {
			in, err := c.readPayload("input", input)
			if err != nil {
				return err
			}
			opts := []sdk.StartOption{sdk.WithInstanceID(id), sdk.WithVersion(version), sdk.WithTags(tags)}
			if cmd.Flags().Changed("retention") {
				opts = append(opts, sdk.WithRetention(retention))
			}
			client := c.client()
			ctx := cmd.Context()
			started, err := client.Start(ctx, args[0], in, opts...)
			if err != nil {
				return err
			}
			if !wait {
				if c.json {
					return c.printJSON(map[string]string{"instanceId": started})
				}
				_, err := fmt.Fprintln(c.out, started)
				return err
			}
			ended, err := client.Wait(ctx, started)
			if err != nil {
				return err
			}
			if err := c.printInstance(ended); err != nil {
				return err
			}
			if ended.Status != sdk.StatusCompleted {
				return fmt.Errorf("instance %s ended %s", ended.ID, ended.Status)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&input, "input", "", "input as JSON, @file or @- (stdin)")
	f.StringVar(&id, "id", "", "the instance's id (default: a new UUID); makes the start idempotent")
	f.StringVar(&version, "version", "", "version of the definition (default: the latest)")
	f.Var(&tagsValue{&tags}, "tag", "tag the instance (repeatable)")
	durationFlag(f, &retention, "retention", "keep the instance this long once it ends, instead of the tenant's policy (720h, 30d)")
	f.BoolVar(&wait, "wait", false, "wait until the instance ends, and print it")
	return cmd
}

func eventCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "event", Short: "Raise events on instances"}
	var payload string
	raise := &cobra.Command{
		Use:   "raise ID NAME",
		Short: "Raise the event NAME on the instance ID, for its wait_event steps",
		Long: `raise delivers the external event NAME to the instance ID. --payload is JSON,
or @file, or @- for stdin. Raising an event twice delivers it twice.`,
		Args: cobra.ExactArgs(2),
		RunE: run(func(c *cli, cmd *cobra.Command, args []string) error {
			p, err := c.readPayload("payload", payload)
			if err != nil {
				return err
			}
			if err := c.client().RaiseEvent(cmd.Context(), args[0], args[1], p); err != nil {
				return err
			}
			if c.json {
				return c.printJSON(map[string]string{"instanceId": args[0], "event": args[1]})
			}
			_, err = fmt.Fprintf(c.out, "raised %s on %s\n", args[1], args[0])
			return err
		}),
	}
	raise.Flags().StringVar(&payload, "payload", "", "the event's payload as JSON, @file or @- (stdin)")
	cmd.AddCommand(raise)
	return cmd
}

func cancelCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Ask a running instance to stop",
		Long: `cancel asks the instance ID to stop: its activities and children are
cancelled and it ends Cancelled, with --reason as its error. Cancelling an
instance that ended does nothing. Use 'orchard instance get' to see it end.`,
		Args: cobra.ExactArgs(1),
		RunE: run(func(c *cli, cmd *cobra.Command, args []string) error {
			if err := c.client().Cancel(cmd.Context(), args[0], reason); err != nil {
				return err
			}
			if c.json {
				return c.printJSON(map[string]string{"instanceId": args[0]})
			}
			_, err := fmt.Fprintf(c.out, "cancel requested for %s\n", args[0])
			return err
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why: the instance's error once cancelled")
	return cmd
}

func instanceCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "instance", Short: "Read, delete and prune one instance"}
	cmd.AddCommand(instanceGetCommand(), instanceHistoryCommand(), instanceTreeCommand(),
		instanceDeleteCommand(), instancePruneCommand(), instanceExecutionsCommand())
	return cmd
}

func instanceGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Print an instance",
		Long:  "get prints the instance ID with its current execution's state, input and output.",
		Args:  cobra.ExactArgs(1),
		RunE: run(func(c *cli, cmd *cobra.Command, args []string) error {
			in, err := c.client().Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.printInstance(in)
		}),
	}
}

type eventJSON struct {
	EventID   int64           `json:"eventId"`
	Kind      string          `json:"kind"`
	Payload   json.RawMessage `json:"payload,omitempty"`
	CreatedAt string          `json:"createdAt"`
}

// eventFields is an event's payload without its storage envelope (the
// format version "v"): the event's own fields, in their order.
func eventFields(payload []byte) json.RawMessage {
	fields, ok := orderedFields(payload)
	if !ok {
		return payload
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(f.value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// eventDetails prints an event's fields as key=value, cut to limit runes.
func eventDetails(payload []byte, limit int) string {
	fields, ok := orderedFields(payload)
	if !ok {
		return compactJSON(payload, limit)
	}
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		var str string
		if json.Unmarshal(f.value, &str) != nil {
			str = compactJSON(f.value, 0)
		}
		parts = append(parts, f.key+"="+str)
	}
	s := strings.Join(parts, " ")
	if len([]rune(s)) > limit {
		s = string([]rune(s)[:limit-1]) + "…"
	}
	return s
}

type jsonField struct {
	key   string
	value json.RawMessage
}

// orderedFields reads a JSON object's fields in order, leaving out the
// envelope's "v"; false when payload is not an object.
func orderedFields(payload []byte) ([]jsonField, bool) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var fields []jsonField
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, false
		}
		if key != "v" {
			fields = append(fields, jsonField{key, value})
		}
	}
	return fields, true
}

type historyJSON struct {
	InstanceID  string      `json:"instanceId"`
	ExecutionID int64       `json:"executionId"`
	Events      []eventJSON `json:"events"`
}

func instanceHistoryCommand() *cobra.Command {
	var execution int64
	cmd := &cobra.Command{
		Use:   "history ID",
		Short: "Print the history of an instance's execution",
		Long: `history prints the events of the current execution of the instance ID, or of
--execution N. The table cuts payloads; --output json has them whole.`,
		Args: cobra.ExactArgs(1),
		RunE: run(func(c *cli, cmd *cobra.Command, args []string) error {
			h, err := c.client().History(cmd.Context(), args[0], execution)
			if err != nil {
				return err
			}
			if c.json {
				events := make([]eventJSON, 0, len(h.Events))
				for _, e := range h.Events {
					events = append(events, eventJSON{EventID: e.ID, Kind: e.Kind, Payload: eventFields(e.Payload), CreatedAt: jsonTime(e.CreatedAt)})
				}
				return c.printJSON(historyJSON{InstanceID: args[0], ExecutionID: h.ExecutionID, Events: events})
			}
			t := c.table("EVENT", "KIND", "CREATED", "DETAILS")
			for _, e := range h.Events {
				t.row(strconv.FormatInt(e.ID, 10), e.Kind, tableTime(e.CreatedAt), eventDetails(e.Payload, 100))
			}
			return t.flush()
		}),
	}
	cmd.Flags().Int64Var(&execution, "execution", 0, "the execution (default: the current one)")
	return cmd
}

type executionJSON struct {
	ExecutionID int64           `json:"executionId"`
	Status      sdk.Status      `json:"status"`
	Input       json.RawMessage `json:"input,omitempty"`
	Output      json.RawMessage `json:"output,omitempty"`
	Error       string          `json:"error,omitempty"`
	StartedAt   string          `json:"startedAt"`
	CompletedAt string          `json:"completedAt,omitempty"`
	EventCount  int64           `json:"eventCount"`
}

func instanceExecutionsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "executions ID",
		Short: "List the executions of an instance that were not pruned",
		Args:  cobra.ExactArgs(1),
		RunE: run(func(c *cli, cmd *cobra.Command, args []string) error {
			execs, err := c.client().Executions(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if c.json {
				out := make([]executionJSON, 0, len(execs))
				for _, e := range execs {
					out = append(out, executionJSON{ExecutionID: e.ID, Status: e.Status, Input: e.Input, Output: e.Output, Error: e.Error,
						StartedAt: jsonTime(e.StartedAt), CompletedAt: jsonTime(e.CompletedAt), EventCount: e.EventCount})
				}
				return c.printJSON(out)
			}
			t := c.table("EXECUTION", "STATUS", "EVENTS", "STARTED", "COMPLETED")
			for _, e := range execs {
				t.row(strconv.FormatInt(e.ID, 10), string(e.Status), strconv.FormatInt(e.EventCount, 10), tableTime(e.StartedAt), tableTime(e.CompletedAt))
			}
			return t.flush()
		}),
	}
}

// treeNode is an instance of a tree in JSON output.
type treeNode struct {
	InstanceID string      `json:"instanceId"`
	Name       string      `json:"name"`
	Status     sdk.Status  `json:"status"`
	Children   []*treeNode `json:"children,omitempty"`
	createdAt  time.Time
}

// instanceTree reads the tree of an instance: its ids, then the instances
// by pages of 1000 ids.
func instanceTree(ctx context.Context, client *sdk.Client, id string) (*treeNode, error) {
	ids, err := client.Tree(ctx, id)
	if err != nil {
		return nil, err
	}
	nodes := map[string]*treeNode{}
	parents := map[string]string{}
	for chunk := range slices.Chunk(ids, 1000) {
		for in, err := range client.List(ctx, sdk.Filter{InstanceIDs: chunk}, sdk.WithPageSize(1000)) {
			if err != nil {
				return nil, err
			}
			nodes[in.ID] = &treeNode{InstanceID: in.ID, Name: in.Name, Status: in.Status, createdAt: in.CreatedAt}
			parents[in.ID] = in.ParentID
		}
	}
	root := nodes[id]
	if root == nil {
		return nil, fmt.Errorf("instance %s: gone while its tree was read", id)
	}
	for _, tid := range ids {
		n, p := nodes[tid], nodes[parents[tid]]
		if n != nil && p != nil && tid != id {
			p.Children = append(p.Children, n)
		}
	}
	for _, n := range nodes {
		slices.SortFunc(n.Children, func(a, b *treeNode) int {
			return cmp.Or(a.createdAt.Compare(b.createdAt), strings.Compare(a.InstanceID, b.InstanceID))
		})
	}
	return root, nil
}

func instanceTreeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "tree ID",
		Short: "Print an instance with its sub-orchestrations, as a tree",
		Args:  cobra.ExactArgs(1),
		RunE: run(func(c *cli, cmd *cobra.Command, args []string) error {
			root, err := instanceTree(cmd.Context(), c.client(), args[0])
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(root)
			}
			t := c.table("INSTANCE", "NAME", "STATUS")
			var walk func(n *treeNode, prefix, branch string)
			walk = func(n *treeNode, prefix, branch string) {
				t.row(prefix+branch+n.InstanceID, n.Name, string(n.Status))
				next := prefix
				switch branch {
				case "├─ ":
					next += "│  "
				case "└─ ":
					next += "   "
				}
				for i, child := range n.Children {
					b := "├─ "
					if i == len(n.Children)-1 {
						b = "└─ "
					}
					walk(child, next, b)
				}
			}
			walk(root, "", "")
			return t.flush()
		}),
	}
}

type deleteCountsJSON struct {
	Instances     int64 `json:"instances"`
	Executions    int64 `json:"executions"`
	Events        int64 `json:"events"`
	QueueMessages int64 `json:"queueMessages"`
}

func deleteView(d sdk.DeleteCounts) deleteCountsJSON {
	return deleteCountsJSON{Instances: d.Instances, Executions: d.Executions, Events: d.Events, QueueMessages: d.QueueMessages}
}

func describeDelete(d sdk.DeleteCounts) string {
	return fmt.Sprintf("%d instances, %d executions, %d events, %d queued messages", d.Instances, d.Executions, d.Events, d.QueueMessages)
}

func instanceDeleteCommand() *cobra.Command {
	var (
		force, graceful bool
		timeout         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a root instance with its whole tree",
		Long: `delete deletes the root instance ID with its sub-orchestrations, executions,
history and queued messages, at once. Without --force it refuses (exit 4) when
an instance of the tree is running; a sub-orchestration is deleted with its
root, never alone (exit 4).

--graceful cancels the tree first, waits until it has ended (up to
--timeout), then deletes it: the janitor does it, and the command waits for
it and prints what went.`,
		Args: cobra.ExactArgs(1),
		RunE: run(func(c *cli, cmd *cobra.Command, args []string) error {
			if graceful {
				if force {
					return usageErrorf("--graceful cancels what runs: it does not take --force")
				}
				return c.deleteGracefully(cmd.Context(), args[0], timeout)
			}
			counts, err := c.client().Delete(cmd.Context(), args[0], force)
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(deleteView(counts))
			}
			_, err = fmt.Fprintf(c.out, "deleted %s: %s\n", args[0], describeDelete(counts))
			return err
		}),
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete even when instances of the tree are running")
	cmd.Flags().BoolVar(&graceful, "graceful", false, "cancel the tree, wait until it ends, then delete it")
	durationFlag(cmd.Flags(), &timeout, "timeout", "how long --graceful waits for the tree to end (default 60s)")
	return cmd
}

// deleteGracefully starts a graceful delete and waits for its operation.
func (c *cli) deleteGracefully(ctx context.Context, id string, timeout time.Duration) error {
	cl := c.client()
	opID, err := cl.DeleteGracefully(ctx, id, timeout)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.errOut, "cancelling %s, then deleting it (operation %s)\n", id, opID)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		op, err := cl.Operation(ctx, opID)
		if err != nil {
			return err
		}
		if op.Done() {
			if op.State == sdk.OperationFailed {
				return fmt.Errorf("graceful delete of %s failed: %s", id, op.Error)
			}
			if c.json {
				return c.printJSON(deleteView(op.Counts))
			}
			_, err = fmt.Fprintf(c.out, "deleted %s: %s\n", id, describeDelete(op.Counts))
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped waiting; the operation %s goes on: %w", opID, ctx.Err())
		case <-tick.C:
		}
	}
}

type pruneCountsJSON struct {
	InstancesProcessed int64 `json:"instancesProcessed"`
	InstancesPruned    int64 `json:"instancesPruned"`
	Executions         int64 `json:"executions"`
	Events             int64 `json:"events"`
}

func pruneView(c sdk.PruneCounts) pruneCountsJSON {
	return pruneCountsJSON{InstancesProcessed: c.InstancesProcessed, InstancesPruned: c.InstancesPruned, Executions: c.Executions, Events: c.Events}
}

func describePrune(c sdk.PruneCounts) string {
	return fmt.Sprintf("%d instances examined, %d pruned: %d executions, %d events", c.InstancesProcessed, c.InstancesPruned, c.Executions, c.Events)
}

func instancePruneCommand() *cobra.Command {
	var (
		keepLast        int
		completedBefore *time.Time
	)
	cmd := &cobra.Command{
		Use:   "prune ID",
		Short: "Delete old executions of a continue-as-new instance",
		Long: `prune deletes past executions of the instance ID (a continue-as-new chain):
those beyond the newest --keep-last N, and that ended before
--completed-before T (both when both are given; at least one is needed). The
current execution and running ones are never pruned.`,
		Example: `  orchard instance prune nightly --keep-last 7 --completed-before 30d`,
		Args:    cobra.ExactArgs(1),
		RunE: run(func(c *cli, cmd *cobra.Command, args []string) error {
			if keepLast == 0 && completedBefore == nil {
				return usageErrorf("give --keep-last or --completed-before (or both)")
			}
			counts, err := c.client().Prune(cmd.Context(), args[0], sdk.PruneOptions{KeepLast: keepLast, CompletedBefore: completedBefore})
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(pruneView(counts))
			}
			_, err = fmt.Fprintf(c.out, "pruned %s: %d executions, %d events\n", args[0], counts.Executions, counts.Events)
			return err
		}),
	}
	cmd.Flags().IntVar(&keepLast, "keep-last", 0, "keep the newest N executions")
	timeFlag(cmd.Flags(), &completedBefore, "completed-before", "prune only executions that ended before this")
	return cmd
}

// filterFlags are the instance filters of the instances verbs.
type filterFlags struct {
	f sdk.Filter
}

func (ff *filterFlags) register(f *pflag.FlagSet) {
	f.Var(&statusValue{&ff.f.Statuses}, "status", "only instances in this status: running, completed, failed, cancelled (repeatable)")
	f.StringVar(&ff.f.Name, "name", "", "only instances of this orchestration")
	f.StringVar(&ff.f.NamePrefix, "name-prefix", "", "only instances of an orchestration whose name starts so")
	f.StringVar(&ff.f.IDPrefix, "id-prefix", "", "only instances whose id starts so")
	timeFlag(f, &ff.f.CreatedAfter, "created-after", "only instances created at or after this")
	timeFlag(f, &ff.f.CreatedBefore, "created-before", "only instances created before this")
	timeFlag(f, &ff.f.CompletedAfter, "completed-after", "only instances that ended at or after this")
	timeFlag(f, &ff.f.CompletedBefore, "completed-before", "only instances that ended before this")
	f.Var(&tagsValue{&ff.f.Tags}, "tag", "only instances with this tag (repeatable)")
	f.BoolVar(&ff.f.RootsOnly, "roots", false, "only root instances (no parent)")
	f.StringVar(&ff.f.ParentID, "parent", "", "only the direct children of this instance")
}

// empty reports whether no filter is set.
func (ff *filterFlags) empty(cmd *cobra.Command) bool {
	for _, name := range []string{"status", "name", "name-prefix", "id-prefix", "created-after", "created-before",
		"completed-after", "completed-before", "tag", "roots", "parent"} {
		if cmd.Flags().Changed(name) {
			return false
		}
	}
	return true
}

func instancesCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "instances", Short: "List, count, delete and prune instances by filter"}
	cmd.AddCommand(instancesListCommand(), instancesCountCommand(), instancesDeleteCommand(), instancesPruneCommand())
	return cmd
}

// listing is how many instances a listing shows.
type listing struct {
	limit int
	all   bool
}

func (l *listing) register(f *pflag.FlagSet) {
	f.IntVar(&l.limit, "limit", 100, "show at most N instances")
	f.BoolVar(&l.all, "all", false, "show every matching instance (no --limit)")
}

// listInstances prints the instances matching filter, newest first, up to
// the listing's limit; it says on stderr when there are more.
func (c *cli) listInstances(ctx context.Context, filter sdk.Filter, l listing) error {
	if l.limit <= 0 && !l.all {
		return usageErrorf("--limit must be positive")
	}
	pageSize := 1000
	if !l.all {
		pageSize = min(l.limit+1, 1000)
	}
	var (
		t       *table
		n       int
		more    bool
		started bool
	)
	// The header (or the opening bracket) waits for the first page, so that
	// a failure prints only the error.
	start := func() {
		if started {
			return
		}
		started = true
		switch c.format {
		case "json":
			fmt.Fprint(c.out, "[")
		case "table":
			t = c.table("ID", "NAME", "VERSION", "STATUS", "EXECUTION", "CREATED", "COMPLETED")
		}
	}
	for in, err := range c.client().List(ctx, filter, sdk.WithPageSize(pageSize)) {
		if err != nil {
			if t != nil {
				_ = t.flush()
			}
			return err
		}
		start()
		if !l.all && n == l.limit {
			more = true
			break
		}
		if c.format == "jsonl" || c.format == "yaml" {
			if err := c.printItem(instanceView(in)); err != nil {
				return err
			}
		} else if c.json {
			b, err := json.MarshalIndent(instanceView(in), "  ", "  ")
			if err != nil {
				return err
			}
			if n > 0 {
				fmt.Fprint(c.out, ",")
			}
			fmt.Fprintf(c.out, "\n  %s", b)
		} else {
			t.row(in.ID, in.Name, in.Version, string(in.Status), strconv.FormatInt(in.CurrentExecutionID, 10), tableTime(in.CreatedAt), tableTime(in.CompletedAt))
		}
		n++
	}
	start()
	switch c.format {
	case "json":
		if n > 0 {
			fmt.Fprint(c.out, "\n")
		}
		fmt.Fprintln(c.out, "]")
	case "yaml":
		if n == 0 {
			fmt.Fprintln(c.out, "[]")
		}
	case "table":
		if err := t.flush(); err != nil {
			return err
		}
	}
	if more {
		fmt.Fprintf(c.errOut, "showing the first %d; more match (use --limit N or --all)\n", n)
	}
	return nil
}

func instancesListCommand() *cobra.Command {
	var (
		ff filterFlags
		l  listing
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the instances that match filters, newest first",
		Long: `list prints the instances matching every filter given, newest first: the first
--limit (default 100), or --all of them. Times take RFC 3339, a date, or a
duration ago ("--completed-before 30d": ended more than 30 days ago).`,
		Example: `  orchard instances list --status failed --created-after 24h
  orchard instances list --name order-fulfilment --tag team=shop --all -o json`,
		Args: cobra.NoArgs,
		RunE: run(func(c *cli, cmd *cobra.Command, _ []string) error {
			return c.listInstances(cmd.Context(), ff.f, l)
		}),
	}
	ff.register(cmd.Flags())
	l.register(cmd.Flags())
	return cmd
}

// countOrder lists the statuses an instance can have: that of its current
// execution, which is never ContinuedAsNew.
var countOrder = []sdk.Status{sdk.StatusRunning, sdk.StatusCompleted, sdk.StatusFailed, sdk.StatusCancelled}

func instancesCountCommand() *cobra.Command {
	var ff filterFlags
	cmd := &cobra.Command{
		Use:   "count",
		Short: "Count the instances that match filters, by status",
		Args:  cobra.NoArgs,
		RunE: run(func(c *cli, cmd *cobra.Command, _ []string) error {
			counts, err := c.client().Count(cmd.Context(), ff.f)
			if err != nil {
				return err
			}
			if c.json {
				byStatus := map[sdk.Status]int64{}
				for _, st := range countOrder {
					byStatus[st] = counts.ByStatus[st]
				}
				return c.printJSON(map[string]any{"total": counts.Total, "byStatus": byStatus})
			}
			t := c.table("STATUS", "COUNT")
			for _, s := range countOrder {
				t.row(string(s), strconv.FormatInt(counts.ByStatus[s], 10))
			}
			t.row("Total", strconv.FormatInt(counts.Total, 10))
			return t.flush()
		}),
	}
	ff.register(cmd.Flags())
	return cmd
}

func instancesDeleteCommand() *cobra.Command {
	var (
		ff     filterFlags
		l      listing
		all    bool
		dryRun bool
		yes    bool
		batch  int
	)
	cmd := &cobra.Command{
		Use:   "delete",
		Short: "Delete the ended root instances that match filters, with their trees",
		Long: `delete deletes every root instance that matches the filters and has ended,
each with its whole tree, in batches, printing progress to stderr. Trees with a
running instance are skipped. It needs at least one filter, or --all for every
ended instance. Interrupted, it keeps what it deleted: run it again to go on.

Before deleting it counts what matches and asks for confirmation on a
terminal; --yes confirms beforehand (scripts must give it).

--dry-run deletes nothing: it lists the ended root instances that match (as
'instances list' does: --limit, or every one with --all) and counts them on
stderr.`,
		Example: `  orchard instances delete --completed-before 30d
  orchard instances delete --completed-before now --yes
  orchard instances delete --name nightly-report --status failed --dry-run`,
		Args: cobra.NoArgs,
		RunE: run(func(c *cli, cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ff.empty(cmd) && !all {
				return usageErrorf("give at least one filter, or --all to delete every ended instance")
			}
			if dryRun {
				return c.deleteDryRun(ctx, ff.f, listing{limit: l.limit, all: all || l.all})
			}
			if !yes {
				n, err := c.countDeletable(ctx, ff.f)
				if err != nil {
					return err
				}
				if n == 0 {
					fmt.Fprintln(c.errOut, "no ended root instance matches: nothing to delete")
					return nil
				}
				if ok, err := c.confirm(fmt.Sprintf("delete %d ended root instances with their trees?", n)); !ok || err != nil {
					return err
				}
			}
			filter := ff.f
			opts := []sdk.BulkOption{sdk.WithBatchSize(batch), sdk.WithDeleteProgress(func(total sdk.DeleteCounts) {
				fmt.Fprintf(c.errOut, "deleted %s so far\n", describeDelete(total))
			})}
			if ff.empty(cmd) {
				opts = append(opts, sdk.AllInstances())
			}
			total, err := c.client().DeleteMany(ctx, sdk.DeleteSelection{Filter: &filter}, opts...)
			if err != nil {
				fmt.Fprintf(c.errOut, "stopped after deleting %s; run the command again to go on\n", describeDelete(total))
				return err
			}
			if c.json {
				return c.printJSON(deleteView(total))
			}
			_, err = fmt.Fprintf(c.out, "deleted %s\n", describeDelete(total))
			return err
		}),
	}
	ff.register(cmd.Flags())
	cmd.Flags().IntVar(&l.limit, "limit", 100, "with --dry-run: show at most N instances")
	cmd.Flags().BoolVar(&all, "all", false, "with no filter: every ended root instance; with --dry-run: show every one")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "delete nothing: list and count what would be deleted")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "delete without asking for confirmation")
	cmd.Flags().IntVar(&batch, "batch", 0, "trees deleted per call (1 to 1000; default: the server's)")
	return cmd
}

// deletableFilter narrows a bulk delete's filter to what it deletes: the
// ended root instances; false when it cannot match any.
func deletableFilter(f sdk.Filter) (sdk.Filter, bool) {
	f.RootsOnly = true
	terminal := []sdk.Status{sdk.StatusCompleted, sdk.StatusFailed, sdk.StatusCancelled}
	if len(f.Statuses) > 0 {
		terminal = slices.DeleteFunc(slices.Clone(f.Statuses), func(s sdk.Status) bool { return !s.Terminal() })
	}
	f.Statuses = terminal
	return f, len(terminal) > 0
}

// countDeletable counts the root instances a bulk delete of f would delete.
func (c *cli) countDeletable(ctx context.Context, f sdk.Filter) (int64, error) {
	f, ok := deletableFilter(f)
	if !ok {
		return 0, nil
	}
	counts, err := c.client().Count(ctx, f)
	if err != nil {
		return 0, err
	}
	return counts.Total, nil
}

// confirm asks question on a terminal and reports a yes; elsewhere it
// refuses, asking for --yes.
func (c *cli) confirm(question string) (bool, error) {
	if f, ok := c.in.(*os.File); !ok || !isTerminal(f) {
		return false, usageErrorf("would %s; not on a terminal: add --yes to confirm (or --dry-run to list them)", question[:len(question)-1])
	}
	fmt.Fprintf(c.errOut, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(c.in).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a == "y" || a == "yes" {
		return true, nil
	}
	fmt.Fprintln(c.errOut, "nothing deleted")
	return false, nil
}

// isTerminal reports whether f is a terminal (not /dev/null, a pipe or a file).
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// deleteDryRun lists and counts what a bulk delete would delete: the ended
// root instances matching the filter.
func (c *cli) deleteDryRun(ctx context.Context, f sdk.Filter, l listing) error {
	f, ok := deletableFilter(f)
	var n int64
	if ok {
		var err error
		if n, err = c.countDeletable(ctx, f); err != nil {
			return err
		}
		if err := c.listInstances(ctx, f, l); err != nil {
			return err
		}
	} else if c.json {
		fmt.Fprintln(c.out, "[]")
	}
	fmt.Fprintf(c.errOut, "dry run: %d root instances would be deleted with their trees (trees with a running instance are skipped)\n", n)
	return nil
}

func instancesPruneCommand() *cobra.Command {
	var (
		ff              filterFlags
		keepLast, batch int
		executionsEnded *time.Time
		all             bool
	)
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Delete old executions of the continue-as-new instances that match filters",
		Long: `prune deletes past executions of every instance matching the filters: those
beyond the newest --keep-last N, and that ended before --executions-ended-before T
(both when both are given; at least one is needed). The current execution and
running ones are never pruned. It needs at least one filter, or --all for every
instance. It prints how many instances it examined (those with more than one
execution) and how many lost executions, with progress on stderr.`,
		Example: `  orchard instances prune --name nightly-report --keep-last 7
  orchard instances prune --all --executions-ended-before 30d`,
		Args: cobra.NoArgs,
		RunE: run(func(c *cli, cmd *cobra.Command, _ []string) error {
			if keepLast == 0 && executionsEnded == nil {
				return usageErrorf("give --keep-last or --executions-ended-before (or both)")
			}
			if ff.empty(cmd) && !all {
				return usageErrorf("give at least one filter, or --all to prune every instance")
			}
			opts := []sdk.BulkOption{sdk.WithBatchSize(batch), sdk.WithPruneProgress(func(total sdk.PruneCounts) {
				fmt.Fprintf(c.errOut, "%s so far\n", describePrune(total))
			})}
			if ff.empty(cmd) {
				opts = append(opts, sdk.AllInstances())
			}
			total, err := c.client().PruneMany(cmd.Context(), ff.f, sdk.PruneOptions{KeepLast: keepLast, CompletedBefore: executionsEnded}, opts...)
			if err != nil {
				fmt.Fprintf(c.errOut, "stopped after %s; run the command again to go on\n", describePrune(total))
				return err
			}
			if c.json {
				return c.printJSON(pruneView(total))
			}
			_, err = fmt.Fprintf(c.out, "%s\n", describePrune(total))
			return err
		}),
	}
	ff.register(cmd.Flags())
	cmd.Flags().IntVar(&keepLast, "keep-last", 0, "keep the newest N executions of each instance")
	timeFlag(cmd.Flags(), &executionsEnded, "executions-ended-before", "prune only executions that ended before this")
	cmd.Flags().BoolVar(&all, "all", false, "with no filter: every instance")
	cmd.Flags().IntVar(&batch, "batch", 0, "instances examined per call (1 to 1000; default: the server's)")
	return cmd
}
