package dispatcher

import (
	"context"

	"github.com/orchardhq/orchard/pkg/store"
)

// SetBeforeAck installs a hook that runs between a batch's turns (and its
// hand-overs of tasks) and its ack.
// Set it before Start.
func (d *Dispatcher) SetBeforeAck(f func(ctx context.Context, items []*store.OrchestrationItem)) {
	d.beforeAck = f
}
