package engine

import "slices"

func (t *turn) parallel(branches []Step, f *frame, done continuation) {
	outs := make([]any, len(branches))
	frames := make([]*frame, len(branches))
	remaining, finished := len(branches), false
	for i := range branches {
		bf := f.child()
		frames[i] = bf
		t.runStep(&branches[i], bf, resumeFunc(func(r result) {
			if finished {
				return
			}
			if r.err != nil {
				finished = true
				t.cancel("parallel branch failed", slices.Delete(slices.Clone(frames), i, i+1)...)
				done.resume(r)
				return
			}
			outs[i] = r.out
			if remaining--; remaining == 0 {
				finished = true
				done.resume(result{out: outs})
			}
		}))
	}
}

func (t *turn) race(branches []Step, f *frame, done continuation) {
	frames := make([]*frame, len(branches))
	finished := false
	for i := range branches {
		bf := f.child()
		frames[i] = bf
		t.runStep(&branches[i], bf, resumeFunc(func(r result) {
			if finished {
				return
			}
			finished = true
			t.cancel("race lost", slices.Delete(slices.Clone(frames), i, i+1)...)
			if r.err != nil {
				done.resume(r)
				return
			}
			var id any
			if branches[i].ID != "" {
				id = branches[i].ID
			}
			done.resume(result{out: map[string]any{"index": int64(i), "id": id, "output": r.out}})
		}))
	}
}
