package policy

import (
	"fmt"
	"maps"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ImmediateEvictionGracePeriodSeconds is the grace period of hard and
// local-storage evictions (the kubelet's immediateEvictionGracePeriodSeconds).
const ImmediateEvictionGracePeriodSeconds = 1

// Input is what one pass decides on.
type Input struct {
	Observations Observations
	// Pods are the pods bound to this node that are not yet terminal.
	Pods   []*v1.Pod
	Stats  PodStatsByUID
	Layout FilesystemLayout
	// Explained are PSI signals whose stall is pods' own, stalled against
	// their own limits (AssessPodPressure): their thresholds are not met.
	Explained map[Signal]string
}

// ThresholdStatus is a met threshold with the numbers behind it.
type ThresholdStatus struct {
	Threshold   Threshold
	Observation Observation
	// Quantity is the threshold resolved against the observation's capacity.
	Quantity   int64
	MinReclaim int64
	// FirstObservedAt is when the threshold was first seen met in this episode.
	FirstObservedAt time.Time
	// GraceSatisfied: the threshold has held for its grace period.
	GraceSatisfied bool
	// Fresh: the observation is newer than the previous pass's (the stale-stats guard).
	Fresh bool
}

// Assessment is the result of evaluating the thresholds in one pass.
type Assessment struct {
	Now time.Time
	// Met lists every met threshold (minimum-reclaim hysteresis included,
	// grace periods ignored).
	Met []ThresholdStatus
	// Conditions are the node conditions to report (transition period included).
	Conditions []v1.NodeConditionType
	// Starved is the threshold to act on: grace satisfied, fresh stats,
	// memory first. Nil when nothing needs action.
	Starved *ThresholdStatus
	// NodeReclaim is the node-level reclaim plan for a starved disk signal.
	NodeReclaim *NodeReclaim
	// LocalStorage are pods over their local storage limits, evicted before
	// any threshold-based eviction.
	LocalStorage []Candidate

	input Input
}

// RankedPod is an eligible pod in ranking order.
type RankedPod struct {
	Pod *v1.Pod
}

// ExcludedPod is a pod that may not be evicted, and why.
type ExcludedPod struct {
	Pod    *v1.Pod
	Reason string
}

// Selection is the victim choice for a starved threshold.
type Selection struct {
	Signal Signal
	// Ranking lists every eligible pod, first to be evicted first.
	Ranking []RankedPod
	// Excluded lists the pods that were not eligible, with the reason.
	Excluded []ExcludedPod
	// Candidates are the first pods of Ranking with everything needed to
	// evict them; the caller evicts the first and moves on to the next only
	// when an eviction is refused (PDB).
	Candidates []Candidate
	// Waiting, when set, says why no victim is chosen now (an earlier
	// eviction still terminating, or its expected reclaim covers the need).
	Waiting string
	// Escalate are soft evictions still in flight when a hard threshold of
	// the same resource is met: the caller requests each again with the hard
	// grace period (engine_escalate.go), whether or not Waiting is set.
	Escalate []Candidate
}

// pendingEviction is an eviction whose effect is not yet visible in the stats.
type pendingEviction struct {
	uid       types.UID
	key       string
	signal    Signal
	expected  int64
	evictedAt time.Time
	goneAt    time.Time
	// braked: the brake killed it on the node, so its departure does not
	// measure the normal eviction path.
	braked bool
	// hard: evicted with the hard grace period; only those measure the path
	// the brake races against (soft ones wait out a longer grace).
	hard bool
	// grace is the grace period requested; releaseBy is when a victim still
	// holding its resource is overdue (engine_escalate.go).
	grace     time.Duration
	releaseBy time.Time
}

// Engine carries the state the kubelet's eviction manager keeps between
// passes. It is used from one goroutine (the decision loop).
type Engine struct {
	cfg   *Config
	clock Clock
	self  types.UID

	firstObservedAt    map[string]time.Time
	conditionsObserved map[v1.NodeConditionType]time.Time
	// conditionHolds are eviction loop backoffs (engine_loops.go).
	conditionHolds   map[v1.NodeConditionType]time.Time
	thresholdsMet    []Threshold
	lastObservations Observations
	pending          []*pendingEviction
	brake            brakeState
	// assessed is set by the first Assess (see adoptTerminating).
	assessed bool
	// inForce is ThresholdsFor(cfg.Thresholds, inForceLayout), kept between
	// passes (the layout rarely changes; SetConfig clears it): built and sorted
	// anew, it was a tenth of an idle pass's allocations.
	inForce       []Threshold
	inForceLayout FilesystemLayout
}

// thresholdsInForce is ThresholdsFor the engine's configuration and layout.
// Callers only read the slice.
func (e *Engine) thresholdsInForce(layout FilesystemLayout) []Threshold {
	if e.inForce == nil || layout != e.inForceLayout {
		e.inForce, e.inForceLayout = ThresholdsFor(e.cfg.Thresholds, layout), layout
	}
	return e.inForce
}

// NewEngine returns an engine for cfg. self is evictiond's own pod UID, never evicted.
func NewEngine(cfg *Config, clock Clock, self types.UID) *Engine {
	return &Engine{cfg: cfg, clock: clock, self: self,
		firstObservedAt: map[string]time.Time{}, conditionsObserved: map[v1.NodeConditionType]time.Time{}}
}

// Config returns the configuration in force.
func (e *Engine) Config() *Config { return e.cfg }

// SetConfig applies a new configuration (hot reload). State of thresholds
// that still exist is kept, so grace periods and hysteresis carry over.
func (e *Engine) SetConfig(cfg *Config) {
	e.cfg = cfg
	e.inForce = nil
	var kept []Threshold
	for _, t := range e.thresholdsMet {
		for _, n := range cfg.Thresholds {
			if n.id() == t.id() {
				kept = append(kept, n)
				break
			}
		}
	}
	e.thresholdsMet = kept
}

// HoldConditions records conds as observed now: they stay in Assessment.Conditions
// for the transition period even if no threshold is met. A restarted agent calls it
// with the pressure the node still shows from its previous run, which it would
// otherwise release at once (it cannot know when that run last saw the pressure).
func (e *Engine) HoldConditions(conds []v1.NodeConditionType) {
	now := e.clock.Now()
	for _, c := range conds {
		if at, ok := e.conditionsObserved[c]; !ok || at.Before(now) {
			e.conditionsObserved[c] = now
		}
	}
}

// Assess evaluates the thresholds on fresh observations and updates the
// engine's state: the kubelet's synchronize steps 6 to 16.
func (e *Engine) Assess(in Input) *Assessment {
	now := e.clock.Now()
	a := &Assessment{Now: now, input: in}
	if !e.assessed {
		e.assessed = true
		e.adoptTerminating(in.Pods, now)
	}
	e.updatePending(in, now)
	e.brake.recordHistory(in.Observations, now)

	thresholds := e.thresholdsInForce(in.Layout)
	met := thresholdsMet(thresholds, in.Observations, false)
	if len(e.thresholdsMet) > 0 {
		// Thresholds acted on stay met until available >= threshold + minimum reclaim.
		notYetResolved := thresholdsMet(e.thresholdsMet, in.Observations, true)
		met = mergeThresholds(met, notYetResolved)
	}
	met = withoutExplained(met, in.Explained)
	firstObserved := thresholdsFirstObservedAt(met, e.firstObservedAt, now)
	observedConds := nodeConditions(met)
	e.conditionsObserved = nodeConditionsLastObservedAt(observedConds, e.conditionsObserved, now)
	a.Conditions = e.withHeldConditions(nodeConditionsObservedSince(e.conditionsObserved, e.cfg.PressureTransitionPeriod, now), now)
	graceMet := thresholdsMetGracePeriod(met, firstObserved, now)
	fresh := thresholdsUpdatedStats(met, in.Observations, e.lastObservations)
	var actionable []Threshold
	for _, t := range graceMet {
		if hasThreshold(fresh, t) {
			actionable = append(actionable, t)
		}
	}

	e.firstObservedAt = firstObserved
	e.thresholdsMet = graceMet
	e.lastObservations = maps.Clone(in.Observations) // the caller may reuse its map

	for _, t := range met {
		o := in.Observations[t.Signal]
		a.Met = append(a.Met, ThresholdStatus{
			Threshold: t, Observation: o,
			Quantity: t.quantity(o.Capacity), MinReclaim: t.minReclaim(o.Capacity),
			FirstObservedAt: firstObserved[t.id()],
			GraceSatisfied:  hasThreshold(graceMet, t),
			Fresh:           hasThreshold(fresh, t),
		})
	}
	if e.cfg.LocalStorageCapacityIsolation {
		a.LocalStorage = e.localStorageCandidates(in, now)
	}
	if ordered := byEvictionPriority(actionable); len(ordered) > 0 {
		for i := range a.Met {
			if a.Met[i].Threshold.id() == ordered[0].id() {
				a.Starved = &a.Met[i]
				break
			}
		}
		a.NodeReclaim = e.nodeReclaim(a.Starved, in.Layout)
	}
	return a
}

// nodeReclaim is the reclaim plan for a starved disk signal, restricted to the
// enabled steps.
func (e *Engine) nodeReclaim(s *ThresholdStatus, layout FilesystemLayout) *NodeReclaim {
	var steps []ReclaimStep
	for _, step := range nodeReclaimSteps(s.Threshold.Signal, layout) {
		switch {
		case step == ReclaimContainerGC && e.cfg.Reclaim.ContainerGC,
			step == ReclaimImageGC && e.cfg.Reclaim.ImageGC,
			step == ReclaimPodLogs && e.cfg.Reclaim.PodLogs:
			steps = append(steps, step)
		}
	}
	if len(steps) == 0 {
		return nil
	}
	need := s.Quantity + s.MinReclaim - s.Observation.Available
	if need < 0 {
		need = 0
	}
	return &NodeReclaim{Signal: s.Threshold.Signal, Steps: steps, Need: need}
}

// ReclaimSufficient reports whether, after node-level reclaim, no threshold
// (grace periods ignored, minimum reclaim enforced) is met any more on the
// fresh observations, so no pod needs to be evicted (the kubelet's
// reclaimNodeLevelResources check).
func (e *Engine) ReclaimSufficient(obs Observations, layout FilesystemLayout) bool {
	return len(thresholdsMet(e.thresholdsInForce(layout), obs, true)) == 0
}

// Select ranks the pods for the starved threshold and returns up to max
// candidates. obs are the observations to explain the eviction with (fresh
// ones after node-level reclaim); nil means the assessment's.
// WithPods is the assessment with another list of the node's pods to select
// from (the loop's direct list from the API server when its pod cache was
// behind); the pods' stats stay the input's map, which the caller fills.
func (a *Assessment) WithPods(pods []*v1.Pod) *Assessment {
	c := *a
	c.input.Pods = pods
	return &c
}

func (e *Engine) Select(a *Assessment, obs Observations, max int) Selection {
	if a.Starved == nil {
		return Selection{}
	}
	if obs == nil {
		obs = a.input.Observations
	}
	t := a.Starved.Threshold
	sel := Selection{Signal: t.Signal}
	sel.Escalate = e.escalations(a, obs)
	if w := e.waiting(a.Now, t, obs); w != "" {
		sel.Waiting = w
		return sel
	}

	infos := make([]podInfo, 0, len(a.input.Pods))
	for _, pod := range a.input.Pods {
		if reason := exclusionReason(pod, e.cfg, e.self, a.Now); reason != "" {
			sel.Excluded = append(sel.Excluded, ExcludedPod{Pod: pod, Reason: reason})
			continue
		}
		if e.isPending(pod.UID) {
			sel.Excluded = append(sel.Excluded, ExcludedPod{Pod: pod, Reason: "eviction already requested"})
			continue
		}
		infos = append(infos, newPodInfo(pod, a.input.Stats, t.Signal, a.input.Layout))
	}
	rankPods(infos, t.Signal)
	sel.Ranking = make([]RankedPod, len(infos))
	for i := range infos {
		sel.Ranking[i] = RankedPod{Pod: infos[i].pod}
	}
	o := obs[t.Signal]
	for i := 0; i < len(infos) && i < max; i++ {
		p := &infos[i]
		msg, ann := evictionMessage(p, t, o)
		sel.Candidates = append(sel.Candidates, Candidate{
			Pod: p.pod, Signal: t.Signal, Hard: t.Hard(),
			GracePeriodSeconds: e.gracePeriod(t, p.pod),
			Message:            msg, Annotations: ann,
			Reason:          rankReason(p, t.Signal, i+1, len(infos)),
			ExpectedReclaim: expectedReclaim(p, t.Signal),
		})
	}
	return sel
}

// gracePeriod: hard thresholds 1 s; soft ones evictionMaxPodGracePeriod, or
// min(evictionMaxPodGracePeriod, terminationGracePeriodSeconds) when the pod
// sets one — but never below 1 s. The kubelet passes 0 to its own pod
// workers, where it means "at once"; in the Eviction API's DeleteOptions 0
// means a forced deletion that removes the pod object without waiting for
// the kubelet, so a soft eviction would be harsher than a hard one.
func (e *Engine) gracePeriod(t Threshold, pod *v1.Pod) int64 {
	if t.Hard() {
		return ImmediateEvictionGracePeriodSeconds
	}
	return softGracePeriod(e.cfg, pod)
}

// softGracePeriod is a soft eviction's: min(evictionMaxPodGracePeriod,
// terminationGracePeriodSeconds), at least 1 s.
func softGracePeriod(cfg *Config, pod *v1.Pod) int64 {
	g := cfg.MaxPodGracePeriodSeconds
	if tgps := pod.Spec.TerminationGracePeriodSeconds; tgps != nil && *tgps < g {
		g = *tgps
	}
	return max(g, ImmediateEvictionGracePeriodSeconds)
}

func expectedReclaim(p *podInfo, s Signal) int64 {
	switch {
	case s.IsPSI():
		return 0
	case s.Resource() == ResourceMemory:
		return p.memUsage
	case s.Resource() == ResourceSwap:
		return p.swap
	case s.Resource() == ResourcePIDs:
		return p.procs
	}
	return p.disk
}

// Evicted records that a candidate's eviction was accepted: no other victim
// is chosen until it is gone (bounded by loop.podCleanupTimeout) and stats
// newer than its departure show the result; meanwhile its expected reclaim
// is credited.
func (e *Engine) Evicted(c Candidate) {
	e.EvictedAt(c, e.clock.Now())
}

// Pending lists the evictions whose effect is not yet visible, as ns/name.
func (e *Engine) Pending() []string {
	out := make([]string, len(e.pending))
	for i, p := range e.pending {
		out[i] = p.key
	}
	return out
}

// PendingVictim is a hard-threshold eviction whose pod is still on the node
// and was not braked: what the brake may still stop when the graceful path
// proves too slow.
type PendingVictim struct {
	UID    types.UID
	Signal Signal
}

// GracefulVictims lists the pending evictions made for a hard threshold,
// whose pods are not yet gone and were not braked.
func (e *Engine) GracefulVictims() []PendingVictim {
	var out []PendingVictim
	for _, p := range e.pending {
		if p.hard && !p.braked && p.goneAt.IsZero() {
			out = append(out, PendingVictim{UID: p.uid, Signal: p.signal})
		}
	}
	return out
}

// MarkBraked records that the brake killed a pending victim on the node: its
// departure then does not measure the normal eviction path.
func (e *Engine) MarkBraked(uid types.UID) {
	for _, p := range e.pending {
		if p.uid == uid {
			p.braked = true
		}
	}
}

func (e *Engine) isPending(uid types.UID) bool {
	for _, p := range e.pending {
		if p.uid == uid {
			return true
		}
	}
	return false
}

// updatePending marks pending pods gone when they have left the node, and
// forgets them once observations newer than their departure exist (PSI
// signals also wait out their averaging window).
func (e *Engine) updatePending(in Input, now time.Time) {
	if len(e.pending) == 0 {
		return // the idle pass: no pod sets to build
	}
	present := make(map[types.UID]bool, len(in.Pods))
	listed := make(map[types.UID]bool, len(in.Pods))
	for _, p := range in.Pods {
		listed[p.UID] = true
		if p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {
			present[p.UID] = true
		}
	}
	kept := e.pending[:0]
	for _, p := range e.pending {
		here := present[p.uid]
		if holdsDisk(p.signal) {
			// Its emptyDirs, logs and writable layer are freed when the
			// kubelet removes the pod, not when its containers exit.
			here = listed[p.uid]
		}
		if p.goneAt.IsZero() && !here {
			p.goneAt = now
			if p.hard && !p.braked {
				e.observeEvictionPath(p.goneAt.Sub(p.evictedAt))
			}
		}
		if !p.goneAt.IsZero() {
			o, ok := in.Observations[settleSignal(p.signal)]
			settled := ok && o.Time.After(p.goneAt) && now.Sub(p.goneAt) >= e.settleWindow(p.signal)
			// An adopted pod (no signal, see adoptTerminating) is done once gone.
			if settled || isLocalStorageSignal(p.signal) && !ok || p.signal == "" {
				continue
			}
		}
		kept = append(kept, p)
	}
	e.pending = kept
}

func isLocalStorageSignal(s Signal) bool {
	return s == SignalEmptyDirLimit || s == SignalPodEphemeralLimit || s == SignalContainerEphemeralLimit
}

// holdsDisk: a pod evicted for s frees what s measures only once the kubelet
// has removed it (disk space and inodes: emptyDirs, logs, writable layers),
// while memory and PIDs are freed when its containers exit.
func holdsDisk(s Signal) bool {
	r := s.Resource()
	return isLocalStorageSignal(s) || r == ResourceEphemeralStorage || r == ResourceInodes
}

// settleSignal is the signal whose newer observation shows an eviction's
// effect: the signal itself, or for local-storage limit evictions nodefs,
// where emptyDirs and logs live in every layout.
func settleSignal(s Signal) Signal {
	if isLocalStorageSignal(s) {
		return SignalNodeFsAvailable
	}
	return s
}

// diskSettleWindow: a pod evicted for disk is gone from the API server a
// moment before the filesystem shows its space back (make bench-ramp, disk
// setups: the node's statfs showed the writer's 2.3 GiB freed 12 ms after the
// pod had left the list, and a pass between the two evicted an idle
// bystander); the kubelet's housekeeping, which removes what is left of
// removed pods, runs every 2 s.
const diskSettleWindow = 2 * time.Second

// settleWindow is how long after a pod evicted for s left its effect may
// still be missing from some signal's readings: for memory evictions, the
// longest window of the PSI thresholds in force (PSI averages lag); for disk
// evictions diskSettleWindow.
func (e *Engine) settleWindow(s Signal) time.Duration {
	var w time.Duration
	if holdsDisk(s) {
		w = diskSettleWindow
	}
	if s.IsMemory() {
		for _, t := range e.cfg.Thresholds {
			w = max(w, psiWindow(t.Signal))
		}
	}
	return w
}

// psiWindow is how long a PSI average takes to reflect a change.
func psiWindow(s Signal) time.Duration {
	if !s.IsPSI() {
		return 0
	}
	switch string(s)[len(s)-5:] {
	case "avg10":
		return 10 * time.Second
	case "avg60":
		return 60 * time.Second
	}
	return 300 * time.Second
}

// waiting says why no victim may be chosen for t now, or "".
func (e *Engine) waiting(now time.Time, t Threshold, obs Observations) string {
	var credit int64
	var creditFrom []string
	for _, p := range e.pending {
		if p.goneAt.IsZero() && escalates(t, p) {
			// Requested again with the hard grace period in this pass
			// (Selection.Escalate): gone within seconds or braked at its
			// releaseBy, so what it holds is credited — within
			// loop.podCleanupTimeout of its eviction, as any pending victim's
			// wait, in case the request fails every pass (API unreachable).
			if now.Sub(p.evictedAt) < e.cfg.PodCleanupTimeout {
				credit += p.expected
				creditFrom = append(creditFrom, p.key+" (escalated)")
			}
			continue
		}
		if p.goneAt.IsZero() && e.overdue(p, now) {
			continue // the brake's (Overdue): it holds back no other victim
		}
		if p.goneAt.IsZero() && now.Sub(p.evictedAt) < e.cfg.PodCleanupTimeout {
			if p.signal == "" {
				return fmt.Sprintf("waiting for %s to terminate (already terminating when evictiond started, deletion requested %v ago; up to loop.podCleanupTimeout %v)",
					p.key, now.Sub(p.evictedAt).Round(time.Millisecond), e.cfg.PodCleanupTimeout)
			}
			if holdsDisk(p.signal) {
				return fmt.Sprintf("waiting for %s to be removed (evicted %v ago for %s: its emptyDirs, logs and writable layer are freed then; up to loop.podCleanupTimeout %v)",
					p.key, now.Sub(p.evictedAt).Round(time.Millisecond), p.signal, e.cfg.PodCleanupTimeout)
			}
			return fmt.Sprintf("waiting for %s to terminate (evicted %v ago for %s, up to loop.podCleanupTimeout %v)",
				p.key, now.Sub(p.evictedAt).Round(time.Millisecond), p.signal, e.cfg.PodCleanupTimeout)
		}
		if t.Signal.IsPSI() {
			// Whatever memory signal the pod was evicted for, the average
			// reflects its departure only after the window.
			if p.signal.IsMemory() && !p.goneAt.IsZero() && now.Sub(p.goneAt) < psiWindow(t.Signal) {
				return fmt.Sprintf("waiting for %s's pressure average to settle after %s left (%v ago, window %v)",
					t.Signal, p.key, now.Sub(p.goneAt).Round(time.Millisecond), psiWindow(t.Signal))
			}
			continue
		}
		if p.signal.IsPSI() {
			continue // memory.available readings are fresh; the PSI victim's usage is credited nowhere
		}
		if !sameReclaim(p.signal, t.Signal) {
			continue
		}
		// A pod still there past the cleanup timeout has freed nothing and
		// may never do so (stuck terminating): no credit, or the timeout
		// would not bound anything.
		if p.goneAt.IsZero() {
			continue
		}
		// The pod is gone: stats from before its departure still count its
		// usage, so credit it.
		if o, ok := obs[t.Signal]; ok && !o.Time.After(p.goneAt) {
			credit += p.expected
			creditFrom = append(creditFrom, p.key)
			continue
		}
		// Newer stats of a disk victim: its space may show a moment later.
		if w := e.settleWindow(p.signal); holdsDisk(p.signal) && now.Sub(p.goneAt) < w {
			return fmt.Sprintf("waiting for %s's space to show on the filesystem (removed %v ago; up to %v)",
				p.key, now.Sub(p.goneAt).Round(time.Millisecond), w)
		}
	}
	if credit == 0 {
		return ""
	}
	o := obs[t.Signal]
	credited := o
	credited.Available += credit
	if len(thresholdsMet([]Threshold{t}, Observations{t.Signal: credited}, false)) == 0 {
		return fmt.Sprintf("expected reclaim of %v (%s) brings %s to %s, above the threshold; waiting for stats taken after it",
			creditFrom, FormatValue(t.Signal, credit), t.Signal, FormatValue(t.Signal, credited.Available))
	}
	return ""
}

// sameReclaim: evicting for signal a frees what signal b measures (the same
// signal, the two memory.available signals, or a local-storage limit
// eviction and a disk space signal).
func sameReclaim(a, b Signal) bool {
	if a == b {
		return true
	}
	if isLocalStorageSignal(a) {
		return b.Resource() == ResourceEphemeralStorage
	}
	mem := func(s Signal) bool { return s == SignalMemoryAvailable || s == SignalAllocatableMemoryAvailable }
	return mem(a) && mem(b)
}

// localStorageCandidates lists pods over their local storage limits (the
// kubelet's localStorageEviction); several may be evicted in one pass.
func (e *Engine) localStorageCandidates(in Input, now time.Time) []Candidate {
	var out []Candidate
	for _, pod := range in.Pods {
		st, ok := in.Stats[pod.UID]
		if !ok || e.isPending(pod.UID) {
			continue
		}
		sig, msg, used, violated := localStorageViolation(pod, st, in.Layout)
		if !violated {
			continue
		}
		if reason := exclusionReason(pod, e.cfg, e.self, now); reason != "" {
			continue
		}
		out = append(out, Candidate{Pod: pod, Signal: sig, Hard: true, LocalStorage: true,
			GracePeriodSeconds: ImmediateEvictionGracePeriodSeconds, Message: msg,
			Annotations:     map[string]string{AnnotationStarvedResource: string(ResourceEphemeralStorage)},
			Reason:          "over its local storage limit: " + msg,
			ExpectedReclaim: used})
	}
	return out
}
