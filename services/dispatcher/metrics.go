package dispatcher

import (
	"go.opentelemetry.io/otel/metric"
)

// Metrics are the dispatcher's instruments. One set per process: several
// dispatchers of a process share it.
type Metrics struct {
	turns          metric.Int64Counter
	turnSeconds    metric.Float64Histogram
	leaseLosses    metric.Int64Counter
	emptyPolls     metric.Int64Counter
	backlogSeconds metric.Float64Histogram
}

// NewMetrics creates the dispatcher's instruments on a meter provider.
func NewMetrics(mp metric.MeterProvider) (*Metrics, error) {
	m := mp.Meter("github.com/orchardhq/orchard/services/dispatcher")
	var ms Metrics
	var err error
	if ms.turns, err = m.Int64Counter("orchard.dispatcher.turns",
		metric.WithDescription("Orchestration turns, by outcome (the execution's status after the turn, lease_lost, abandoned, or void: a turn run before its eager write, which leased nothing, found the instance changed, or failed).")); err != nil {
		return nil, err
	}
	if ms.turnSeconds, err = m.Float64Histogram("orchard.dispatcher.turn.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a turn's fetch to its ack."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)); err != nil {
		return nil, err
	}
	if ms.leaseLosses, err = m.Int64Counter("orchard.dispatcher.lease_losses",
		metric.WithDescription("Turns dropped because their lease was lost (expired, taken over, or the instance deleted).")); err != nil {
		return nil, err
	}
	if ms.emptyPolls, err = m.Int64Counter("orchard.dispatcher.empty_polls",
		metric.WithDescription("Fetches that found no work.")); err != nil {
		return nil, err
	}
	if ms.backlogSeconds, err = m.Float64Histogram("orchard.dispatcher.backlog_age", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest message of a fetched instance had been visible."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300)); err != nil {
		return nil, err
	}
	return &ms, nil
}
