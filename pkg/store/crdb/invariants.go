package crdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// invariants are the rules of sql/invariants.sql, in the order they run.
var invariants = []struct{ name, sql string }{
	{"InvariantCounts", stmt("InvariantCounts")},
	{"InvariantPrunable", stmt("InvariantPrunable")},
	{"InvariantInstanceSummary", stmt("InvariantInstanceSummary")},
	{"InvariantExecutionSummary", stmt("InvariantExecutionSummary")},
	{"InvariantDue", stmt("InvariantDue")},
	{"InvariantTags", stmt("InvariantTags")},
	{"InvariantOwners", stmt("InvariantOwners")},
}

// maxViolationsShown bounds the rows of one rule an error lists.
const maxViolationsShown = 10

// CheckInvariants checks the rules that every writer of the derived tables
// keeps (status counters, prunable instances, due times, tags, owners of
// every row; sql/invariants.sql says each) across all tenants, and
// returns an error naming each rule broken with the rows that break it.
// It reads whole tables: for tests (storetest runs it after every case)
// and for an operator's consistency check on a quiet database, never for a
// hot path. On a busy database it may report a write caught between its
// statements.
func (s *Store) CheckInvariants(ctx context.Context) error {
	var errs []error
	for _, inv := range invariants {
		rows, err := s.pool.Query(ctx, inv.sql)
		if err != nil {
			return fmt.Errorf("%s: %w", inv.name, err)
		}
		fields := rows.FieldDescriptions()
		var shown []string
		n := 0
		for rows.Next() {
			n++
			if len(shown) == maxViolationsShown {
				continue
			}
			values, err := rows.Values()
			if err != nil {
				rows.Close()
				return fmt.Errorf("%s: %w", inv.name, err)
			}
			cols := make([]string, len(values))
			for i, v := range values {
				cols[i] = fmt.Sprintf("%s=%v", fields[i].Name, v)
			}
			shown = append(shown, strings.Join(cols, " "))
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("%s: %w", inv.name, err)
		}
		if n > 0 {
			errs = append(errs, fmt.Errorf("%s: %d rows break it:\n\t%s", inv.name, n, strings.Join(shown, "\n\t")))
		}
	}
	return errors.Join(errs...)
}
