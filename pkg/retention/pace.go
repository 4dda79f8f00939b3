package retention

import (
	"context"
	"sync"
	"time"
)

// Pacer keeps retention in the background of a database it shares with the
// tenants' orchestrations. It is a delay-based controller in the manner of
// LEDBAT (RFC 6817), a transport that uses spare capacity and yields to
// everything else: each batch's time per row is compared with the lowest
// time per row seen lately (what a batch costs on an otherwise quiet
// database). While batches run near that base, the share of time spent
// deleting (the duty) grows step by step up to its ceiling; when a batch runs
// markedly slower, others are using the database, and the duty is halved.
//
// The duty is the share of time of the process's retention work as a
// whole, as if it had one backend, however many workers and concurrent
// deletes run: a batch that took d books d/duty of a timeline the workers
// share, and a worker starts its next batch when the timeline has passed
// what is booked. Alone, a worker rests d*(1-duty)/duty after each batch;
// two that run side by side rest twice as long. (Per worker, each at the
// duty, k workers would together take k times the share the pacer judged
// the database could spare.)
//
// One Pacer serves every retention worker of a process, so the base, the
// duty and the timeline survive from job to job.
type Pacer struct {
	maxDuty float64
	now     func() time.Time

	mu   sync.Mutex
	duty float64
	// minima holds the lowest seconds per row of each of the last
	// len(minima) minutes, the newest at index minute%len; the base is
	// their minimum, so it follows a database whose quiet cost changes
	// (data grown, caches cold) within those minutes and no faster.
	minima [baseMinutes]float64
	minute int64 // the minute minima[minute%baseMinutes] holds
	// booked is where the timeline's bookings end: no batch starts before.
	booked time.Time
}

const (
	// baseMinutes is how long a low time per row counts as the base.
	baseMinutes = 10
	// slowdown is how much slower than the base a batch may run before
	// the pacer yields: 1.5, half as slow again.
	slowdown = 1.5
	// minDuty keeps retention moving however busy the database is: one
	// part in five of a worker's time, so a platform that is always busy
	// still deletes at a fifth of the speed and its backlog cannot grow
	// without bound.
	minDuty = 0.2
	// dutyStep is how much the duty grows after a batch near the base.
	dutyStep = 0.05
)

// NewPacer returns a pacer whose duty never exceeds maxDuty (0 < maxDuty
// <= 1; 1 lets retention run flat out on a quiet database). It starts at
// half the ceiling until it has seen what a batch costs.
func NewPacer(maxDuty float64) *Pacer {
	maxDuty = min(max(maxDuty, minDuty), 1)
	return &Pacer{maxDuty: maxDuty, duty: max(maxDuty/2, minDuty), now: time.Now}
}

// Duty is the share of time the workers currently spend deleting.
func (p *Pacer) Duty() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.duty
}

// observe records a batch of rows that took d and ended now, and returns
// how long its worker rests before the next.
func (p *Pacer) observe(d time.Duration, rows int64) time.Duration {
	if rows <= 0 || d <= 0 {
		return 0
	}
	perRow := d.Seconds() / float64(rows)
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	minute := now.Unix() / 60
	if minute-p.minute >= baseMinutes {
		p.minima, p.minute = [baseMinutes]float64{}, minute
	}
	for ; p.minute < minute; p.minute++ {
		p.minima[(p.minute+1)%baseMinutes] = 0
	}
	slot := &p.minima[minute%baseMinutes]
	if *slot == 0 || perRow < *slot {
		*slot = perRow
	}
	base := perRow
	for _, m := range p.minima {
		if m > 0 && m < base {
			base = m
		}
	}
	if perRow > base*slowdown {
		p.duty = max(p.duty/2, minDuty)
	} else {
		p.duty = min(p.duty+dutyStep, p.maxDuty)
	}
	if p.duty >= 1 {
		p.booked = now
		return 0
	}
	// Booked from the batch's start, or from the end of what others
	// booked before it if that is later.
	start := now.Add(-d)
	if p.booked.After(start) {
		start = p.booked
	}
	p.booked = start.Add(time.Duration(float64(d) / p.duty))
	return p.booked.Sub(now)
}

// rest makes the worker that ran a batch wait as the pacer says; it returns
// early when ctx ends. A nil pacer never waits.
func (p *Pacer) rest(ctx context.Context, d time.Duration, rows int64) {
	if p == nil {
		return
	}
	wait := p.observe(d, rows)
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
