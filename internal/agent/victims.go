package agent

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/brake"
	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
)

// The loop never waits on a victim. What follows one after its eviction
// request runs beside the loop and reports back to it:
//   - the kill of a held pod (brake.Brake.Kill waits up to brakeKillTimeout
//     for its tasks to be gone) runs on its own goroutine; its result is
//     recorded by the loop (finishKill);
//   - the graceful watch (a hard threshold's signal followed after a graceful
//     eviction) is a timer of the loop: each tick is one fast reading and one
//     brake decision, and a wake or a tick of the ticker meanwhile runs its
//     pass at once.
// Run drives both from its select; Pass, for `evictiond simulate` and tests
// on a virtual clock, settles them before it returns.

// gracefulWatch is the watch on a gracefully evicted victim of a hard
// threshold (watchGraceful's state between its readings).
type gracefulWatch struct {
	as       *policy.Assessment
	res      eviction.Result
	crossing time.Time
	br       *BrakeReport
	// until is the first reading's time + brakeWatchMax: the watch's end is
	// judged on its readings' times, not on the clock at each tick, so a
	// replay of the recording (whose ticks fall at other instants than the
	// loop's timer did) ends it at the same reading.
	until  time.Time
	last   time.Time // the newest reading followed
	lowest *int64    // the lowest available the watch read
}

// killResult is a kill's outcome, reported to the loop.
type killResult struct {
	res      eviction.Result
	hold     brake.Hold
	decision policy.BrakeDecision
	crossing time.Time
	br       *BrakeReport
	killed   int
	freedAt  time.Time
	err      error
	// livelock is set for a livelock restart's kill (livelock.go).
	livelock *policy.Livelock
}

// offLoop holds the kills in flight; their results wait in done until the
// loop takes them (ready tells it some are there).
type offLoop struct {
	mu      sync.Mutex
	done    []killResult
	killing map[types.UID]bool // touched by the loop goroutine only
	ready   chan struct{}
	wg      sync.WaitGroup
}

func newOffLoop() *offLoop {
	return &offLoop{killing: map[types.UID]bool{}, ready: make(chan struct{}, 1)}
}

// killHeld kills a held pod whose eviction was accepted, off the loop: the
// kill starts now, its confirmation (the tasks gone) is reported back.
func (a *Agent) killHeld(res eviction.Result, h brake.Hold, d policy.BrakeDecision, crossing time.Time, br *BrakeReport) {
	a.killOffLoop(killResult{res: res, hold: h, decision: d, crossing: crossing, br: br})
}

// killOffLoop kills r.hold's pod on its own goroutine and reports r back to
// the loop with the kill's outcome; a pod being killed is not thawed meanwhile.
func (a *Agent) killOffLoop(r killResult) {
	o := a.offLoop
	if o.killing[r.hold.UID] {
		return
	}
	o.killing[r.hold.UID] = true
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		_, r.killed, _, r.err = a.freezer.Kill(r.hold.UID, brakeKillTimeout)
		r.freedAt = a.opts.Clock.Now()
		o.mu.Lock()
		o.done = append(o.done, r)
		o.mu.Unlock()
		select {
		case o.ready <- struct{}{}:
		default:
		}
	}()
}

// finishKills records the kills that ended since the last call (on the loop).
func (a *Agent) finishKills() {
	o := a.offLoop
	o.mu.Lock()
	done := o.done
	o.done = nil
	o.mu.Unlock()
	for _, r := range done {
		delete(o.killing, r.hold.UID)
		a.recordKill(r)
	}
}

// Settle finishes, on the clock, what the last pass left running beside the
// loop: the graceful watch to its end, then the kills. Pass calls it, so
// a Pass's report holds every action of its pass; a simulation driven by
// Advance and PassOnce calls it at its end.
func (a *Agent) Settle(ctx context.Context) { a.settle(ctx) }

func (a *Agent) settle(ctx context.Context) {
	for a.watch != nil && ctx.Err() == nil {
		a.sleep(a.engine.Config().Brake.SampleInterval)
		a.watchTick()
	}
	a.watch = nil
	a.offLoop.wg.Wait()
	a.finishKills()
}

// watchTick takes one reading for the graceful watch and decides; it ends
// the watch when there is nothing more to follow.
func (a *Agent) watchTick() {
	w := a.watch
	if w == nil {
		return
	}
	if a.watchGraceful(w) {
		a.watch = nil
	}
}

// startWatch follows a hard threshold's signal after a graceful eviction was
// accepted (watchGraceful); a newer eviction's watch replaces an older one.
func (a *Agent) startWatch(as *policy.Assessment, res eviction.Result, crossing time.Time, br *BrakeReport) {
	if a.watch == nil {
		a.watchAt = time.Time{} // a new watch: scheduled when its pass returns (Run's timer, Advance)
	}
	a.watch = &gracefulWatch{as: as, res: res, crossing: crossing, br: br, last: as.Starved.Observation.Time}
}

// recordKill logs, counts and reports a kill that ended.
func (a *Agent) recordKill(r killResult) {
	if r.livelock != nil {
		a.recordLivelockKill(r)
		return
	}
	d, h := r.decision, r.hold
	if r.err != nil {
		a.metrics.BrakeTotal.WithLabelValues(string(d.Signal), "kill_failed").Inc()
		a.log.Error("brake: kill failed; the pod terminates on the normal path", "pod", h.Pod, "err", r.err)
		return
	}
	result := "killed"
	if r.res.Outcome == eviction.OutcomeStoppedLocally {
		result = "killed_locally" // the local stop killed it first (brake.KillBeforeStop), or now
	}
	a.engine.MarkBraked(h.UID)
	if r.br != nil {
		r.br.Killed = h.Pod
	}
	a.metrics.BrakeTotal.WithLabelValues(string(d.Signal), result).Inc()
	sinceCrossing := r.freedAt.Sub(r.crossing)
	a.metrics.BrakeCrossingToFreed.WithLabelValues(string(d.Signal)).Observe(sinceCrossing.Seconds())
	frozenAfter := h.FrozenAt.Sub(r.crossing)
	a.log.Warn("brake: pod killed after its eviction was accepted", "pod", h.Pod, "uid", h.UID, "outcome", r.res.Outcome,
		"processes", r.killed, "crossing", r.crossing.Format(time.RFC3339Nano), "frozenAt", h.FrozenAt.Format(time.RFC3339Nano),
		"freedAt", r.freedAt.Format(time.RFC3339Nano), "crossingToFrozen", frozenAfter, "crossingToFreed", sinceCrossing)
	a.recorder.Eventf(r.res.Victim.Pod, v1.EventTypeWarning, EventReasonBraked,
		"Frozen %v after the crossing of %s, killed after the eviction was accepted (%s; %d processes, freed %v after the crossing): %s",
		frozenAfter.Round(100*time.Microsecond), d.Signal, r.res.Outcome, r.killed, sinceCrossing.Round(time.Millisecond), d.Reason)
}
