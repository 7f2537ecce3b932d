// Package agent is evictiond's decision loop: one goroutine, woken by a ticker
// or the kernel fast path, that reads fresh stats, decides with the policy
// engine, publishes node conditions, runs node-level reclaim and evicts at
// most one pod per pass. Every other part (stats, eviction, reclaim, node
// status) is reached through the small interfaces below, so the loop reads as
// the list of steps in DESIGN.md.
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
	"k8s.io/client-go/tools/record"

	"github.com/evictiond/evictiond/internal/metrics"
	"github.com/evictiond/evictiond/internal/policy"
)

// Observed is one fresh reading of the node.
type Observed struct {
	Observations policy.Observations
	Pods         policy.PodStatsByUID
	Layout       policy.FilesystemLayout
	// Missing names signals that could not be read, and why.
	Missing map[policy.Signal]string
	// Handle is the Stats implementation's own state for ObserveUsage.
	Handle any
}

// Stats reads the node.
type Stats interface {
	// Observe reads every node signal and the pods' disk usage (what the
	// local-storage limit checks need): cheap, every pass.
	Observe(ctx context.Context, pods []*v1.Pod) Observed
	// ObserveUsage adds the pods' fresh memory and process counts to obs (to
	// its Pods map, in place): only when pods must be ranked, since reading
	// every pod cgroup each pass is what an idle node should not pay.
	ObserveUsage(ctx context.Context, pods []*v1.Pod, obs *Observed)
}

// Pods lists the pods bound to this node.
type Pods interface {
	List() ([]*v1.Pod, error)
}

// NodeStatus publishes the node conditions evictiond reports.
type NodeStatus interface {
	SetConditions([]v1.NodeConditionType)
}

// EvictResult is what an Evictor did with a ranked candidate list.
type EvictResult struct {
	// Outcome is a metric label value: evicted, deleted, dry_run, pdb_blocked,
	// gone, throttled, rate_limited, cooling_down, api_error, stopped_locally,
	// no_candidates.
	Outcome string
	// Victim is the candidate evicted (deleted, stopped, or in dry-run chosen).
	Victim *policy.Candidate
	// At is when the victim's eviction was accepted.
	At  time.Time
	Err error
}

// Evictor evicts at most one pod of a ranked candidate list (PDB escalation,
// rate limits and the wait for the victim are its business).
type Evictor interface {
	Evict(ctx context.Context, candidates []policy.Candidate) EvictResult
}

// PendingReporter is an Evictor with work queued for when the API server
// answers again (pods stopped through the CRI while it was unreachable); the
// loop gives it a turn at the start of every pass.
type PendingReporter interface {
	ReportPending(ctx context.Context, log *slog.Logger)
}

// ReclaimResult is one node-level reclaim step's outcome.
type ReclaimResult struct {
	// Freed is measured by statfs before and after, in the signal's unit.
	Freed int64
	Items int
	Err   error
}

// Reclaimer runs node-level reclaim steps. live is the node's pod set.
type Reclaimer interface {
	Reclaim(ctx context.Context, step policy.ReclaimStep, signal policy.Signal, need int64, live []*v1.Pod) ReclaimResult
}

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
	Clock    policy.Clock
	Logger   *slog.Logger
}

// Agent is the decision loop and its state.
type Agent struct {
	opts     Options
	engine   *policy.Engine
	stats    Stats
	pods     Pods
	status   NodeStatus
	evictor  Evictor
	reclaim  Reclaimer
	recorder record.EventRecorder
	metrics  *metrics.Metrics
	log      *slog.Logger

	reloads chan *policy.Config
	// lastHeldBack is the last "why no eviction" logged, so it is logged at
	// Info once per change instead of on every pass.
	lastHeldBack string

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
	Recorder  record.EventRecorder
	Metrics   *metrics.Metrics
}

// New returns an agent deciding with cfg.
func New(cfg *policy.Config, deps Deps, opts Options) *Agent {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	a := &Agent{opts: opts, engine: policy.NewEngine(cfg, opts.Clock, opts.SelfUID),
		stats: deps.Stats, pods: deps.Pods, status: deps.Status, evictor: deps.Evictor, reclaim: deps.Reclaimer,
		recorder: deps.Recorder, metrics: deps.Metrics, log: opts.Logger, reloads: make(chan *policy.Config, 1)}
	a.publishThresholds(cfg)
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
	a.pass(ctx, "start")
	for {
		select {
		case <-ctx.Done():
			return
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
	if a.opts.OnConfig != nil {
		a.opts.OnConfig(cfg)
	}
	a.publishThresholds(cfg)
	a.log.Info("configuration applied", "thresholds", len(cfg.Thresholds), "dryRun", cfg.DryRun)
}

// pass is one decision: the steps of DESIGN.md's loop, one call each.
func (a *Agent) pass(ctx context.Context, source string) {
	start := time.Now()
	a.metrics.LoopWakeups.WithLabelValues(source).Inc()
	defer func() { a.metrics.PassDuration.Observe(time.Since(start).Seconds()) }()

	if r, ok := a.evictor.(PendingReporter); ok {
		r.ReportPending(ctx, a.log)
	}
	pods, err := a.pods.List()
	if err != nil {
		a.finishPass(Observed{}, fmt.Sprintf("listing pods: %v", err))
		a.log.Warn("pass skipped: pods unknown", "err", err)
		return
	}
	pods = activePods(pods)
	obs := a.stats.Observe(ctx, pods)
	in := policy.Input{Observations: obs.Observations, Pods: pods, Stats: obs.Pods, Layout: obs.Layout}

	assessment := a.engine.Assess(in)
	a.publish(assessment, obs)
	a.finishPass(obs, "")

	if len(assessment.LocalStorage) > 0 {
		a.evictLocalStorage(ctx, assessment.LocalStorage)
		return
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
		return
	}
	a.noteStarved(starved)

	// Ranking needs every pod's fresh memory and process counts; the
	// assessment holds the same Pods map, so it sees them.
	a.stats.ObserveUsage(ctx, pods, &obs)
	fresh := obs.Observations
	if plan := assessment.NodeReclaim; plan != nil {
		after, sufficient := a.reclaimNode(ctx, plan, pods, obs.Layout)
		fresh = after.Observations
		if sufficient {
			return
		}
	}

	cfg := a.engine.Config()
	sel := a.engine.Select(assessment, fresh, cfg.Escalation.MaxCandidates+cfg.RateLimits.MaxPerPass)
	if sel.Waiting != "" {
		a.heldBack(slog.LevelInfo, "no eviction this pass", "signal", starved.Threshold.Signal, "why", sel.Waiting)
		return
	}
	if len(sel.Candidates) == 0 {
		a.heldBack(slog.LevelWarn, "unable to evict any pods from the node", "signal", starved.Threshold.Signal,
			"excluded", len(sel.Excluded), "why", excludedSummary(sel.Excluded))
		return
	}
	a.lastHeldBack = ""
	a.metrics.StatsAge.WithLabelValues(string(starved.Threshold.Signal)).Observe(time.Since(fresh[starved.Threshold.Signal].Time).Seconds())
	a.evict(ctx, sel.Candidates, fresh)
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
// node; sufficient is true when no threshold is met any more (the kubelet's
// check after reclaimNodeLevelResources), so no pod needs to go.
func (a *Agent) reclaimNode(ctx context.Context, plan *policy.NodeReclaim, pods []*v1.Pod, layout policy.FilesystemLayout) (Observed, bool) {
	if a.reclaim == nil {
		return a.stats.Observe(ctx, pods), false
	}
	var freed int64
	var done []string
	for _, step := range plan.Steps {
		r := a.reclaim.Reclaim(ctx, step, plan.Signal, plan.Need-freed, pods)
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
	sufficient := a.engine.ReclaimSufficient(after.Observations, layout)
	verdict := "thresholds still met: evicting"
	if sufficient {
		verdict = "no threshold met any more: no eviction"
	}
	a.log.Info("node-level reclaim", "signal", plan.Signal, "need", policy.FormatValue(plan.Signal, plan.Need),
		"freed", policy.FormatValue(plan.Signal, freed), "steps", strings.Join(done, "; "), "result", verdict)
	a.recorder.Eventf(nodeRef(a.opts.NodeName), v1.EventTypeNormal, "NodeReclaim",
		"Node-level reclaim for %s: needed %s, freed %s (%s); %s", plan.Signal,
		policy.FormatValue(plan.Signal, plan.Need), policy.FormatValue(plan.Signal, freed), strings.Join(done, "; "), verdict)
	return after, sufficient
}

// evict hands the ranked candidates to the evictor and records the outcome.
func (a *Agent) evict(ctx context.Context, cands []policy.Candidate, obs policy.Observations) {
	res := a.evictor.Evict(ctx, cands)
	signal := string(cands[0].Signal)
	a.metrics.Evictions.WithLabelValues(signal, res.Outcome).Inc()
	if res.Victim == nil {
		if res.Err != nil {
			a.log.Warn("eviction not done", "signal", signal, "outcome", res.Outcome, "err", res.Err)
		}
		return
	}
	v := res.Victim
	o := obs[v.Signal]
	msg := "pod evicted"
	if res.Outcome == "dry_run" {
		msg = "dry run: pod would be evicted"
	}
	a.log.Warn(msg, "outcome", res.Outcome, "pod", v.Pod.Namespace+"/"+v.Pod.Name, "uid", v.Pod.UID,
		"signal", v.Signal, "hard", v.Hard, "gracePeriodSeconds", v.GracePeriodSeconds,
		"available", policy.FormatValue(v.Signal, o.Available), "why", v.Reason, "message", v.Message)
	if res.Outcome == "dry_run" {
		a.recorder.AnnotatedEventf(v.Pod, v.Annotations, v1.EventTypeWarning, "WouldEvict",
			"Dry run: would evict. %s(%s)", v.Message, v.Reason)
		return
	}
	at := res.At
	if at.IsZero() {
		at = a.opts.Clock.Now()
	}
	a.engine.EvictedAt(*v, at)
}

// evictLocalStorage evicts pods over their local storage limits, up to the
// per-pass maximum (the kubelet evicts all of them in one pass).
func (a *Agent) evictLocalStorage(ctx context.Context, cands []policy.Candidate) {
	maxPerPass := a.engine.Config().RateLimits.MaxPerPass
	for i, c := range cands {
		if i >= maxPerPass {
			a.log.Info("local-storage evictions deferred to the next pass", "remaining", len(cands)-i, "maxPerPass", maxPerPass)
			return
		}
		a.evict(ctx, []policy.Candidate{c}, nil)
	}
}

// publish exports the assessment: metrics and node conditions.
func (a *Agent) publish(as *policy.Assessment, obs Observed) {
	m := a.metrics
	for sig, o := range obs.Observations {
		m.SignalAvailable.WithLabelValues(string(sig)).Set(float64(o.Available))
		m.SignalCapacity.WithLabelValues(string(sig)).Set(float64(o.Capacity))
	}
	for sig := range obs.Missing {
		m.SignalAvailable.DeleteLabelValues(string(sig))
		m.SignalCapacity.DeleteLabelValues(string(sig))
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
			m.Threshold.WithLabelValues(string(t.Signal), kind).Set(float64(t.Value.Resolve(o.Capacity)))
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
		a.status.SetConditions(as.Conditions)
	}
}

// publishThresholds resets the threshold gauges to the configuration's set.
func (a *Agent) publishThresholds(cfg *policy.Config) {
	a.metrics.Threshold.Reset()
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
