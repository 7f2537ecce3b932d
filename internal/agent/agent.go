// Package agent is evictiond's decision loop: one goroutine, woken by a ticker
// or the kernel fast path, that reads fresh stats, decides with the policy
// engine, publishes node conditions, runs node-level reclaim and evicts at
// most one pod per pass. Every other part (stats, eviction, reclaim, node
// status) is reached through the small interfaces of types.go, so the loop
// reads as the list of steps in docs/architecture.md. The daemon and
// `evictiond simulate` both run this loop (see internal/daemon).
package agent

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/metrics"
	"github.com/evictiond/evictiond/internal/policy"
)

// Options configure the agent.
type Options struct {
	NodeName string
	// SelfUID is evictiond's own pod, never evicted.
	SelfUID types.UID
	// Wake wakes the loop (the kernel fast path); each receive is one pass.
	Wake <-chan struct{}
	// OnConfig runs in the loop goroutine when a new configuration is
	// applied, to rebuild what depends on it (evictor, reclaimer, notifier
	// thresholds). The engine is updated by the agent itself.
	OnConfig func(*policy.Config)
	// OnPass runs in the loop goroutine at the end of every pass with what it
	// saw and did (the trace recorder's decisions, internal/daemon).
	OnPass func(source string, rep *Report)
	Clock  policy.Clock
	// Sleep waits on Clock (the brake's second reading); nil: time.Sleep.
	Sleep  func(time.Duration)
	Logger *slog.Logger
	// LoopJournal keeps the eviction loop records across restarts
	// (LoopJournalPath); "": in memory only (simulate).
	LoopJournal string
}

// Agent is the decision loop and its state.
type Agent struct {
	opts   Options
	engine *policy.Engine
	stats  Stats
	// sleep waits before the brake's resample (Options.Sleep; tests record it).
	sleep    func(time.Duration)
	pods     Pods
	status   NodeStatus
	evictor  Evictor
	reclaim  Reclaimer
	recorder Recorder
	metrics  *metrics.Metrics
	log      *slog.Logger

	reloads chan *policy.Config
	// lastHeldBack is the last "why no eviction" logged, so it is logged at
	// Info once per change instead of on every pass.
	lastHeldBack string
	// freezer is the brake's hand on pod cgroups; nil: the brake decides
	// and logs, and freezes nothing.
	freezer Freezer
	// memReclaimer and memState: reclaim before evict (memreclaim.go).
	memReclaimer MemoryReclaimer
	memState     memoryReclaimState
	// selfStalled are the pods reported stalled against their own limits
	// (podpressure.go), reported once per episode.
	selfStalled map[types.UID]bool
	// livelock follows pods at their memory limit (livelock.go);
	// livelockHeldBack is the last "not restarted" logged.
	livelock         *policy.LivelockTracker
	livelockHeldBack string

	// stages times the current pass's steps up to the brake, for the
	// brake's log line (where the milliseconds from the crossing went).
	stages passStages
	// watch follows the last graceful victim of a hard threshold between
	// passes; offLoop runs the brake's kills beside the loop (victims.go).
	watch *gracefulWatch
	// watchAt is the watch's next tick when Advance drives the loop (zero:
	// a watch Advance has not scheduled yet).
	watchAt time.Time
	offLoop *offLoop
	// loops is eviction loop detection and backoff (loops.go).
	loops loopState

	mu           sync.Mutex
	lastPassEnd  time.Time
	lastPassErr  string
	lastStarved  policy.Signal
	lastObserved Observed
}

// Deps are the agent's collaborators; Reclaimer may be nil (no CRI).
type Deps struct {
	Stats     Stats
	Pods      Pods
	Status    NodeStatus
	Evictor   Evictor
	Reclaimer Reclaimer
	Recorder  Recorder
	Metrics   *metrics.Metrics
	// Freezer is the brake's (brake.PodFreezer); nil: no pod cgroups to freeze.
	Freezer Freezer
	// Owners names a looping workload in its Event (kube.WorkloadRefs); nil:
	// the Event carries no UID.
	Owners Owners
	// MemoryReclaimer is reclaim before evict's (memory.reclaim); nil: never.
	MemoryReclaimer MemoryReclaimer
}

// New returns an agent deciding with cfg.
func New(cfg *policy.Config, deps Deps, opts Options) *Agent {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if opts.Sleep == nil {
		opts.Sleep = time.Sleep
	}
	a := &Agent{opts: opts, engine: policy.NewEngine(cfg, opts.Clock, opts.SelfUID),
		stats: deps.Stats, pods: deps.Pods, status: deps.Status, evictor: deps.Evictor, reclaim: deps.Reclaimer,
		recorder: deps.Recorder, metrics: deps.Metrics, log: opts.Logger, reloads: make(chan *policy.Config, 1),
		freezer: deps.Freezer, sleep: opts.Sleep, offLoop: newOffLoop(),
		memReclaimer: deps.MemoryReclaimer, memState: memoryReclaimState{asked: map[types.UID]time.Time{}},
		livelock: policy.NewLivelockTracker()}
	a.resetThresholdGauges()
	a.initLoops(opts.LoopJournal, deps.Owners)
	return a
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Reload hands a new configuration to the loop; the latest one wins.
func (a *Agent) Reload(cfg *policy.Config) {
	for {
		select {
		case a.reloads <- cfg:
			return
		default:
			select {
			case <-a.reloads: // drop the older pending one
			default:
			}
		}
	}
}

// Run is the loop. It returns when ctx ends.
func (a *Agent) Run(ctx context.Context) {
	interval := a.engine.Config().LoopInterval
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	defer a.thawAll("evictiond stopping")
	a.pass(ctx, "start")
	// watchTimer ticks the graceful watch while there is one; a pass may
	// start a watch or end it.
	var watchTimer *time.Timer
	var watchC <-chan time.Time
	defer func() {
		if watchTimer != nil {
			watchTimer.Stop()
		}
	}()
	release := &releaseWake{}
	defer release.stop()
	for {
		if a.watch == nil {
			watchC = nil
		} else if watchC == nil {
			watchTimer = time.NewTimer(a.engine.Config().Brake.SampleInterval)
			watchC = watchTimer.C
		}
		release.set(a.engine.NextReleaseBy(), a.opts.Clock.Now())
		select {
		case <-ctx.Done():
			return
		case <-release.c:
			release.fired()
			a.pass(ctx, "release")
		case <-watchC:
			watchC = nil
			a.watchTick()
		case <-a.offLoop.ready:
			a.finishKills()
		case cfg := <-a.reloads:
			a.applyConfig(cfg)
			if cfg.LoopInterval != interval {
				interval = cfg.LoopInterval
				ticker.Reset(interval)
			}
			a.pass(ctx, "config")
		case <-a.opts.Wake:
			a.pass(ctx, "notifier")
		case <-ticker.C:
			a.pass(ctx, "ticker")
		}
	}
}

func (a *Agent) applyConfig(cfg *policy.Config) {
	a.engine.SetConfig(cfg)
	a.reconfigureLoops(cfg.Loops)
	if a.opts.OnConfig != nil {
		a.opts.OnConfig(cfg)
	}
	a.resetThresholdGauges()
	a.log.Info("configuration applied", "thresholds", len(cfg.Thresholds), "dryRun", cfg.DryRun)
}

// Report is what one pass saw and did, for `evictiond simulate` and tests;
// the daemon only logs and counts it.
type Report struct {
	// Err is set when the pass could not run (pods unknown).
	Err      string
	Observed Observed
	// Assessment is nil only when Err is set.
	Assessment *policy.Assessment
	// MemoryReclaim is reclaim before evict's run, if a memory signal was
	// near its threshold.
	MemoryReclaim *MemoryReclaimReport
	// PodPressure lists the pods stalled against their own memory limits
	// and the PSI signals they explain, when there are any.
	PodPressure *policy.PodPressureAssessment
	// Livelock lists the pods livelocked at their memory limit and the
	// restart requested, when there are any.
	Livelock *LivelockReport
	// Reclaim is the node-level reclaim run, if any.
	Reclaim *ReclaimReport
	// Selection is the victim choice, when a threshold needed an eviction.
	Selection *policy.Selection
	// Evictions are the Evictor's answers, in order: local-storage violators
	// (several) or the threshold eviction (one).
	Evictions []eviction.Result
	// Escalations are the soft evictions in flight requested again with the
	// hard grace period (policy.Selection.Escalate).
	Escalations []eviction.Result
	// Deferred counts local-storage violators left for the next pass
	// (eviction.rateLimits.maxPerPass).
	Deferred int
	// Pending lists evictions whose effect is not yet visible, as ns/name.
	Pending []string
	// Brake is the brake's decision and actions, when a threshold eviction
	// was due.
	Brake *BrakeReport
	// Loops are the eviction loop verdicts of the pass's evictions (a
	// workload in a loop, and its backoff).
	Loops []policy.LoopVerdict
}

// ReclaimReport is one node-level reclaim run.
type ReclaimReport struct {
	Signal policy.Signal
	Need   int64
	Steps  []ReclaimStepReport
	// Sufficient: no threshold is met any more, so no pod needs to go.
	Sufficient bool
}

// ReclaimStepReport is one reclaim step's result.
type ReclaimStepReport struct {
	Step policy.ReclaimStep
	eviction.ReclaimResult
}

// Pass runs one decision now; Run calls it on every wake. Exported for
// `evictiond simulate`, which drives the loop on a virtual clock.
// It settles what the pass left beside the loop (the graceful watch, on the
// clock; the brake's kills) before it returns, so the report is complete.
func (a *Agent) Pass(ctx context.Context, source string) Report {
	rep := a.PassOnce(ctx, source)
	a.settle(ctx)
	rep.Pending = a.engine.Pending()
	rep.Loops = append(rep.Loops, a.takeLoopVerdicts()...)
	return rep
}

// PassOnce runs one decision now, as Run does on a wake: a configuration
// handed over by Reload applies first; the kills the pass started are waited
// for (a node's kill is reported back to the loop) but the graceful watch it
// started is left running: Advance ticks it at its times. `evictiond
// simulate` and the replay drive the loop with Advance and PassOnce, so the
// watch's readings and the passes interleave as they do in Run.
func (a *Agent) PassOnce(ctx context.Context, source string) Report {
	select {
	case cfg := <-a.reloads:
		a.applyConfig(cfg)
	default:
	}
	rep := a.pass(ctx, source)
	a.offLoop.wg.Wait()
	a.finishKills()
	rep.Pending = a.engine.Pending()
	rep.Loops = a.takeLoopVerdicts()
	return rep
}

// Advance runs, on the clock, what Run runs between passes up to until: the
// graceful watch's ticks due by then, each at its own time (the first one
// brake.sampleInterval after the clock's time at the call that finds the
// watch new, as Run's timer starts when the pass that began it returns), and
// the kills that ended. The clock is left at until.
func (a *Agent) Advance(ctx context.Context, until time.Time) {
	interval := a.engine.Config().Brake.SampleInterval
	for a.watch != nil && ctx.Err() == nil {
		if a.watchAt.IsZero() {
			a.watchAt = a.opts.Clock.Now().Add(interval)
		}
		if a.watchAt.After(until) {
			break
		}
		if wait := a.watchAt.Sub(a.opts.Clock.Now()); wait > 0 {
			a.sleep(wait)
		}
		a.watchTick()
		a.watchAt = a.opts.Clock.Now().Add(interval)
	}
	if a.watch == nil {
		a.watchAt = time.Time{}
	}
	if wait := until.Sub(a.opts.Clock.Now()); wait > 0 {
		a.sleep(wait)
	}
	a.offLoop.wg.Wait()
	a.finishKills()
}

// HoldConditions keeps conds (the pressure the node shows from a previous run)
// for the transition period; call before Run.
func (a *Agent) HoldConditions(conds []v1.NodeConditionType) {
	if len(conds) == 0 {
		return
	}
	a.engine.HoldConditions(conds)
	a.log.Info("pressure shown by the previous run held for the transition period",
		"conditions", conds, "transitionPeriod", a.engine.Config().PressureTransitionPeriod)
}

// pass is one decision: the steps of docs/architecture.md's loop, one call each.
func (a *Agent) pass(ctx context.Context, source string) (rep Report) {
	start := time.Now()
	a.stages = startPassStages(start)
	a.metrics.LoopWakeups.WithLabelValues(source).Inc()
	defer func() {
		a.metrics.PassDuration.Observe(time.Since(start).Seconds())
		a.metrics.LastPass.SetToCurrentTime()
		if a.opts.OnPass != nil {
			a.opts.OnPass(source, &rep)
		}
	}()
	a.loops.verdicts = nil // this pass's, for its report (Run never takes them)
	a.finishKills()
	a.expireLoops()

	a.evictor.ReportPending(ctx, a.log)
	listed, err := a.pods.ListPods()
	if err != nil {
		rep.Err = fmt.Sprintf("listing pods: %v", err)
		a.finishPass(Observed{}, rep.Err)
		a.log.Warn("pass skipped: pods unknown", "err", err)
		return rep
	}
	pods := activePods(listed)
	a.stages.listed = time.Now()
	obs := a.stats.Observe(ctx, pods)
	a.stages.read = time.Now()
	rep.MemoryReclaim = a.reclaimMemory(ctx, pods, &obs)
	a.stages.observed = time.Now()
	in := policy.Input{Observations: obs.Observations, Pods: pods, Stats: obs.Pods, Layout: obs.Layout}
	if rep.PodPressure = a.notePodPressure(pods, obs); rep.PodPressure != nil {
		in.Explained = rep.PodPressure.Explained
	}
	rep.Livelock = a.noteLivelocks(ctx, pods, obs)

	fast := a.recordFastReadings()
	assessment := a.engine.Assess(in)
	a.stages.assessed = time.Now()
	if s := assessment.Starved; s != nil {
		a.stages.pollCrossing = pollCrossing(fast, s)
	}
	rep.Observed, rep.Assessment = obs, assessment
	a.releaseBrake(assessment)
	a.publish(assessment, obs)
	a.finishPass(obs, "")

	if len(assessment.LocalStorage) > 0 {
		rep.Evictions, rep.Deferred = a.evictLocalStorage(ctx, assessment.LocalStorage)
		return rep
	}
	starved := assessment.Starved
	if starved == nil {
		// One EvictionThresholdMet per pressure episode: it is recorded again
		// only once the signal's node condition was released (after the
		// transition period), not each time a reading hovering at the
		// threshold crosses it. On a fleet whose readings flap, those repeats
		// were most of the agents' writes (docs/scale.md, make bench-fleet).
		if a.lastStarved != "" && !slices.Contains(assessment.Conditions, a.lastStarved.Condition()) {
			a.lastStarved = ""
		}
		a.lastHeldBack = ""
		return rep
	}
	a.noteStarved(starved)
	if br, braking := a.brakeOverdue(starved, pods); braking {
		rep.Brake = br
		return rep
	}

	// Ranking needs every pod's fresh memory and process counts; the
	// assessment holds the same Pods map, so it sees them.
	a.stats.ObserveUsage(ctx, pods, &obs)
	a.stages.usage = time.Now()
	fresh := obs.Observations
	if plan := assessment.NodeReclaim; plan != nil {
		after, r := a.reclaimNode(ctx, plan, pods, obs.Layout)
		rep.Reclaim = r
		fresh = after.Observations
		if r.Sufficient {
			return rep
		}
	}

	sel := a.engine.Select(assessment, fresh, a.candidatesWanted(starved.Threshold))
	a.stages.selected = time.Now()
	rep.Selection = &sel
	if len(sel.Escalate) > 0 {
		rep.Escalations = a.escalate(ctx, sel.Escalate, fresh)
	}
	if sel.Waiting != "" {
		a.heldBack(slog.LevelInfo, "no eviction this pass", "signal", starved.Threshold.Signal, "why", sel.Waiting)
		rep.Brake = a.brakePending(assessment, pods)
		return rep
	}
	var cacheNote string
	if len(sel.Candidates) == 0 && starved.Threshold.Hard() {
		// The pod cache may be behind the node (it was, after API server
		// restarts): select again from the API server's own list.
		var direct []*v1.Pod
		if direct, cacheNote = a.podsBehindCache(ctx, listed); direct != nil {
			pods = activePods(direct)
			a.stats.ObserveUsage(ctx, pods, &obs)
			assessment = assessment.WithPods(pods)
			rep.Assessment = assessment
			sel = a.engine.Select(assessment, fresh, a.candidatesWanted(starved.Threshold))
			rep.Selection = &sel
			if sel.Waiting != "" {
				a.heldBack(slog.LevelInfo, "no eviction this pass", "signal", starved.Threshold.Signal, "why", sel.Waiting)
				return rep
			}
		}
	}
	if len(sel.Candidates) == 0 {
		why := excludedSummary(sel.Excluded)
		if cacheNote != "" {
			why += "; " + cacheNote
		}
		a.heldBack(slog.LevelWarn, "unable to evict any pods from the node", "signal", starved.Threshold.Signal,
			"excluded", len(sel.Excluded), "why", why)
		return rep
	}
	a.lastHeldBack = ""
	a.metrics.StatsAge.WithLabelValues(string(starved.Threshold.Signal)).Observe(a.opts.Clock.Now().Sub(fresh[starved.Threshold.Signal].Time).Seconds())
	rep.Evictions = []eviction.Result{a.evictWithBrake(ctx, assessment, pods, sel.Candidates, fresh, &rep)}
	return rep
}

// podsBehindCache checks, when a hard threshold finds no pod to evict, whether
// the pod cache is behind the node: pod cgroups under kubepods that no cached
// pod (listed: all of the cache's, terminal ones included) accounts for. If so
// it lists the node's pods from the API server (ListPodsDirect, rate-limited) and
// returns that list when it holds pods the cache does not, for the pass to run
// again on it; otherwise a note for the log on what it found.
func (a *Agent) podsBehindCache(ctx context.Context, listed []*v1.Pod) ([]*v1.Pod, string) {
	uids, err := a.stats.PodCgroupUIDs()
	if err != nil {
		return nil, fmt.Sprintf("pod cgroups unreadable: %v", err)
	}
	known := make(map[types.UID]bool, 2*len(listed))
	for _, p := range listed {
		known[p.UID] = true
		if m := p.Annotations[policy.MirrorAnnotation]; m != "" {
			known[types.UID(m)] = true
		}
	}
	var unknown []types.UID
	for _, u := range uids {
		if !known[u] {
			unknown = append(unknown, u)
		}
	}
	if len(unknown) == 0 {
		return nil, ""
	}
	direct, err := a.pods.ListPodsDirect(ctx)
	if err != nil {
		return nil, fmt.Sprintf("%d pod cgroups unknown to the pod cache; listing the node's pods from the API server: %v", len(unknown), err)
	}
	cached := make(map[types.UID]bool, len(listed))
	for _, p := range listed {
		cached[p.UID] = true
	}
	var missing []string
	for _, p := range direct {
		if !cached[p.UID] {
			missing = append(missing, p.Namespace+"/"+p.Name)
		}
	}
	if len(missing) == 0 {
		return nil, fmt.Sprintf("%d pod cgroups unknown to the pod cache and to the API server (pods being torn down)", len(unknown))
	}
	a.log.Warn("pod cache behind the node: deciding on the API server's list of the node's pods",
		"unknownCgroups", len(unknown), "missingFromCache", missing, "cached", len(listed), "listed", len(direct))
	return direct, ""
}

// candidatesWanted is how many ranked pods the evictor may try in one pass:
// its PDB ladder's length for this kind of pressure.
func (a *Agent) candidatesWanted(t policy.Threshold) int {
	e := a.engine.Config().Escalation
	if t.Hard() {
		return e.MaxCandidates
	}
	return e.SoftMaxCandidates
}

// heldBack logs why no pod is evicted at level when the reason changes, and
// at Debug on the passes in between.
func (a *Agent) heldBack(level slog.Level, msg string, attrs ...any) {
	key := msg + fmt.Sprint(attrs...)
	// The waiting message carries elapsed times; compare without digits.
	key = strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, key)
	if key == a.lastHeldBack {
		level = slog.LevelDebug
	}
	a.lastHeldBack = key
	a.log.Log(context.Background(), level, msg, attrs...)
}

// excludedSummary counts excluded pods by reason, e.g.
// "owned by a DaemonSet: 3; critical pod (...): 1".
func excludedSummary(excluded []policy.ExcludedPod) string {
	counts := map[string]int{}
	var order []string
	for _, e := range excluded {
		if counts[e.Reason] == 0 {
			order = append(order, e.Reason)
		}
		counts[e.Reason]++
	}
	parts := make([]string, 0, len(order))
	for _, r := range order {
		parts = append(parts, fmt.Sprintf("%s: %d", r, counts[r]))
	}
	if len(parts) == 0 {
		return "no pods on the node"
	}
	return strings.Join(parts, "; ")
}

// activePods drops pods that already reached a terminal phase.
func activePods(pods []*v1.Pod) []*v1.Pod {
	out := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		if p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

func (a *Agent) finishPass(obs Observed, errText string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lastPassEnd = time.Now()
	a.lastPassErr = errText
	if errText == "" {
		a.lastObserved = obs
	}
}

// noteStarved records the kubelet's EvictionThresholdMet Event when the
// starved signal changes (not on every pass).
func (a *Agent) noteStarved(s *policy.ThresholdStatus) {
	sig := s.Threshold.Signal
	if sig == a.lastStarved {
		return
	}
	a.lastStarved = sig
	kind := "soft"
	if s.Threshold.Hard() {
		kind = "hard"
	}
	a.log.Warn("eviction threshold met", "signal", sig, "kind", kind, "threshold", s.Threshold.Raw,
		"available", policy.FormatValue(sig, s.Observation.Available), "capacity", policy.FormatValue(sig, s.Observation.Capacity))
	a.recorder.Eventf(nodeRef(a.opts.NodeName), v1.EventTypeWarning, "EvictionThresholdMet",
		"Attempting to reclaim %s: %s %s threshold %s met (available %s)", sig.Resource(), sig, kind, s.Threshold.Raw,
		policy.FormatValue(sig, s.Observation.Available))
}

// reclaimNode runs the plan's steps until the need is met, then re-reads the
// node; Sufficient is true when no threshold is met any more (the kubelet's
// check after reclaimNodeLevelResources), so no pod needs to go.
func (a *Agent) reclaimNode(ctx context.Context, plan *policy.NodeReclaim, pods []*v1.Pod, layout policy.FilesystemLayout) (Observed, *ReclaimReport) {
	rep := &ReclaimReport{Signal: plan.Signal, Need: plan.Need}
	if a.reclaim == nil {
		return a.stats.Observe(ctx, pods), rep
	}
	var freed int64
	var done []string
	for _, step := range plan.Steps {
		r := a.reclaim.Reclaim(ctx, step, plan.Signal, plan.Need-freed, pods)
		rep.Steps = append(rep.Steps, ReclaimStepReport{Step: step, ReclaimResult: r})
		result := "ok"
		switch {
		case a.engine.Config().DryRun:
			result = "dry_run"
		case r.Err != nil:
			result = "error"
			a.log.Warn("node-level reclaim step failed", "step", step, "signal", plan.Signal, "err", r.Err)
		}
		a.metrics.ReclaimRuns.WithLabelValues(string(step), result).Inc()
		if r.Freed > 0 {
			freed += r.Freed
			if plan.Signal.Resource() == policy.ResourceEphemeralStorage {
				a.metrics.ReclaimBytes.WithLabelValues(string(step)).Add(float64(r.Freed))
			}
		}
		done = append(done, fmt.Sprintf("%s freed %s (%d items)", step, policy.FormatValue(plan.Signal, max(r.Freed, 0)), r.Items))
		if freed >= plan.Need {
			break
		}
	}
	after := a.stats.Observe(ctx, pods)
	rep.Sufficient = a.engine.ReclaimSufficient(after.Observations, layout)
	verdict := "thresholds still met: evicting"
	if rep.Sufficient {
		verdict = "no threshold met any more: no eviction"
	}
	a.log.Info("node-level reclaim", "signal", plan.Signal, "need", policy.FormatValue(plan.Signal, plan.Need),
		"freed", policy.FormatValue(plan.Signal, freed), "steps", strings.Join(done, "; "), "result", verdict)
	a.recorder.Eventf(nodeRef(a.opts.NodeName), v1.EventTypeNormal, "NodeReclaim",
		"Node-level reclaim for %s: needed %s, freed %s (%s); %s", plan.Signal,
		policy.FormatValue(plan.Signal, plan.Need), policy.FormatValue(plan.Signal, freed), strings.Join(done, "; "), verdict)
	return after, rep
}

// evict hands the ranked candidates to the evictor and records the outcome;
// a pod taken down is tracked by the engine until it is gone.
func (a *Agent) evict(ctx context.Context, cands []policy.Candidate, obs policy.Observations) eviction.Result {
	return a.recordEviction(a.evictor.Evict(ctx, cands), cands, obs)
}

// recordEviction logs and counts the evictor's answer.
func (a *Agent) recordEviction(res eviction.Result, cands []policy.Candidate, obs policy.Observations) eviction.Result {
	signal := string(cands[0].Signal)
	a.metrics.Evictions.WithLabelValues(signal, string(res.Outcome)).Inc()
	if res.Victim == nil {
		if res.Err != nil {
			a.log.Warn("eviction not done", "signal", signal, "outcome", res.Outcome, "err", res.Err)
		}
		return res
	}
	v := res.Victim
	o := obs[v.Signal]
	msg := "pod evicted"
	if res.Outcome == eviction.OutcomeDryRun {
		msg = "dry run: pod would be evicted"
	}
	a.log.Warn(msg, "outcome", res.Outcome, "pod", v.Pod.Namespace+"/"+v.Pod.Name, "uid", v.Pod.UID,
		"signal", v.Signal, "hard", v.Hard, "gracePeriodSeconds", v.GracePeriodSeconds,
		"available", policy.FormatValue(v.Signal, o.Available), "why", v.Reason, "message", v.Message)
	if res.Outcome == eviction.OutcomeDryRun {
		a.recorder.AnnotatedEventf(v.Pod, v.Annotations, v1.EventTypeWarning, "WouldEvict",
			"Dry run: would evict. %s(%s)", v.Message, v.Reason)
		return res
	}
	if res.Outcome.Disrupted() {
		a.engine.Evicted(*v)
		a.noteLoopEviction(*v)
	}
	return res
}

// evictLocalStorage evicts pods over their local storage limits, up to the
// per-pass maximum (the kubelet evicts all of them in one pass); it returns
// the answers and how many violators wait for the next pass.
func (a *Agent) evictLocalStorage(ctx context.Context, cands []policy.Candidate) ([]eviction.Result, int) {
	maxPerPass := a.engine.Config().RateLimits.MaxPerPass
	var out []eviction.Result
	for i, c := range cands {
		if i >= maxPerPass {
			a.log.Info("local-storage evictions deferred to the next pass", "remaining", len(cands)-i, "maxPerPass", maxPerPass)
			return out, len(cands) - i
		}
		out = append(out, a.evict(ctx, []policy.Candidate{c}, nil))
	}
	return out, 0
}

// publish exports the assessment: metrics and node conditions.
func (a *Agent) publish(as *policy.Assessment, obs Observed) {
	m := a.metrics
	for sig, o := range obs.Observations {
		m.SetSignal(sig, o)
	}
	for sig := range obs.Missing {
		m.DeleteSignal(sig)
	}
	cfg := a.engine.Config()
	for _, t := range policy.ThresholdsFor(cfg.Thresholds, obs.Layout) {
		kind := thresholdKind(t)
		met := 0.0
		for _, s := range as.Met {
			if s.Threshold.Signal == t.Signal && s.Threshold.Hard() == t.Hard() {
				met = 1
			}
		}
		m.ThresholdMet.WithLabelValues(string(t.Signal), kind).Set(met)
		if o, ok := obs.Observations[t.Signal]; ok {
			m.SetThreshold(t.Signal, kind, t.Value.Resolve(o.Capacity))
		}
	}
	for _, c := range []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		v := 0.0
		for _, x := range as.Conditions {
			if x == c {
				v = 1
			}
		}
		m.NodeCondition.WithLabelValues(string(c)).Set(v)
	}
	if a.status != nil {
		a.status.SetConditions(as.Conditions, as.ConditionSignals())
	}
}

// resetThresholdGauges drops the threshold gauges of the previous
// configuration; the next pass's publish sets the current configuration's.
func (a *Agent) resetThresholdGauges() {
	a.metrics.ResetThresholds()
	a.metrics.ThresholdMet.Reset()
}

func thresholdKind(t policy.Threshold) string {
	if t.Hard() {
		return "hard"
	}
	return "soft"
}

func nodeRef(name string) *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Node", Name: name, UID: types.UID(name)}
}

// Health is the agent's state for /readyz.
type Health struct {
	LastPass time.Time
	Err      string
	// MemoryObserved: memory.available was read on the last pass.
	MemoryObserved bool
}

// Health reports the last pass.
func (a *Agent) Health() Health {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, mem := a.lastObserved.Observations[policy.SignalMemoryAvailable]
	return Health{LastPass: a.lastPassEnd, Err: a.lastPassErr, MemoryObserved: mem}
}
