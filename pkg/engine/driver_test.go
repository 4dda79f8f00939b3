package engine

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// world plays the store, the workers and the clock around the engine: it runs turns,
// keeps histories and queues, answers activities, fires timers and starts children.
type world struct {
	t         testing.TB
	defs      map[string]*Definition
	now       time.Time
	instances map[string]*instance
	order     []string // instance ids in creation order
	queues    map[string][]Message
	agenda    []delivery
	seq       int
	rng       *rand.Rand // when set, ties in the agenda and turn order are shuffled
	worker    func(task ActivityTask, input any) reply
	turns     []turnRecord
	// cancelled lists "instance/execution/activity" of activities whose rows were deleted.
	cancelled []string
	maxTurns  int
}

// reply is what a worker does with an activity task.
type reply struct {
	result any
	fail   *Failure
	after  time.Duration // how long the activity runs; 0 means one second
	never  bool          // the worker never answers
}

type instance struct {
	id       string
	def      *Definition
	exec     int64
	history  []Event
	outcome  Outcome
	archived [][]Event // histories of earlier executions
}

type delivery struct {
	at       time.Time
	seq      int
	instance string
	exec     int64
	activity int64 // for activity results: the activity id, so cancellation removes it
	msg      Message
}

type turnRecord struct {
	instance string
	exec     int64
	before   int // history length before the turn
	msgs     []Message
	now      time.Time
	decision Decision
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newWorld(t testing.TB, docs ...string) *world {
	w := &world{
		t:         t,
		defs:      map[string]*Definition{},
		now:       epoch,
		instances: map[string]*instance{},
		queues:    map[string][]Message{},
		maxTurns:  100_000,
		worker: func(task ActivityTask, input any) reply {
			return reply{result: map[string]any{"echo": input}}
		},
	}
	for _, doc := range docs {
		w.define(doc)
	}
	return w
}

func (w *world) define(doc string) *Definition {
	def, err := ParseDefinition([]byte(doc))
	require.NoError(w.t, err)
	w.defs[def.Name] = def
	return def
}

func mustJSON(t testing.TB, v any) json.RawMessage {
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return raw
}

// start creates an instance and queues its start message.
func (w *world) start(id, name string, input any) {
	w.create(id, name, StartMessage{Input: mustJSON(w.t, input)})
}

func (w *world) create(id, name string, start StartMessage) {
	def, ok := w.defs[name]
	require.True(w.t, ok, "no definition %q", name)
	require.NotContains(w.t, w.instances, id)
	w.instances[id] = &instance{id: id, def: def, exec: 1, outcome: Outcome{Status: StatusRunning}}
	w.order = append(w.order, id)
	w.send(id, start)
}

// send queues a message for an instance now.
func (w *world) send(id string, m Message) {
	// Messages go through the codec, as they would through the store.
	kind, payload, err := EncodeMessage(m)
	require.NoError(w.t, err)
	back, err := DecodeMessage(kind, payload)
	require.NoError(w.t, err)
	require.Equal(w.t, m, back)
	w.queues[id] = append(w.queues[id], back)
}

// at schedules a message for an instance after d of virtual time from now.
func (w *world) at(d time.Duration, id string, m Message) {
	w.seq++
	w.agenda = append(w.agenda, delivery{at: w.now.Add(d), seq: w.seq, instance: id, msg: m})
}

// run plays turns, activity results and timers until nothing is left to do.
func (w *world) run() {
	for n := 0; ; n++ {
		require.Less(w.t, n, w.maxTurns, "scenario does not end")
		if id := w.nextQueued(); id != "" {
			w.turn(id)
			continue
		}
		if len(w.agenda) == 0 {
			return
		}
		slices.SortFunc(w.agenda, func(a, b delivery) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return a.seq - b.seq
		})
		d := w.agenda[0]
		w.agenda = w.agenda[1:]
		if d.at.After(w.now) {
			w.now = d.at
		}
		w.send(d.instance, d.msg)
	}
}

func (w *world) nextQueued() string {
	var ready []string
	for _, id := range w.order {
		if len(w.queues[id]) > 0 {
			ready = append(ready, id)
		}
	}
	if len(ready) == 0 {
		return ""
	}
	if w.rng != nil {
		return ready[w.rng.IntN(len(ready))]
	}
	return ready[0]
}

// turn runs one turn of an instance with its queued messages and applies the decision.
func (w *world) turn(id string) {
	inst := w.instances[id]
	msgs := w.queues[id]
	w.queues[id] = nil
	before := len(inst.history)
	d, err := Turn(inst.def, TurnInput{
		InstanceID: id, ExecutionID: inst.exec,
		History: slices.Clip(inst.history), Messages: msgs, Now: w.now,
	})
	require.NoError(w.t, err)
	w.turns = append(w.turns, turnRecord{instance: id, exec: inst.exec, before: before, msgs: msgs, now: w.now, decision: d})
	for i, e := range d.Events {
		require.Equal(w.t, int64(before+i+1), e.EventID(), "event ids continue the history")
		kind, payload, err := EncodeEvent(e)
		require.NoError(w.t, err)
		back, err := DecodeEvent(e.EventID(), kind, payload)
		require.NoError(w.t, err)
		require.Equal(w.t, e, back)
	}
	inst.history = append(inst.history, d.Events...)
	for _, a := range d.Activities {
		input, err := decodeJSON(a.Input)
		require.NoError(w.t, err)
		r := w.worker(a, input)
		if r.never {
			continue
		}
		after := r.after
		if after == 0 {
			after = time.Second
		}
		if w.rng != nil {
			after += time.Duration(w.rng.IntN(5)) * time.Second
		}
		var m Message = ActivityCompletedMessage{ExecutionID: inst.exec, ActivityID: a.ActivityID, Attempt: a.Attempt, Result: mustJSON(w.t, r.result)}
		if r.fail != nil {
			m = ActivityFailedMessage{ExecutionID: inst.exec, ActivityID: a.ActivityID, Attempt: a.Attempt, Failure: *r.fail}
		}
		w.seq++
		w.agenda = append(w.agenda, delivery{at: w.now.Add(after), seq: w.seq, instance: id, exec: inst.exec, activity: a.ActivityID, msg: m})
	}
	for _, a := range d.CancelActivities {
		// Lock stealing: the worker row is deleted, so the result never arrives.
		w.cancelled = append(w.cancelled, fmt.Sprintf("%s/%d/%d", id, inst.exec, a))
		w.agenda = slices.DeleteFunc(w.agenda, func(x delivery) bool {
			return x.instance == id && x.exec == inst.exec && x.activity == a
		})
	}
	for _, tm := range d.Timers {
		require.Positive(w.t, tm.Delay)
		w.at(tm.Delay, id, tm.Message)
	}
	for _, c := range d.Children {
		w.create(c.InstanceID, c.Name, c.Message)
	}
	for _, c := range d.CancelChildren {
		if _, ok := w.instances[c.InstanceID]; ok {
			w.send(c.InstanceID, c.Message)
		}
	}
	if d.ParentMessage != nil {
		w.send(d.ParentMessage.InstanceID, d.ParentMessage.Message)
	}
	inst.outcome = d.Outcome
	if d.Outcome.Status == StatusContinuedAsNew {
		inst.archived = append(inst.archived, inst.history)
		inst.history = nil
		inst.exec++
		inst.outcome = Outcome{Status: StatusRunning}
		w.send(id, *d.Outcome.Next)
	}
}

// checkReplay replays every recorded turn from the final histories and requires the same
// decisions, then requires that replaying each whole history decides nothing new.
func (w *world) checkReplay() {
	w.t.Helper()
	for i, tr := range w.turns {
		inst := w.instances[tr.instance]
		final := inst.history
		if tr.exec < inst.exec {
			final = inst.archived[tr.exec-1]
		}
		d, err := Turn(inst.def, TurnInput{
			InstanceID: tr.instance, ExecutionID: tr.exec,
			History: slices.Clip(final[:tr.before]), Messages: tr.msgs, Now: tr.now,
		})
		require.NoError(w.t, err)
		require.Equal(w.t, tr.decision, d, "turn %d of %s replays differently", i, tr.instance)
	}
	for _, id := range w.order {
		inst := w.instances[id]
		d, err := Turn(inst.def, TurnInput{InstanceID: id, ExecutionID: inst.exec, History: inst.history, Now: w.now})
		require.NoError(w.t, err)
		require.Empty(w.t, d.Events, "replaying the history of %s decides new events", id)
		require.Equal(w.t, inst.outcome.Status, d.Outcome.Status)
	}
}

// summary renders a history compactly for assertions.
func summary(h []Event) []string {
	out := make([]string, len(h))
	for i, e := range h {
		var s string
		switch x := e.(type) {
		case ExecutionStarted:
			s = "started " + string(x.Input)
		case ActivityScheduled:
			s = fmt.Sprintf("schedule %s #%d %s", x.Name, x.Attempt, x.Input)
		case ActivityCompleted:
			s = fmt.Sprintf("completed %d %s", x.ScheduledID, x.Result)
		case ActivityFailed:
			s = fmt.Sprintf("failed %d %s", x.ScheduledID, x.Failure.Message)
		case ActivityCancelRequested:
			s = fmt.Sprintf("cancel activity %d (%s)", x.ScheduledID, x.Reason)
		case TimerCreated:
			s = fmt.Sprintf("timer %s %s", x.Purpose, time.UnixMilli(x.FireAt).UTC().Format("15:04:05"))
		case TimerFired:
			s = fmt.Sprintf("fired %d", x.TimerID)
		case EventReceived:
			s = fmt.Sprintf("event %s %s", x.Name, x.Payload)
		case ChildScheduled:
			s = fmt.Sprintf("child %s %s %s", x.Name, x.InstanceID, x.Input)
		case ChildCompleted:
			s = fmt.Sprintf("child completed %d %s", x.ScheduledID, x.Result)
		case ChildFailed:
			s = fmt.Sprintf("child failed %d %s: %s", x.ScheduledID, x.Failure.Kind, x.Failure.Message)
		case ChildCancelRequested:
			s = fmt.Sprintf("cancel child %d %s", x.ScheduledID, x.InstanceID)
		case CancelRequested:
			s = "cancel requested " + x.Reason
		case ContinuedAsNew:
			s = "continued as new " + string(x.Input)
		case ExecutionCompleted:
			s = "completed " + string(x.Output)
		case ExecutionFailed:
			s = fmt.Sprintf("failed %s: %s", x.Failure.Kind, x.Failure.Message)
		case ExecutionCancelled:
			s = "cancelled " + x.Reason
		}
		out[i] = fmt.Sprintf("%d %s", e.EventID(), s)
	}
	return out
}

func (w *world) summary(id string) []string { return summary(w.instances[id].history) }

func (w *world) outcome(id string) Outcome { return w.instances[id].outcome }

// yamlDoc lets tests write definitions indented inside Go source.
func yamlDoc(s string) string {
	lines := strings.Split(strings.Trim(s, "\n"), "\n")
	indent := len(lines[0]) - len(strings.TrimLeft(lines[0], "\t "))
	for i, l := range lines {
		if len(l) >= indent {
			lines[i] = l[indent:]
		}
	}
	return strings.ReplaceAll(strings.Join(lines, "\n"), "\t", "  ")
}
