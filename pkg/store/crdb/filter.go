package crdb

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/orchardhq/orchard/pkg/store"
)

// query accumulates the conditions and named arguments of a statement
// built at run time from a filter: the listings, counts and bulk
// operations whose WHERE clause depends on which criteria a filter sets.
// Every other statement is whole, in sql/*.sql. The shapes the builder makes are
// written out in testdata/filter_shapes.sql (TestFilterShapes keeps it
// current and runs each one).
type query struct {
	conds []string
	args  namedArgs
	// byTag says the statement reads instances by their driving tag
	// (instance_tags g joined to instances i), so that the filter need not
	// look the tag up again.
	byTag bool
}

// arg binds a value to a name and returns its placeholder (@name). A name
// bound again must be bound to the same value: two criteria that happen to
// pick one name for different values would otherwise silently share one.
func (q *query) arg(name string, v any) string {
	if q.args == nil {
		q.args = namedArgs{}
	}
	if old, ok := q.args[name]; ok && !reflect.DeepEqual(old, v) {
		panic(fmt.Sprintf("crdb: parameter @%s bound to %#v and to %#v", name, old, v))
	}
	q.args[name] = v
	return "@" + name
}

func (q *query) where(format string, args ...any) {
	q.conds = append(q.conds, fmt.Sprintf(format, args...))
}

// whereSQL is the conditions, one a line; true when there is none.
func (q *query) whereSQL() string {
	if len(q.conds) == 0 {
		return "true"
	}
	return strings.Join(q.conds, "\n\tAND ")
}

// likePrefix is a LIKE pattern matching strings that start with prefix.
func likePrefix(prefix string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(prefix) + "%"
}

// prefixRange adds the conditions of a prefix on a column: a range
// [prefix, prefixEnd) that an index scans, and the LIKE that says exactly
// what matches. The range holds exactly the strings that start with prefix
// when strings compare byte by byte, as they do on CockroachDB and on a
// PostgreSQL database with the C collation (which testdb and orchard dev
// create).
// Its parameters are named after param: @param, @param_like, @param_end.
func prefixRange(q *query, col, param, prefix string) {
	q.where(`%s LIKE %s ESCAPE '\'`, col, q.arg(param+"_like", likePrefix(prefix)))
	q.where("%s >= %s", col, q.arg(param, prefix))
	if end, ok := prefixEnd(prefix); ok {
		q.where("%s < %s", col, q.arg(param+"_end", end))
	}
}

// prefixEnd returns the least string above every string that starts with
// prefix, in byte order: the prefix with its last code point incremented
// (UTF-8 byte order is code point order). ok is false when nothing bounds
// them (a prefix of U+10FFFF only).
func prefixEnd(prefix string) (end string, ok bool) {
	rs := []rune(prefix)
	for len(rs) > 0 {
		last := rs[len(rs)-1]
		switch last {
		case utf8.MaxRune:
			rs = rs[:len(rs)-1]
			continue
		case 0xD7FF: // the next code point after the surrogates
			rs[len(rs)-1] = 0xE000
		default:
			rs[len(rs)-1] = last + 1
		}
		return string(rs), true
	}
	return "", false
}

// validateFilter rejects filters that cannot mean anything.
func validateFilter(f *store.InstanceFilter) error {
	if len(f.InstanceIDs) > store.MaxFilterIDs {
		return invalid("at most %d instance ids in a filter, got %d", store.MaxFilterIDs, len(f.InstanceIDs))
	}
	for _, text := range []string{f.Name, f.NamePrefix, f.IDPrefix} {
		if !utf8.ValidString(text) || strings.ContainsRune(text, 0) {
			return invalid("name and prefixes must be UTF-8 text without NUL, got %q", text)
		}
	}
	for _, st := range f.Statuses {
		if !st.Valid() || st == store.StatusContinuedAsNew {
			return invalid("no instance has status %q", st)
		}
	}
	for _, r := range [][2]*time.Time{
		{f.CreatedAfter, f.CreatedBefore}, {f.UpdatedAfter, f.UpdatedBefore}, {f.CompletedAfter, f.CompletedBefore},
	} {
		if r[0] != nil && r[1] != nil && !r[0].Before(*r[1]) {
			return invalid("empty time range: %s is not before %s", r[0].Format(time.RFC3339Nano), r[1].Format(time.RFC3339Nano))
		}
	}
	return nil
}

// filterInstances adds the conditions of a filter on instances aliased i.
// Instances being deleted are never listed or counted; the bulk delete
// includes them, to finish what an interrupted delete began.
func filterInstances(q *query, tenantID string, f *store.InstanceFilter, withDeleting bool) {
	tenant := q.arg("tenant_id", tenantID)
	q.where("i.tenant_id = %s", tenant)
	if !withDeleting {
		q.where("NOT i.deleting")
	}
	if f.InstanceIDs != nil {
		q.where("i.instance_id = ANY(%s::TEXT[])", q.arg("instance_ids", f.InstanceIDs))
	}
	switch len(f.Statuses) {
	case 0:
	case 1:
		// Equality, not = ANY: then the scan of (tenant, status, created)
		// comes out in creation order and stops at the page.
		q.where("i.status = %s", q.arg("status", string(f.Statuses[0])))
	default:
		q.where("i.status = ANY(%s::TEXT[])", q.arg("statuses", statusStrings(f.Statuses)))
	}
	if f.Name != "" {
		q.where("i.name = %s", q.arg("name", f.Name))
	}
	if f.NamePrefix != "" {
		prefixRange(q, "i.name", "name_prefix", f.NamePrefix)
	}
	if f.IDPrefix != "" {
		prefixRange(q, "i.instance_id", "id_prefix", f.IDPrefix)
	}
	timeRange := func(event string, after, before *time.Time) {
		if after != nil {
			q.where("i.%s_at >= %s", event, q.arg(event+"_after", after.UnixMilli()))
		}
		if before != nil {
			q.where("i.%s_at < %s", event, q.arg(event+"_before", before.UnixMilli()))
		}
	}
	timeRange("created", f.CreatedAfter, f.CreatedBefore)
	timeRange("updated", f.UpdatedAfter, f.UpdatedBefore)
	timeRange("completed", f.CompletedAfter, f.CompletedBefore)
	// An instance is created before it is updated or completed: bounding
	// created_at too lets the planner start the created-order scan at the
	// cutoff instead of discarding everything newer.
	if before := earliest(f.UpdatedBefore, f.CompletedBefore); before != nil {
		q.where("i.created_at < %s", q.arg("created_before_bound", before.UnixMilli()))
	}
	if key, value, ok := drivingTag(f); ok {
		// The driving tag through instance_tags (which the caller may
		// already read by it), the others on the instance.
		if !q.byTag {
			q.where(`i.instance_id IN (SELECT g.instance_id FROM instance_tags g
	WHERE g.tenant_id = %s AND g.tag_key = %s AND g.tag_value = %s)`, tenant, q.arg("tag_key", key), q.arg("tag_value", value))
		}
		others := maps.Clone(f.Tags)
		delete(others, key)
		if len(others) > 0 {
			tags, _ := json.Marshal(others)
			q.where("i.tags @> %s::JSONB", q.arg("other_tags", string(tags)))
		}
	}
	if f.RootsOnly {
		q.where("i.parent_instance_id IS NULL")
	}
	if f.ParentInstanceID != "" {
		q.where("i.parent_instance_id = %s", q.arg("parent_instance_id", f.ParentInstanceID))
	}
}

// drivingTag is the tag of a filter by which instance_tags finds the
// candidates (the others are checked on instances.tags): the first key.
func drivingTag(f *store.InstanceFilter) (key, value string, ok bool) {
	if len(f.Tags) == 0 {
		return "", "", false
	}
	key = slices.Min(slices.Collect(maps.Keys(f.Tags)))
	return key, f.Tags[key], true
}

func statusStrings(statuses []store.Status) []string {
	out := make([]string, len(statuses))
	for i, st := range statuses {
		out[i] = string(st)
	}
	return out
}

// orderColumn returns the column and direction of an order.
func orderColumn(o store.Order) (col string, desc bool, err error) {
	switch o {
	case "", store.OrderCreatedDesc:
		return "created_at", true, nil
	case store.OrderCreatedAsc:
		return "created_at", false, nil
	case store.OrderUpdatedDesc:
		return "updated_at", true, nil
	case store.OrderUpdatedAsc:
		return "updated_at", false, nil
	}
	return "", false, invalid("unknown order %q", o)
}

// earliest returns the earlier of the times that are set, or nil.
func earliest(a, b *time.Time) *time.Time {
	switch {
	case a == nil:
		return b
	case b == nil || a.Before(*b):
		return a
	}
	return b
}

// millisOrNull is t in milliseconds since the epoch, or NULL when t is nil.
func millisOrNull(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	ms := t.UnixMilli()
	return &ms
}
