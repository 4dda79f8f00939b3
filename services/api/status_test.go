package api

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/orchardhq/orchard/pkg/store"
	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
)

// Every value of the proto enum (but UNSPECIFIED) is one store status and
// back, and every store status has its value: a value added to the proto,
// or a status added to the store, fails here until the table has it.
func TestStatusTableCoversTheProtoEnum(t *testing.T) {
	t.Parallel()
	values := orchardv1.InstanceStatus(0).Descriptor().Values()
	for i := range values.Len() {
		p := orchardv1.InstanceStatus(values.Get(i).Number())
		if p == orchardv1.InstanceStatus_INSTANCE_STATUS_UNSPECIFIED {
			require.NotContains(t, statusFromProto, p)
			continue
		}
		s, ok := statusFromProto[p]
		require.True(t, ok, "proto status %s has no store status", p)
		require.True(t, s.Valid(), "proto status %s maps to unknown store status %q", p, s)
		require.Equal(t, p, statusToProto[s], "%s does not map back", p)
	}
	require.Len(t, statusFromProto, values.Len()-1)
	for _, s := range store.Statuses() {
		p, ok := statusToProto[s]
		require.True(t, ok, "store status %s has no proto value", s)
		require.Equal(t, s, statusFromProto[p])
	}
	require.Len(t, statusToProto, len(store.Statuses()))
}

// Every store status lands in its own field of StatusCounts, and every
// field holds one status.
func TestStatusCountsCoverEveryStatus(t *testing.T) {
	t.Parallel()
	by := map[store.Status]int64{}
	var total int64
	for i, s := range store.Statuses() {
		by[s] = int64(1) << (i * 4) // distinct, so a swapped field shows
		total += by[s]
	}
	counts := statusCounts(by).ProtoReflect()
	fields := counts.Descriptor().Fields()
	require.Equal(t, len(store.Statuses()), fields.Len(), "one field per status")
	var sum int64
	seen := map[int64]protoreflect.Name{}
	for i := range fields.Len() {
		f := fields.Get(i)
		n := counts.Get(f).Int()
		require.NotZero(t, n, "field %s counts no status", f.Name())
		require.NotContains(t, seen, n, "fields %s and %s count the same status", seen[n], f.Name())
		seen[n] = f.Name()
		sum += n
	}
	require.Equal(t, total, sum)
}
