package sdk

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	orchardv1 "github.com/orchardhq/orchard/proto/orchard/v1"
)

// Every value of the proto enum (but UNSPECIFIED) is a Status and back: a
// value added to the proto fails here until the table has it. A value the
// SDK does not know reads as Unknown(n), never as another status.
func TestStatusTableCoversTheProtoEnum(t *testing.T) {
	t.Parallel()
	values := orchardv1.InstanceStatus(0).Descriptor().Values()
	known := map[Status]bool{}
	for i := range values.Len() {
		p := orchardv1.InstanceStatus(values.Get(i).Number())
		if p == orchardv1.InstanceStatus_INSTANCE_STATUS_UNSPECIFIED {
			continue
		}
		s, ok := statusFromProtoMap[p]
		require.True(t, ok, "proto status %s has no Status", p)
		require.Equal(t, p, statusToProto[s], "%s does not map back", p)
		require.False(t, known[s], "two proto values map to %s", s)
		known[s] = true
	}
	require.Len(t, statuses, values.Len()-1)
	require.Len(t, statusToProto, len(statuses))
	require.Equal(t, Status("Unknown(99)"), statusFromProto(99))
	require.Equal(t, Status("Unknown(0)"), statusFromProto(orchardv1.InstanceStatus_INSTANCE_STATUS_UNSPECIFIED))
}

// Every field of StatusCounts lands in ByStatus under its own status.
func TestUsageCountsEveryStatus(t *testing.T) {
	t.Parallel()
	counts := &orchardv1.StatusCounts{}
	m := counts.ProtoReflect()
	fields := m.Descriptor().Fields()
	var total int64
	for i := range fields.Len() {
		n := int64(1) << (i * 4)
		m.Set(fields.Get(i), protoreflect.ValueOfInt64(n))
		total += n
	}
	u := usageFromProto(&orchardv1.Usage{Instances: counts})
	require.Len(t, u.Instances.ByStatus, fields.Len(), "one status per field")
	require.Equal(t, total, u.Instances.Total)
	seen := map[int64]Status{}
	for s, n := range u.Instances.ByStatus {
		require.NotZero(t, n, "status %s gets no field", s)
		require.NotContains(t, seen, n, "statuses %s and %s read one field", seen[n], s)
		seen[n] = s
	}
}
