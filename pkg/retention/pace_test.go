package retention

import (
	"context"
	"testing"
	"time"
)

// testPacer returns a pacer whose clock the test moves.
func testPacer(maxDuty float64) (*Pacer, *time.Time) {
	p := NewPacer(maxDuty)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p.now = func() time.Time { return now }
	return p, &now
}

// batch runs one worker's batch of rows that takes d on the test clock,
// then its rest, and returns the rest.
func batch(p *Pacer, now *time.Time, d time.Duration, rows int64) time.Duration {
	*now = now.Add(d)
	rest := p.observe(d, rows)
	*now = now.Add(rest)
	return rest
}

func TestPacerRunsFlatOutWhileBatchesCostWhatTheyDoOnAQuietDatabase(t *testing.T) {
	p, now := testPacer(1)
	var rest time.Duration
	for range 20 {
		rest = batch(p, now, 100*time.Millisecond, 1000)
	}
	if p.Duty() != 1 || rest != 0 {
		t.Fatalf("after steady batches: duty %v, rest %v; want 1 and no rest", p.Duty(), rest)
	}
}

func TestPacerYieldsWhenBatchesSlowDownAndComesBack(t *testing.T) {
	p, now := testPacer(1)
	for range 20 {
		batch(p, now, 100*time.Millisecond, 1000)
	}
	// The database is busy: the same rows take three times as long.
	rest := batch(p, now, 300*time.Millisecond, 1000)
	if p.Duty() != 0.5 || rest != 300*time.Millisecond {
		t.Fatalf("after one slow batch: duty %v, rest %v; want 0.5 and 300ms", p.Duty(), rest)
	}
	for range 10 {
		batch(p, now, 300*time.Millisecond, 1000)
	}
	if p.Duty() != minDuty {
		t.Fatalf("while the database stays busy the duty falls to its floor %v, got %v", minDuty, p.Duty())
	}
	if rest := batch(p, now, 300*time.Millisecond, 1000); rest != 4*300*time.Millisecond {
		t.Fatalf("at the floor a worker rests 4 times its batch, got %v", rest)
	}
	// Quiet again: the duty grows back step by step.
	batch(p, now, 100*time.Millisecond, 1000)
	if d := p.Duty(); d <= minDuty || d >= 1 {
		t.Fatalf("one quiet batch raises the duty a step, got %v", d)
	}
	for range 40 {
		batch(p, now, 100*time.Millisecond, 1000)
	}
	if p.Duty() != 1 {
		t.Fatalf("after many quiet batches the duty is back at its ceiling, got %v", p.Duty())
	}
}

func TestPacerJudgesTimePerRowAndKeepsItsCeiling(t *testing.T) {
	p, now := testPacer(0.5)
	batch(p, now, 100*time.Millisecond, 1000)
	// Ten times the rows in ten times the time is no slowdown.
	for range 20 {
		batch(p, now, time.Second, 10_000)
	}
	if p.Duty() != 0.5 {
		t.Fatalf("duty %v, want the ceiling 0.5", p.Duty())
	}
	if rest := batch(p, now, time.Second, 10_000); rest != time.Second {
		t.Fatalf("at duty 0.5 a worker rests as long as its batch took, got %v", rest)
	}
	if rest := batch(p, now, time.Second, 0); rest != 0 {
		t.Fatalf("a batch that deleted nothing says nothing of the database: rest %v", rest)
	}
}

func TestPacerForgetsAnOldBase(t *testing.T) {
	p, now := testPacer(1)
	for range 20 {
		batch(p, now, 100*time.Millisecond, 1000)
	}
	// The quiet cost has grown (the tables did): after the base's memory of
	// baseMinutes, the new cost is the base and no longer a slowdown.
	*now = now.Add((baseMinutes + 1) * time.Minute)
	for range 30 {
		batch(p, now, 200*time.Millisecond, 1000)
	}
	if p.Duty() != 1 {
		t.Fatalf("duty %v, want 1 once the old base is forgotten", p.Duty())
	}
	// Within the memory it still counts: a base seen five minutes ago
	// makes a batch twice as slow a slowdown.
	batch(p, now, 100*time.Millisecond, 1000)
	*now = now.Add(5 * time.Minute)
	batch(p, now, 200*time.Millisecond, 1000)
	if p.Duty() != 0.5 {
		t.Fatalf("duty %v, want 0.5", p.Duty())
	}
}

func TestPacerRestEndsWithTheContext(t *testing.T) {
	p, now := testPacer(1)
	for range 20 {
		batch(p, now, 100*time.Millisecond, 1000)
	}
	for range 10 {
		batch(p, now, time.Hour, 1000) // duty to its floor
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// An hour's batch at the floor would rest 4 hours; a cancelled
	// context returns at once.
	p.rest(ctx, time.Hour, 1000)
	var nilPacer *Pacer
	nilPacer.rest(context.Background(), time.Hour, 1000)
}

func TestPacerSharesTheDutyBetweenWorkers(t *testing.T) {
	p, now := testPacer(0.5)
	for range 20 {
		batch(p, now, 100*time.Millisecond, 1000)
	}
	if p.Duty() != 0.5 {
		t.Fatalf("duty %v, want the ceiling 0.5", p.Duty())
	}
	// Two workers run a batch of 100ms side by side: 200ms of work, which
	// at duty 0.5 take 400ms from their start, the second's rest included.
	*now = now.Add(100 * time.Millisecond)
	first, second := p.observe(100*time.Millisecond, 1000), p.observe(100*time.Millisecond, 1000)
	if first != 100*time.Millisecond || second != 300*time.Millisecond {
		t.Fatalf("rests %v and %v, want 100ms and 300ms", first, second)
	}
	// At a duty of 1 nobody waits, however many run.
	q, qnow := testPacer(1)
	for range 20 {
		batch(q, qnow, 100*time.Millisecond, 1000)
	}
	*qnow = qnow.Add(100 * time.Millisecond)
	if a, b := q.observe(100*time.Millisecond, 1000), q.observe(100*time.Millisecond, 1000); a != 0 || b != 0 {
		t.Fatalf("flat out: rests %v and %v, want none", a, b)
	}
}
