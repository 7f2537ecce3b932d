package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/brake"
	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
)

// Freezer stops pods at kernel speed: brake.PodFreezer on the node's pod
// cgroups (internal/node); a scenario's node holds them on the virtual clock
// (internal/simulate). Both are a daemon.Node.
type Freezer interface {
	Freeze(pod *v1.Pod, maxFreeze time.Duration) (brake.Hold, error)
	Thaw(uid types.UID) (brake.Hold, bool, error)
	Kill(uid types.UID, timeout time.Duration) (brake.Hold, int, bool, error)
	Held() []brake.Hold
}

// brakeKillTimeout bounds the wait for a killed pod's tasks to be gone.
const brakeKillTimeout = 5 * time.Second

// Brake events.
const (
	EventReasonBraked      = "Braked"
	EventReasonBrakeThawed = "BrakeThawed"
	EventReasonWouldBrake  = "WouldBrake"
)

// BrakeReport is what the brake decided and did in a pass.
type BrakeReport struct {
	policy.BrakeDecision
	// Frozen names the pod frozen before the request, Killed the pod killed
	// after it was accepted, Thawed the holds ended without a kill.
	Frozen string   `json:"frozen,omitempty"`
	Killed string   `json:"killed,omitempty"`
	Thawed []string `json:"thawed,omitempty"`
	// CrossingToFrozen is the time from the crossing to the freeze.
	CrossingToFrozen time.Duration `json:"crossingToFrozen,omitempty"`
}

// evictWithBrake evicts the ranked candidates, with the brake around the
// request when the resource would run out before the normal path completes:
// freeze the first candidate, request the eviction, kill it on the node once
// accepted, thaw it when refused. The rate comes from the readings at hand
// (the passes', the fast poll's); when it is unknown or averaged over too
// long a time, the fast poll's readings taken during the ranking are looked
// at, and if they do not tell either, the node is read once more
// brake.sampleInterval after the pass's reading before deciding.
func (a *Agent) evictWithBrake(ctx context.Context, as *policy.Assessment, pods []*v1.Pod, cands []policy.Candidate, obs policy.Observations, rep *Report) eviction.Result {
	cfg := a.engine.Config()
	d := a.engine.Brake(as)
	if d.Resample && !d.Fire && len(a.recordFastReadings()) > 0 {
		d = a.engine.Brake(as)
	}
	if d.Resample && !d.Fire {
		// The second reading comes sampleInterval after the pass's own: only
		// what is left of it is waited (the pass's ranking already took part
		// of it), and only the fast signals are read again.
		wait := cfg.Brake.SampleInterval
		if o, ok := obs[d.Signal]; ok {
			wait -= a.opts.Clock.Now().Sub(o.Time)
		}
		if wait > 0 {
			a.sleep(wait)
		}
		a.engine.RecordReadings(a.readFast())
		first := d.Reason
		d = a.engine.Brake(as)
		a.log.Debug("brake: read again before deciding", "signal", d.Signal, "first", first, "then", d.Reason)
	}
	br := &BrakeReport{BrakeDecision: d}
	rep.Brake = br
	a.metrics.BrakeEvictionPath.Set(d.EvictionPath.Seconds())
	victim := cands[0]
	crossing := as.Starved.FirstObservedAt
	var held *brake.Hold
	switch {
	case !d.Fire:
		if as.Starved.Threshold.Hard() {
			a.log.Info("brake not needed: graceful path", "pod", podKeyOf(victim.Pod), "signal", d.Signal, "why", d.Reason)
		}
	case cfg.DryRun:
		a.metrics.BrakeTotal.WithLabelValues(string(d.Signal), "dry_run").Inc()
		a.log.Warn("dry run: brake would freeze pod", "pod", podKeyOf(victim.Pod), "signal", d.Signal, "why", d.Reason)
		a.recorder.Eventf(victim.Pod, v1.EventTypeWarning, EventReasonWouldBrake, "Dry run: would freeze and kill after the eviction is accepted: %s", d.Reason)
	case a.freezer == nil:
		a.log.Warn("brake would fire but this agent has no freezer (no pod cgroups)", "pod", podKeyOf(victim.Pod), "why", d.Reason)
	case victim.Pod.UID == a.opts.SelfUID:
		// Select never offers it; a defect must not freeze the agent itself.
		a.log.Error("brake refused to freeze evictiond's own pod", "pod", podKeyOf(victim.Pod))
	default:
		if h, ok := a.freezeVictim(victim.Pod, d, crossing, br, "brake: pod frozen", "brake: freeze failed; evicting on the normal path"); ok {
			held = &h
		}
	}

	var res eviction.Result
	if held == nil && !d.Fire && a.racesInFlight(as, victim.Pod) {
		res, d, held = a.evictRacing(ctx, as, cands, d, crossing, br)
	} else {
		res = a.evictor.Evict(ctx, cands)
	}
	a.resolveHolds(res, d, held, crossing, br)
	if held == nil && !d.Fire && a.racesInFlight(as, victim.Pod) && res.Outcome == eviction.OutcomeEvicted &&
		res.Victim != nil && d.TimeToExhaustion >= 0 {
		a.startWatch(as, res, crossing, br)
	}
	return a.recordEviction(res, cands, obs)
}

// racesInFlight reports whether the brake follows the node past a graceful
// eviction for a hard threshold: while its request is in flight, and once
// accepted (the graceful watch).
func (a *Agent) racesInFlight(as *policy.Assessment, victim *v1.Pod) bool {
	cfg := a.engine.Config()
	return cfg.Brake.Enabled && !cfg.DryRun && a.freezer != nil && as.Starved.Threshold.Hard() &&
		as.Starved.Threshold.Signal.Brakeable() && victim.UID != a.opts.SelfUID
}

// evictRacing requests a graceful eviction and, while the request is in
// flight, decides the brake again every brake.sampleInterval on the fast
// poll's newest readings. The graceful path's estimate (brake.evictionPath)
// starts when the request is accepted; an API server slow to answer — busy,
// far, or the client's own rate limiter — leaves the ramp running before
// that. On the e2e node with every CPU taken, a request took 4.7 s to be
// accepted while a 100 MiB/s hog went on to kubepods' limit and the OOM
// killer (issue 30). When the brake fires meanwhile the first candidate is
// frozen, as if it had fired before the request: killed once the request
// is accepted, thawed if another pod is evicted or nothing is. The looks
// are the node's (Stats.LookInFlight): on the real clock on a node, none in
// a scenario (its requests take no time), the recorded ones in a replay.
func (a *Agent) evictRacing(ctx context.Context, as *policy.Assessment, cands []policy.Candidate, d policy.BrakeDecision,
	crossing time.Time, br *BrakeReport) (eviction.Result, policy.BrakeDecision, *brake.Hold) {
	result := make(chan eviction.Result, 1)
	answered := make(chan struct{})
	go func() {
		result <- a.evictor.Evict(ctx, cands)
		close(answered)
	}()
	interval := a.engine.Config().Brake.SampleInterval
	sig := as.Starved.Threshold.Signal
	var last time.Time
	var held *brake.Hold
	for held == nil {
		readings, ok := a.stats.LookInFlight(answered, interval)
		if !ok {
			break
		}
		fresh := false
		for _, obs := range readings {
			if o, ok := obs[sig]; ok && o.Time.After(last) {
				last, fresh = o.Time, true
			}
		}
		if !fresh {
			continue
		}
		a.engine.RecordReadings(readings...)
		nd := a.engine.Brake(as)
		if !nd.Fire {
			continue
		}
		br.BrakeDecision = nd
		h, ok := a.freezeVictim(cands[0].Pod, nd, crossing, br, "brake: pod frozen while its eviction request was in flight: the ramp outran the API server",
			"brake: freeze while the eviction request was in flight failed; it terminates on the normal path")
		if !ok {
			break
		}
		d, held = nd, &h
	}
	return <-result, d, held
}

// brakeWatchMax bounds watchGraceful: the kubelet's minimum grace period
// (2 s) is what a victim that does not stop at SIGTERM keeps its resource.
const brakeWatchMax = 2 * time.Second

// watchReleaseFraction: the watch ends when the signal rose by threshold /
// watchReleaseFraction from its lowest reading (50 MiB for a 500Mi
// threshold): the victim releases its resource. Smaller rises are noise or a
// writer's pause.
const watchReleaseFraction = 10

// watchGraceful follows a hard threshold's signal after a graceful eviction
// was accepted, reading the fast signals every brake.sampleInterval (one
// reading per call: the loop's watch timer, see victims.go) until the
// victim's resource comes back (the signal is above the threshold again, or
// rose by a tenth of the threshold from the lowest reading of the watch: the
// victim releasing it), at most brakeWatchMax: a writer measured slow at the
// crossing (starved of CPU then) can ramp at full speed right after it, and
// the graceful path would lose to the OOM killer (the e2e tier's hog did:
// docs/benchmarks-history.md). Not
// bounded by the time to exhaustion estimated at the crossing: a ramp that
// slowed past it and sped up again before the victim stopped would be left to
// the OOM killer. Nor ended by a signal that stops falling for a while: a
// writer starved of CPU pauses for tens of milliseconds between its bursts
// (issue 30's busy node), and a watch that ended at the first pause left it
// to the kubelet and the next passes. When the brake fires on the new
// readings, the victim — its eviction already accepted — is frozen and
// killed on the node at once. It returns true when the watch is over.
func (a *Agent) watchGraceful(w *gracefulWatch) bool {
	sig := w.as.Starved.Threshold.Signal
	obs := a.readFast()
	o, ok := obs[sig]
	if !ok || !o.Time.After(w.last) {
		return true // no newer reading (simulate's steps): nothing to follow
	}
	w.last = o.Time
	if w.until.IsZero() {
		w.until = o.Time.Add(brakeWatchMax)
	}
	a.engine.RecordReadings(obs)
	if o.Available >= w.as.Starved.Quantity {
		return true // the resource came back
	}
	if w.lowest == nil || o.Available < *w.lowest {
		w.lowest = &o.Available
	} else if o.Available-*w.lowest >= w.as.Starved.Quantity/watchReleaseFraction {
		return true // the victim is releasing it
	}
	d := a.engine.Brake(w.as)
	if !d.Fire {
		return !o.Time.Before(w.until)
	}
	w.br.BrakeDecision = d
	if h, ok := a.freezeVictim(w.res.Victim.Pod, d, w.crossing, w.br, "brake: pod frozen after its graceful eviction: the ramp outran the graceful path",
		"brake: freeze of the gracefully evicted victim failed; it terminates on the normal path"); ok {
		a.killHeld(w.res, h, d, w.crossing, w.br)
	}
	return true
}

// brakePending brakes a victim whose graceful eviction for the starved hard
// threshold is still pending, while the pass waits for it: a victim that
// ignores SIGTERM keeps its resource until the kubelet's kill (its 2 s
// minimum grace and more), and a ramp that outlasted watchGraceful would
// otherwise reach the OOM killer first. It returns the brake's report when
// it fired.
func (a *Agent) brakePending(as *policy.Assessment, pods []*v1.Pod) *BrakeReport {
	cfg := a.engine.Config()
	s := as.Starved
	if !cfg.Brake.Enabled || cfg.DryRun || a.freezer == nil || !s.Threshold.Hard() || !s.Threshold.Signal.Brakeable() {
		return nil
	}
	var victim *v1.Pod
	for _, p := range a.engine.GracefulVictims() {
		if p.Signal != s.Threshold.Signal || p.UID == a.opts.SelfUID {
			continue
		}
		if a.offLoop.killing[p.UID] {
			// Already frozen and being killed: a second freeze would hold, on
			// cgroup v1, the tasks the kill has just sent SIGKILL.
			return nil
		}
		if i := slices.IndexFunc(pods, func(pod *v1.Pod) bool { return pod.UID == p.UID }); i >= 0 {
			victim = pods[i]
			break
		}
	}
	if victim == nil {
		return nil
	}
	d := a.engine.Brake(as)
	if !d.Fire {
		return nil
	}
	br := &BrakeReport{BrakeDecision: d}
	crossing := s.FirstObservedAt
	h, ok := a.freezeVictim(victim, d, crossing, br, "brake: pod frozen while its eviction was pending: the ramp outran the graceful path",
		"brake: freeze of the pending victim failed; it terminates on the normal path")
	if !ok {
		return br
	}
	res := eviction.Result{Outcome: eviction.OutcomeEvicted, Victim: &policy.Candidate{Pod: victim, Signal: s.Threshold.Signal}}
	a.killHeld(res, h, d, crossing, br)
	return br
}

// freezeVictim freezes a victim for the brake and records it: br's frozen
// pod and crossing → frozen, the metric, the log line msg. A failed freeze
// is counted and logged as failMsg; the pod then goes on the normal path.
func (a *Agent) freezeVictim(pod *v1.Pod, d policy.BrakeDecision, crossing time.Time, br *BrakeReport, msg, failMsg string) (brake.Hold, bool) {
	h, err := a.freezer.Freeze(pod, a.engine.Config().Brake.MaxFreeze)
	if err != nil {
		a.metrics.BrakeTotal.WithLabelValues(string(d.Signal), "freeze_failed").Inc()
		a.log.Error(failMsg, "pod", podKeyOf(pod), "err", err)
		return h, false
	}
	br.Frozen = h.Pod
	attrs := []any{"pod", h.Pod, "uid", h.UID, "signal", d.Signal, "crossing", crossing.Format(time.RFC3339Nano)}
	if h.StillFreezing != nil {
		// Held all the same: the request goes ahead, and the kill (SIGKILL
		// reaches a task in the kernel) or the thaw ends it as any hold.
		msg = strings.Replace(msg, "brake: pod frozen", "brake: pod freezing, not yet frozen", 1)
		attrs = append(attrs, "freezeWrittenAt", h.FrozenAt.Add(-h.FreezeTook).Format(time.RFC3339Nano), "stillFreezing", h.StillFreezing.Error())
	} else {
		br.CrossingToFrozen = h.FrozenAt.Sub(crossing)
		a.metrics.BrakeCrossingToFrozen.WithLabelValues(string(d.Signal)).Observe(br.CrossingToFrozen.Seconds())
		attrs = append(attrs, "frozenAt", h.FrozenAt.Format(time.RFC3339Nano), "crossingToFrozen", br.CrossingToFrozen, "freezeTook", h.FreezeTook)
	}
	attrs = append(attrs, "why", d.Reason)
	a.log.Warn(msg, append(attrs, a.stages.logAttrs()...)...)
	return h, true
}

// recordFastReadings hands the fast readings taken since the last call
// (the fast poll's) to the engine's rate history, and returns them.
func (a *Agent) recordFastReadings() []policy.Observations {
	r := a.stats.FastReadings()
	a.engine.RecordReadings(r...)
	return r
}

// passStages are the times of a pass's steps up to the brake, logged with a
// freeze so that the time from the crossing to the frozen pod can be split:
// the fast poll's reading of the crossing, the wake, the node's observation,
// the assessment, the pods' usage, the ranking.
type passStages struct {
	start, listed, read, observed, assessed, usage, selected time.Time
	// pollCrossing is the reading that woke the loop, when the poll's.
	pollCrossing time.Time
	// usage0 is the process's resource usage at the start: what the pass
	// waited on (page faults, blocking waits, preemptions) up to the freeze
	// is its difference with the usage then.
	usage0 syscall.Rusage
}

// startPassStages starts a pass's stages at start.
func startPassStages(start time.Time) passStages {
	p := passStages{start: start}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &p.usage0)
	return p
}

// waits says what the process waited on since the pass started: major and
// minor page faults, voluntary context switches (blocking: I/O, locks, the
// runtime's idle threads too) and involuntary ones (preempted by the
// scheduler). Process-wide, so the agent's other goroutines count too; a
// stalled step with major faults was reading its own pages back from disk.
func (p *passStages) waits() string {
	var now syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &now) != nil {
		return ""
	}
	return fmt.Sprintf("major faults %d, minor faults %d, blocked %d, preempted %d",
		now.Majflt-p.usage0.Majflt, now.Minflt-p.usage0.Minflt, now.Nvcsw-p.usage0.Nvcsw, now.Nivcsw-p.usage0.Nivcsw)
}

// pollCrossing is the earliest of the fast poll's readings with the starved
// signal below its threshold; zero when none is.
func pollCrossing(fast []policy.Observations, s *policy.ThresholdStatus) time.Time {
	for _, obs := range fast {
		if o, ok := obs[s.Threshold.Signal]; ok && o.Available < s.Quantity {
			return o.Time
		}
	}
	return time.Time{}
}

// logAttrs are the stages as log attributes: absolute times for the start
// and the poll's crossing, the steps as offsets from the start.
func (p *passStages) logAttrs() []any {
	var steps []string
	for _, st := range []struct {
		name string
		at   time.Time
	}{{"listed", p.listed}, {"read", p.read}, {"observed", p.observed}, {"assessed", p.assessed}, {"usage", p.usage}, {"selected", p.selected}} {
		if !st.at.IsZero() {
			steps = append(steps, fmt.Sprintf("%s +%v", st.name, st.at.Sub(p.start).Round(10*time.Microsecond)))
		}
	}
	attrs := []any{"passStart", p.start.Format(time.RFC3339Nano), "passSteps", strings.Join(steps, ", ")}
	if w := p.waits(); w != "" {
		attrs = append(attrs, "passWaits", w)
	}
	if !p.pollCrossing.IsZero() {
		attrs = append(attrs, "pollCrossing", p.pollCrossing.Format(time.RFC3339Nano))
	}
	return attrs
}

// readFast reads the signals the brake races on.
func (a *Agent) readFast() policy.Observations { return a.stats.ObserveFast() }

// resolveHolds ends the brake's holds after an eviction request: the
// accepted victim is killed on the node (a held pod always, whatever the
// pass decided: a frozen pod's own stop would hang on its frozen tasks; a
// pod not held when the brake fired for this pass, frozen and killed too);
// on an unanswered request (API error) the holds stay, bounded by
// brake.maxFreeze; every other hold is thawed.
func (a *Agent) resolveHolds(res eviction.Result, d policy.BrakeDecision, held *brake.Hold, crossing time.Time, br *BrakeReport) {
	if a.freezer == nil {
		return
	}
	var victim types.UID
	if res.Victim != nil && res.Outcome.Disrupted() {
		victim = res.Victim.Pod.UID
	}
	killVictim := victim != ""
	for _, h := range a.freezer.Held() {
		switch {
		case a.offLoop.killing[h.UID]:
			killVictim = killVictim && h.UID != victim
		case h.UID == victim:
			killVictim = false
			a.killHeld(res, h, d, crossing, br)
		case res.Outcome == eviction.OutcomeAPIError:
			a.metrics.BrakeTotal.WithLabelValues(string(d.Signal), "held").Inc()
			a.log.Warn("brake: eviction not answered; pod stays frozen", "pod", h.Pod, "until", h.Deadline.Format(time.RFC3339Nano), "err", res.Err)
		default:
			a.thaw(h.UID, string(d.Signal), "thawed_refused", fmt.Sprintf("its eviction was not made (%s)", res.Outcome), br)
		}
	}
	if killVictim && d.Fire && held != nil && res.Outcome != eviction.OutcomeStoppedLocally {
		// The ladder moved on from the frozen pod to another one: stop that one as fast.
		h, err := a.freezer.Freeze(res.Victim.Pod, a.engine.Config().Brake.MaxFreeze)
		if err != nil {
			a.metrics.BrakeTotal.WithLabelValues(string(d.Signal), "freeze_failed").Inc()
			a.log.Error("brake: freeze of the accepted victim failed; it terminates on the normal path", "pod", podKeyOf(res.Victim.Pod), "err", err)
			return
		}
		a.killHeld(res, h, d, crossing, br)
	}
}

// thaw ends a hold without a kill.
func (a *Agent) thaw(uid types.UID, signal, result, why string, br *BrakeReport) {
	h, ok, err := a.freezer.Thaw(uid)
	if !ok {
		return
	}
	if br != nil {
		br.Thawed = append(br.Thawed, h.Pod)
	}
	if err != nil {
		a.log.Error("brake: thaw failed", "pod", h.Pod, "err", err)
	}
	a.metrics.BrakeTotal.WithLabelValues(signal, result).Inc()
	frozenFor := a.opts.Clock.Now().Sub(h.FrozenAt)
	a.log.Warn("brake: pod thawed", "pod", h.Pod, "why", why, "frozenFor", frozenFor)
	a.recorder.Eventf(podRefOf(h), v1.EventTypeNormal, EventReasonBrakeThawed, "Thawed after %v frozen: %s",
		frozenFor.Round(time.Millisecond), why)
}

// releaseBrake thaws every hold once no hard threshold is met any more.
func (a *Agent) releaseBrake(as *policy.Assessment) {
	if a.freezer == nil {
		return
	}
	held := a.freezer.Held()
	if len(held) == 0 {
		return
	}
	for _, m := range as.Met {
		if m.Threshold.Hard() {
			return
		}
	}
	for _, h := range held {
		if !a.offLoop.killing[h.UID] {
			a.thaw(h.UID, "", "thawed_cleared", "the pressure cleared", nil)
		}
	}
}

// BrakeExpired records a hold the brake thawed at its deadline
// (brake.maxFreeze); it runs on the brake's timer goroutine.
func (a *Agent) BrakeExpired(h brake.Hold, err error) {
	a.metrics.BrakeTotal.WithLabelValues("", "thawed_expired").Inc()
	if err != nil {
		a.log.Error("brake: thaw at brake.maxFreeze failed", "pod", h.Pod, "err", err)
	}
	a.log.Warn("brake: pod thawed at brake.maxFreeze", "pod", h.Pod, "frozenAt", h.FrozenAt.Format(time.RFC3339Nano))
	a.recorder.Eventf(podRefOf(h), v1.EventTypeWarning, EventReasonBrakeThawed,
		"Thawed after brake.maxFreeze (%v): the eviction was not completed in time", h.Deadline.Sub(h.FrozenAt))
}

// thawAll ends every hold (the loop stopping).
func (a *Agent) thawAll(why string) {
	if a.freezer == nil {
		return
	}
	for _, h := range a.freezer.Held() {
		if !a.offLoop.killing[h.UID] {
			a.thaw(h.UID, "", "thawed_cleared", why, nil)
		}
	}
}

func podKeyOf(p *v1.Pod) string { return p.Namespace + "/" + p.Name }

// podRefOf is an Event target for a held pod.
func podRefOf(h brake.Hold) *v1.ObjectReference {
	ns, name, _ := strings.Cut(h.Pod, "/")
	return &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: name, UID: h.UID}
}
