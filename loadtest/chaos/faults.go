package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/orchardhq/orchard/loadtest"
	"github.com/orchardhq/orchard/loadtest/procs"
)

// FaultKind is a kind of fault the campaign injects.
type FaultKind string

// The faults.
const (
	// FaultDispatcherKill: kill -9 of one dispatcher, restarted after the restart delay.
	FaultDispatcherKill FaultKind = "dispatcher-kill"
	// FaultAPIKill: kill -9 of the API, restarted after the restart delay.
	FaultAPIKill FaultKind = "api-kill"
	// FaultWorkerKill: kill -9 of one SDK worker, restarted after the restart delay.
	FaultWorkerKill FaultKind = "worker-kill"
	// FaultDBRestart: PostgreSQL stopped (fast shutdown: sessions are
	// ended with 57P01) and started again on the same data and port.
	FaultDBRestart FaultKind = "db-restart"
	// FaultDBCut: every connection to the database cut, and new ones
	// refused for the cut duration.
	FaultDBCut FaultKind = "db-cut"
	// FaultDBLatency: latency added to the database connections (each
	// way) for the latency duration.
	FaultDBLatency FaultKind = "db-latency"
)

// FaultKinds are the faults, in the order a campaign cycles through them
// by default.
var FaultKinds = []FaultKind{FaultDispatcherKill, FaultDBRestart, FaultAPIKill, FaultDBCut, FaultWorkerKill, FaultDBLatency}

// ParseFaults reads a comma-separated list of fault kinds.
func ParseFaults(s string) ([]FaultKind, error) {
	var out []FaultKind
	for name := range strings.SplitSeq(s, ",") {
		k := FaultKind(strings.TrimSpace(name))
		if !slices.Contains(FaultKinds, k) {
			return nil, fmt.Errorf("fault %q: not one of %v", name, FaultKinds)
		}
		out = append(out, k)
	}
	return out, nil
}

// Fault is one fault injected.
type Fault struct {
	Kind FaultKind `json:"kind"`
	// Target names the process hit, for kills.
	Target string `json:"target,omitempty"`
	// At is when the fault began; End when it was over: the process
	// started again, the database accepting connections again, the proxy
	// restored.
	At  time.Time `json:"at"`
	End time.Time `json:"end"`
	// Recovery is the longest a turn due around the fault waited past At
	// (see Report); nil when no turn was due then.
	Recovery *Seconds `json:"recovery_s,omitempty"`
	// Error says why the fault could not be injected or undone.
	Error string `json:"error,omitempty"`
}

// schedule is when each fault of a campaign starts, from its start: the
// first after settle, then one every interval, cycling through kinds, as
// long as a fault can end (its longest: budget) before the load does.
func schedule(kinds []FaultKind, settle, interval, budget, load time.Duration) []time.Duration {
	var out []time.Duration
	if len(kinds) == 0 || interval <= 0 {
		return nil
	}
	for at := settle; at+budget <= load; at += interval {
		out = append(out, at)
	}
	return out
}

// injector injects faults into a running campaign.
type injector struct {
	c   *campaign
	rng *rand.Rand
}

// inject injects one fault and undoes it; it returns when the fault is over.
func (in *injector) inject(ctx context.Context, kind FaultKind) Fault {
	f := Fault{Kind: kind, At: time.Now()}
	fail := func(err error) Fault {
		f.End, f.Error = time.Now(), err.Error()
		return f
	}
	cfg := in.c.cfg
	switch kind {
	case FaultDispatcherKill, FaultAPIKill, FaultWorkerKill:
		procs := map[FaultKind][]*procs.Process{
			FaultDispatcherKill: in.c.dispatchers, FaultAPIKill: {in.c.api}, FaultWorkerKill: in.c.workers,
		}[kind]
		if len(procs) == 0 {
			return fail(errNoProcess)
		}
		p := procs[in.rng.IntN(len(procs))]
		f.Target = p.Name
		f.At = time.Now()
		p.Kill(syscall.SIGKILL, time.Minute)
		if !loadtest.Sleep(ctx, cfg.RestartDelay) {
			return fail(ctx.Err())
		}
		if err := p.Start(); err != nil {
			return fail(err)
		}
	case FaultDBRestart:
		if err := in.c.db.restart(ctx); err != nil {
			return fail(err)
		}
	case FaultDBCut:
		in.c.proxy.cut()
		if !loadtest.Sleep(ctx, cfg.CutDuration) {
			return fail(ctx.Err())
		}
		if err := in.c.proxy.restore(); err != nil {
			return fail(err)
		}
	case FaultDBLatency:
		if err := in.c.proxy.addLatency(int(cfg.Latency.Milliseconds()), int(cfg.Latency.Milliseconds()/4)); err != nil {
			return fail(err)
		}
		loadtest.Sleep(ctx, cfg.LatencyDuration)
		if err := in.c.proxy.removeLatency(); err != nil {
			return fail(err)
		}
	}
	f.End = time.Now()
	return f
}

// errNoProcess: a fault aimed at a kind of process the campaign runs none of.
var errNoProcess = errors.New("no such process")
