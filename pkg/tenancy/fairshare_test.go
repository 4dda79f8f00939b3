package tenancy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orchardhq/orchard/pkg/tenancy"
)

// noBytesBound is a bound on waiting bytes that the tests' calls never reach.
const noBytesBound = 1 << 40

// acquirer runs FairShare.Acquire calls in goroutines and reports, in the
// order they were granted, the tenant of each.
type acquirer struct {
	t        *testing.T
	f        *tenancy.FairShare
	granted  chan string
	releases map[string][]func()
}

func newAcquirer(t *testing.T, f *tenancy.FairShare) *acquirer {
	return &acquirer{t: t, f: f, granted: make(chan string, 64), releases: map[string][]func(){}}
}

// hold takes a slot at once.
func (a *acquirer) hold(tenant string) {
	a.t.Helper()
	release, err := a.f.Acquire(a.t.Context(), tenant, 1)
	require.NoError(a.t, err)
	a.releases[tenant] = append(a.releases[tenant], release)
}

// queue starts a call that must wait, and returns once it waits.
func (a *acquirer) queue(tenant string) { a.queueSized(tenant, 1) }

// queueSized queues a call whose request is size bytes.
func (a *acquirer) queueSized(tenant string, size int64) {
	a.t.Helper()
	before := a.f.Waiting(tenant)
	releases := make(chan func(), 1)
	go func() {
		release, err := a.f.Acquire(a.t.Context(), tenant, size)
		if err != nil {
			return
		}
		releases <- release
		a.granted <- tenant
	}()
	require.Eventually(a.t, func() bool { return a.f.Waiting(tenant) == before+1 }, 10*time.Second, time.Millisecond)
	a.releases[tenant+"-queued"] = append(a.releases[tenant+"-queued"], func() { (<-releases)() })
}

// waitCancellable starts a call of size bytes that must wait, returns once
// it waits, and gives back the cancellation of its context and the channel
// its error comes on.
func (a *acquirer) waitCancellable(tenant string, size int64) (context.CancelFunc, <-chan error) {
	a.t.Helper()
	before := a.f.Waiting(tenant)
	ctx, cancel := context.WithCancel(a.t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := a.f.Acquire(ctx, tenant, size)
		done <- err
	}()
	require.Eventually(a.t, func() bool { return a.f.Waiting(tenant) == before+1 }, 10*time.Second, time.Millisecond)
	return cancel, done
}

// next is the tenant of the next call granted.
func (a *acquirer) next() string {
	a.t.Helper()
	select {
	case tenant := <-a.granted:
		return tenant
	case <-time.After(10 * time.Second):
		a.t.Fatal("no call was granted a slot")
		return ""
	}
}

// release gives back the first slot tenant took (held, or queued and
// granted).
func (a *acquirer) release(key string) {
	a.t.Helper()
	require.NotEmpty(a.t, a.releases[key], key)
	r := a.releases[key][0]
	a.releases[key] = a.releases[key][1:]
	r()
}

// TestFairShareGivesAFreedSlotToTheTenantWithFewestInFlight: a quiet
// tenant's call that waits behind a busy tenant's three gets the next slot
// freed; the busy tenant's waiting calls get the ones after, oldest first.
func TestFairShareGivesAFreedSlotToTheTenantWithFewestInFlight(t *testing.T) {
	t.Parallel()
	f := tenancy.NewFairShare(2, 10, noBytesBound)
	a := newAcquirer(t, f)
	a.hold("busy")
	a.hold("busy")
	require.Equal(t, 2, f.InFlight())
	for range 3 {
		a.queue("busy")
	}
	a.queue("quiet")

	a.release("busy")
	require.Equal(t, "quiet", a.next(), "the tenant with none in flight first")
	require.Equal(t, 3, f.Waiting("busy"))
	a.release("busy")
	require.Equal(t, "busy", a.next())
	a.release("quiet-queued")
	require.Equal(t, "busy", a.next())
	require.Equal(t, 1, f.Waiting("busy"))
	require.Equal(t, 2, f.InFlight(), "never more than the limit")
}

// TestFairShareServesTiedTenantsInTurn: with as many in flight, the tenant
// served least recently goes first, whatever the order the calls came in.
func TestFairShareServesTiedTenantsInTurn(t *testing.T) {
	t.Parallel()
	f := tenancy.NewFairShare(1, 10, noBytesBound)
	a := newAcquirer(t, f)
	a.hold("a")
	a.queue("a")
	a.queue("a")
	a.queue("b")
	a.release("a")
	require.Equal(t, "b", a.next())
	a.release("b-queued")
	require.Equal(t, "a", a.next())
}

// TestFairShareAloneUsesEverySlot: with no one waiting there is no share:
// one tenant may take every slot.
func TestFairShareAloneUsesEverySlot(t *testing.T) {
	t.Parallel()
	f := tenancy.NewFairShare(3, 1, noBytesBound)
	a := newAcquirer(t, f)
	for range 3 {
		a.hold("only")
	}
	require.Equal(t, 3, f.InFlight())
}

// TestFairShareBoundsWaitingCalls: a tenant's calls beyond maxWaiting are
// refused at once, with a retry hint; another tenant still waits its turn.
func TestFairShareBoundsWaitingCalls(t *testing.T) {
	t.Parallel()
	f := tenancy.NewFairShare(1, 2, noBytesBound)
	a := newAcquirer(t, f)
	a.hold("busy")
	a.queue("busy")
	a.queue("busy")
	_, err := f.Acquire(t.Context(), "busy", 1)
	var exhausted *tenancy.ExhaustedError
	require.ErrorAs(t, err, &exhausted)
	require.ErrorIs(t, err, tenancy.ErrResourceExhausted)
	require.Equal(t, tenancy.ResourceCallsInFlight, exhausted.Resource)
	require.EqualValues(t, 2, exhausted.Limit)
	require.Positive(t, exhausted.RetryAfter)
	a.queue("quiet")
	a.release("busy")
	require.Equal(t, "quiet", a.next())
}

// TestFairShareBoundsWaitingBytes: a tenant's calls wait while their
// requests' bytes stay within the bound; one that would pass it is refused
// at once, naming call_bytes_waiting. A call alone may wait whatever its
// size, and the bytes of a call granted or given up are the tenant's again.
func TestFairShareBoundsWaitingBytes(t *testing.T) {
	t.Parallel()
	f := tenancy.NewFairShare(1, 10, 100)
	a := newAcquirer(t, f)
	a.hold("busy")
	a.queueSized("busy", 60)
	_, err := f.Acquire(t.Context(), "busy", 50)
	var exhausted *tenancy.ExhaustedError
	require.ErrorAs(t, err, &exhausted)
	require.Equal(t, tenancy.ResourceCallBytesWaiting, exhausted.Resource)
	require.EqualValues(t, 100, exhausted.Limit)
	require.Positive(t, exhausted.RetryAfter)
	// A call that gives up waiting gives its bytes back.
	cancel, gaveUp := a.waitCancellable("busy", 40)
	cancel()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	a.queueSized("busy", 40)
	// Another tenant's bytes are its own; alone, a call larger than the
	// bound waits.
	a.queueSized("big", 1000)

	a.release("busy")
	granted := a.next()
	require.Contains(t, []string{"busy", "big"}, granted)
	// busy's 60-byte call, once granted, no longer counts against it.
	for granted != "busy" {
		a.release(granted + "-queued")
		granted = a.next()
	}
	a.queueSized("busy", 60)
}

// TestFairShareWaitEndsWithItsContext: a call whose context ends stops
// waiting and takes no slot; the slot goes to the next call.
func TestFairShareWaitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	f := tenancy.NewFairShare(1, 10, noBytesBound)
	a := newAcquirer(t, f)
	a.hold("busy")
	cancel, done := a.waitCancellable("gone", 1)
	a.queue("busy")
	cancel()
	require.True(t, errors.Is(<-done, context.Canceled))
	require.Zero(t, f.Waiting("gone"))
	a.release("busy")
	require.Equal(t, "busy", a.next())
	require.Equal(t, 1, f.InFlight())
}
