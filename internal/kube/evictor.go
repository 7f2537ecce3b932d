package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/utils/clock"

	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/statefile"
)

// EscalationAction is the hard-pressure step after every candidate tried through the
// Eviction API was refused by a PodDisruptionBudget.
type EscalationAction string

const (
	// EscalateDelete deletes the highest-ranked refused candidate directly (UID
	// precondition, the candidate's grace period), bypassing its PDB as the kubelet's own
	// eviction would a moment later; if that fails too, the pass stops.
	EscalateDelete EscalationAction = "Delete"
	// EscalateStop gives up for this pass and leaves the node to the kubelet's hard
	// thresholds and the OOM killer.
	EscalateStop EscalationAction = "Stop"
)

// EscalationOptions is the hard-pressure ladder when PDBs refuse evictions:
//  1. try up to MaxCandidates pods, in rank order, through the Eviction API;
//  2. then AfterBlocked (Delete: delete the first refused candidate);
//  3. then stop for this pass.
//
// Every step records a Warning Event on the Node. Soft pressure never escalates: it tries
// the next candidate (up to SoftMaxCandidates) and then waits for the next pass.
type EscalationOptions struct {
	// MaxCandidates is how many pods hard pressure tries through the Eviction API in one
	// pass before AfterBlocked (config eviction.pdbEscalation.maxCandidates).
	MaxCandidates int
	// AfterBlocked is the step after MaxCandidates refusals (config
	// eviction.pdbEscalation.delete: true = EscalateDelete, false = EscalateStop).
	AfterBlocked EscalationAction
	// SoftMaxCandidates bounds the Eviction API calls one soft-pressure pass makes when
	// PDBs refuse (config eviction.pdbEscalation.softMaxCandidates).
	SoftMaxCandidates int
}

// RateLimitOptions bound how fast evictiond disrupts pods. They apply to soft and hard
// pressure alike: the kubelet's hard thresholds remain the backstop when they hold
// evictiond back. Dry-run is paced by them too. (The per-pass maximum is the loop's:
// it is the only caller that evicts several pods in one pass.)
type RateLimitOptions struct {
	// PerMinute is the token bucket's refill rate, in evictions per minute.
	PerMinute float64
	// Burst is the token bucket's size.
	Burst int
	// CoolDown is the minimum time from one threshold eviction to the next (local-storage
	// limit violations, which the kubelet evicts all at once, are exempt).
	CoolDown time.Duration
}

// LocalStopOptions is the escape hatch for hard pressure while the API server is
// unreachable (config eviction.apiUnreachable).
type LocalStopOptions struct {
	// Enabled stops the chosen pod through Stopper (the CRI) when the API server has been
	// unreachable for After while a hard threshold holds.
	Enabled bool
	// After is how long the API server must have been unreachable first.
	After time.Duration
	// Stopper is the CRI client; required when Enabled.
	Stopper LocalPodStopper
	// JournalPath keeps unreported local stops in a file, so they are still reported
	// after evictiond restarts. "" keeps them in memory only; the DaemonSet's state
	// directory (/var/lib/evictiond/local-stops.json) is the place for it.
	JournalPath string
}

// EvictorOptions configures an Evictor. The configuration's values come from
// EvictorOptionsFromConfig (policy.Compile sets their defaults); the rest is wiring.
type EvictorOptions struct {
	// NodeName is this node; Events name it and only its pods are ever evicted.
	NodeName string
	// DryRun logs "would evict" and writes nothing at all (no eviction, no Event).
	DryRun bool
	// Escalation is the PDB ladder.
	Escalation EscalationOptions
	// RateLimit bounds the eviction rate.
	RateLimit RateLimitOptions
	// LocalStop is the CRI stop while the API server is unreachable.
	LocalStop LocalStopOptions
	// APITimeout bounds each API call; a call that times out counts as "API server
	// unreachable".
	APITimeout time.Duration
	// APIReachable says whether the API server answered recently (Reachability.Reachable):
	// local stops are reported only then.
	APIReachable func() bool
	// Clock drives cool-down, token bucket and unreachable time.
	Clock clock.Clock
	// Logger receives one structured record per decision.
	Logger *slog.Logger
}

// DefaultAPITimeout bounds one API call of the Evictor.
const DefaultAPITimeout = 5 * time.Second

// EvictorOptionsFromConfig maps the configuration's eviction section onto EvictorOptions;
// the caller adds NodeName, LocalStop.Stopper, APIReachable, Clock and Logger.
func EvictorOptionsFromConfig(c *policy.Config) EvictorOptions {
	after := EscalateStop
	if c.Escalation.Delete {
		after = EscalateDelete
	}
	journal := ""
	if c.Reclaim.ImageStateFile != "" {
		// The state directory the DaemonSet mounts for the image state.
		journal = filepath.Join(filepath.Dir(c.Reclaim.ImageStateFile), "local-stops.json")
	}
	return EvictorOptions{DryRun: c.DryRun,
		Escalation: EscalationOptions{MaxCandidates: c.Escalation.MaxCandidates, SoftMaxCandidates: c.Escalation.SoftMaxCandidates, AfterBlocked: after},
		RateLimit:  RateLimitOptions{PerMinute: c.RateLimits.PerMinute, Burst: c.RateLimits.Burst, CoolDown: c.RateLimits.Cooldown},
		LocalStop:  LocalStopOptions{Enabled: c.APIUnreachable.CRIStop, After: c.APIUnreachable.After, JournalPath: journal},
		APITimeout: DefaultAPITimeout}
}

func (o *EvictorOptions) validate() error {
	var errs []error
	fail := func(field string, value any, rule string) {
		errs = append(errs, fmt.Errorf("evictor: %s: value %v: %s", field, value, rule))
	}
	if o.NodeName == "" {
		fail("NodeName", `""`, "must not be empty")
	}
	switch o.Escalation.AfterBlocked {
	case EscalateDelete, EscalateStop:
	default:
		fail("Escalation.AfterBlocked", fmt.Sprintf("%q", o.Escalation.AfterBlocked), fmt.Sprintf("must be %q or %q", EscalateDelete, EscalateStop))
	}
	if o.Escalation.MaxCandidates < 1 {
		fail("Escalation.MaxCandidates", o.Escalation.MaxCandidates, "must be at least 1")
	}
	if o.Escalation.SoftMaxCandidates < 1 {
		fail("Escalation.SoftMaxCandidates", o.Escalation.SoftMaxCandidates, "must be at least 1")
	}
	if o.RateLimit.PerMinute <= 0 {
		fail("RateLimit.PerMinute", o.RateLimit.PerMinute, "must be positive")
	}
	if o.RateLimit.Burst < 1 {
		fail("RateLimit.Burst", o.RateLimit.Burst, "must be at least 1")
	}
	if o.RateLimit.CoolDown < 0 {
		fail("RateLimit.CoolDown", o.RateLimit.CoolDown, "must not be negative")
	}
	if o.LocalStop.Enabled && o.LocalStop.Stopper == nil {
		fail("LocalStop.Enabled", true, "needs LocalStop.Stopper (the CRI client)")
	}
	if o.LocalStop.Enabled && o.LocalStop.After <= 0 {
		fail("LocalStop.After", o.LocalStop.After, "must be positive")
	}
	if o.APITimeout <= 0 {
		fail("APITimeout", o.APITimeout, "must be positive")
	}
	if o.APIReachable == nil {
		fail("APIReachable", "nil", "must be set (Reachability.Reachable)")
	}
	if o.Clock == nil {
		fail("Clock", "nil", "must be set (clock.RealClock{})")
	}
	if o.Logger == nil {
		fail("Logger", "nil", "must be set")
	}
	return errors.Join(errs...)
}

// Evictor evicts pods of one node, one victim per call, and implements the loop's
// agent.Evictor. It is used by the single loop goroutine.
// Waiting for the victim to be gone is the policy engine's business, not the Evictor's.
type Evictor struct {
	client   Interface
	recorder EventRecorder
	limiter  *rate.Limiter

	mu               sync.Mutex
	opts             EvictorOptions
	coolDownUntil    time.Time
	unreachableSince time.Time // zero while the API server answers
	localStops       []localStop
	lastReport       time.Time
}

type localStop struct {
	candidate Candidate
	at        time.Time
}

// NewEvictor returns an Evictor that evicts through client and records Events with
// recorder.
func NewEvictor(client Interface, recorder EventRecorder, opts EvictorOptions) (*Evictor, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	e := &Evictor{
		client:   client,
		recorder: recorder,
		opts:     opts,
		limiter:  rate.NewLimiter(rate.Limit(opts.RateLimit.PerMinute/60), opts.RateLimit.Burst),
	}
	if opts.LocalStop.JournalPath != "" {
		e.localStops = e.loadJournal(opts.LocalStop.JournalPath)
	}
	return e, nil
}

// loadJournal reads the local-stop journal at start. A journal that cannot be
// trusted (undecodable, truncated, oversized) is moved aside for the operator,
// with a Warning Event on the Node and a log line, and the agent starts with
// no stops to report: those stops happened and their pods are gone from the
// node; only their Events are lost. A journal that cannot be read is left in
// place and reported the same way. Either way the agent starts.
func (e *Evictor) loadJournal(path string) []localStop {
	log := e.opts.Logger
	stops, temps, err := loadLocalStops(path)
	if len(temps) > 0 {
		log.Info("removed the temporary files of an interrupted local-stop journal write", "path", path, "removed", temps)
	}
	if err == nil {
		return stops
	}
	if !errors.Is(err, errJournalCorrupt) {
		log.Error("local-stop journal unreadable; starting without its stops", "path", path, "err", err)
		e.recorder.Eventf(NodeRef(e.opts.NodeName), corev1.EventTypeWarning, EventReasonLocalStopJournalCorrupt,
			"local-stop journal %s unreadable (%v): left in place; local stops it records will not be reported", path, err)
		return nil
	}
	aside, mvErr := statefile.MoveAside(path, e.opts.Clock.Now())
	if mvErr != nil {
		// Still start: the next save replaces the file.
		log.Error("local-stop journal corrupt and not moved aside; starting without its stops", "path", path, "err", err, "moveErr", mvErr)
		e.recorder.Eventf(NodeRef(e.opts.NodeName), corev1.EventTypeWarning, EventReasonLocalStopJournalCorrupt,
			"local-stop journal %s corrupt (%v) and could not be moved aside (%v): local stops it records will not be reported", path, err, mvErr)
		return nil
	}
	log.Warn("local-stop journal corrupt, moved aside; starting without its stops", "path", path, "movedTo", aside, "err", err)
	e.recorder.Eventf(NodeRef(e.opts.NodeName), corev1.EventTypeWarning, EventReasonLocalStopJournalCorrupt,
		"local-stop journal %s corrupt (%v): moved to %s; local stops it records will not be reported", path, err, aside)
	return nil
}

// Reconfigure applies new options (a configuration reload, dry run switched on or off)
// and keeps the token bucket's tokens, the cool-down and the queue of local stops to
// report; a new journal path receives the queue. On error nothing changes.
func (e *Evictor) Reconfigure(opts EvictorOptions) error {
	if err := opts.validate(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := opts.Clock.Now()
	e.limiter.SetLimitAt(now, rate.Limit(opts.RateLimit.PerMinute/60))
	e.limiter.SetBurstAt(now, opts.RateLimit.Burst)
	moved := opts.LocalStop.JournalPath != e.opts.LocalStop.JournalPath
	e.opts = opts
	if moved {
		e.persistLocalStopsLocked()
	}
	return nil
}

// options returns the options in force.
func (e *Evictor) options() EvictorOptions {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.opts
}

// persistLocalStopsLocked writes the journal, if configured; e.mu must be held. A
// failure is logged: the stop itself happened and stays reported from memory.
func (e *Evictor) persistLocalStopsLocked() {
	if e.opts.LocalStop.JournalPath == "" {
		return
	}
	if err := saveLocalStops(e.opts.LocalStop.JournalPath, e.localStops); err != nil {
		e.opts.Logger.Error("local-stop journal not saved", "path", e.opts.LocalStop.JournalPath, "err", err)
	}
}

// Evict tries candidates (ranked, most evictable first, all for the same pressure) until
// one pod is evicted, within the token bucket, the cool-down and the escalation ladder.
// It never evicts more than one pod and never waits for it: the policy engine tracks the
// victim until it is gone. Its steps: the cool-down, the ladder of eviction requests,
// then for hard pressure refused by every budget tried, the escalation.
func (e *Evictor) Evict(ctx context.Context, candidates []Candidate) eviction.Result {
	if len(candidates) == 0 {
		return eviction.Result{Outcome: eviction.OutcomeNoCandidates}
	}
	if candidates[0].Escalated {
		return e.requestAgain(ctx, candidates[0])
	}
	p := evictPass{opts: e.options(), candidates: candidates}
	p.now = p.opts.Clock.Now()
	if res, held := e.coolingDown(p); held {
		return res
	}
	res, refused, done := e.climbLadder(ctx, p)
	if done || !candidates[0].Hard || len(refused) == 0 {
		return res
	}
	return e.escalate(ctx, p, refused, res)
}

// evictPass is what one Evict call decides with.
type evictPass struct {
	opts       EvictorOptions
	now        time.Time
	candidates []Candidate
}

// ladderLength is how many candidates one call may try: the PDB ladder for
// this kind of pressure.
func (p evictPass) ladderLength() int {
	if p.candidates[0].Hard {
		return min(len(p.candidates), p.opts.Escalation.MaxCandidates)
	}
	return min(len(p.candidates), p.opts.Escalation.SoftMaxCandidates)
}

// coolingDown holds a threshold eviction back within the cool-down of the
// last one (a local-storage eviction is not held).
func (e *Evictor) coolingDown(p evictPass) (eviction.Result, bool) {
	if until := e.coolDownEnd(); p.now.Before(until) && !p.candidates[0].LocalStorage {
		p.opts.Logger.Info("eviction held back by cool-down", "until", until, "signal", p.candidates[0].Signal)
		return eviction.Result{Outcome: eviction.OutcomeCoolingDown}, true
	}
	return eviction.Result{}, false
}

// takeToken reserves one disruption from the token bucket; false when it is
// empty (the reservation is then cancelled).
func (e *Evictor) takeToken(now time.Time) (*rate.Reservation, bool) {
	r := e.limiter.ReserveN(now, 1)
	if !r.OK() || r.DelayFrom(now) > 0 {
		r.CancelAt(now)
		return r, false
	}
	return r, true
}

// climbLadder requests the eviction of each candidate of the ladder in turn
// until one is evicted or the answer ends the pass; it returns the candidates
// refused by a PodDisruptionBudget, and done when the result is final.
func (e *Evictor) climbLadder(ctx context.Context, p evictPass) (res eviction.Result, refused []Candidate, done bool) {
	opts, log, now := p.opts, p.opts.Logger, p.now
	hard, tries := p.candidates[0].Hard, p.ladderLength()
	for i := range tries {
		c := p.candidates[i]
		if c.Pod.Spec.NodeName != opts.NodeName {
			// The informers only hold this node's pods; anything else is a caller bug,
			// and evicting another node's pod is exactly what RBAC cannot prevent.
			res.Err = fmt.Errorf("candidate %s/%s: spec.nodeName %q: must be this node %q",
				c.Pod.Namespace, c.Pod.Name, c.Pod.Spec.NodeName, opts.NodeName)
			res.Outcome = eviction.OutcomeNoCandidates
			return res, refused, true
		}
		reservation, ok := e.takeToken(now)
		if !ok {
			res.Outcome = eviction.OutcomeRateLimited
			log.Info("eviction held back by the token bucket", "perMinute", opts.RateLimit.PerMinute, "burst", opts.RateLimit.Burst)
			return res, refused, true
		}
		if opts.DryRun {
			// Rate limits and cool-down apply in dry-run too, so its log shows the
			// evictions a real run would make, at the pace it would make them.
			log.Info("would evict pod", podAttrs(c)...)
			e.startCoolDown(now)
			res.Outcome, res.Victim = eviction.OutcomeDryRun, &c
			return res, refused, true
		}
		err := e.evictThroughAPI(ctx, c)
		e.noteReachability(err)
		outcome := classify(err)
		res.Attempts = append(res.Attempts, eviction.Attempt{Pod: podKey(c.Pod), UID: c.Pod.UID, Action: "evict", Outcome: outcome, Err: err})
		if outcome != eviction.OutcomeEvicted {
			reservation.CancelAt(now)
		}
		switch outcome {
		case eviction.OutcomeEvicted:
			e.recordEvicted(c, "")
			log.Info("evicted pod", append(podAttrs(c), "attempt", i+1)...)
			e.startCoolDown(now)
			res.Outcome, res.Victim = eviction.OutcomeEvicted, &c
			return res, refused, true
		case eviction.OutcomePDBBlocked:
			refused = append(refused, c)
			log.Info("eviction refused by a PodDisruptionBudget", append(podAttrs(c), "attempt", i+1, "of", tries)...)
			if hard {
				e.recorder.Eventf(NodeRef(opts.NodeName), corev1.EventTypeWarning, EventReasonEvictionBlocked,
					"Hard %s pressure: eviction of pod %s/%s refused by its PodDisruptionBudget (candidate %d of %d)",
					c.Signal, c.Pod.Namespace, c.Pod.Name, i+1, tries)
			}
			continue
		case eviction.OutcomeAPIError:
			if hard && e.localStopDue(ctx, err) {
				return e.stopLocally(ctx, c, res), refused, true
			}
			res.Outcome, res.Err = outcome, fmt.Errorf("evicting pod %s/%s: %w", c.Pod.Namespace, c.Pod.Name, err)
			log.Warn("eviction failed", append(podAttrs(c), "err", err)...)
			return res, refused, true
		default:
			// Gone (NotFound, or the UID precondition failed because a new pod took the
			// name) or throttled: the numbers this pass decided on are no longer true.
			res.Outcome, res.Err = outcome, err
			log.Info("eviction not done", append(podAttrs(c), "outcome", outcome, "err", err)...)
			return res, refused, true
		}
	}
	res.Outcome = eviction.OutcomePDBBlocked
	return res, refused, false
}

// escalate is the end of the ladder under hard pressure: every candidate
// tried was refused by its PodDisruptionBudget. With EscalateDelete the first
// refused is deleted without its budget; otherwise, or when that fails,
// nothing is evicted this pass and the node is told so.
func (e *Evictor) escalate(ctx context.Context, p evictPass, refused []Candidate, res eviction.Result) eviction.Result {
	opts, log := p.opts, p.opts.Logger
	if opts.Escalation.AfterBlocked == EscalateDelete {
		var done bool
		if res, done = e.deleteRefused(ctx, p, refused, res); done {
			return res
		}
	}
	e.recorder.Eventf(NodeRef(opts.NodeName), corev1.EventTypeWarning, EventReasonEvictionGaveUp,
		"Hard %s pressure: no pod could be evicted this pass (%d refused by PodDisruptionBudgets, escalation %s)",
		p.candidates[0].Signal, len(refused), opts.Escalation.AfterBlocked)
	log.Warn("eviction ladder exhausted", "signal", p.candidates[0].Signal, "refused", len(refused), "escalation", opts.Escalation.AfterBlocked)
	return res
}

// deleteRefused deletes the first refused candidate without its budget; done
// is false when the delete failed and the ladder ends without a victim.
func (e *Evictor) deleteRefused(ctx context.Context, p evictPass, refused []Candidate, res eviction.Result) (eviction.Result, bool) {
	log, now := p.opts.Logger, p.now
	c := refused[0]
	// The delete is a disruption like an eviction: it takes a token too.
	reservation, ok := e.takeToken(now)
	if !ok {
		res.Outcome = eviction.OutcomeRateLimited
		log.Info("escalation delete held back by the token bucket", append(podAttrs(c), "perMinute", p.opts.RateLimit.PerMinute)...)
		return res, true
	}
	e.recorder.Eventf(NodeRef(p.opts.NodeName), corev1.EventTypeWarning, EventReasonEscalatedToDelete,
		"Hard %s pressure: %d candidates refused by PodDisruptionBudgets; deleting pod %s/%s without its budget",
		c.Signal, len(refused), c.Pod.Namespace, c.Pod.Name)
	err := e.deleteThroughAPI(ctx, c)
	e.noteReachability(err)
	outcome := classify(err)
	if outcome == eviction.OutcomeEvicted {
		outcome = eviction.OutcomeDeleted
	}
	res.Attempts = append(res.Attempts, eviction.Attempt{Pod: podKey(c.Pod), UID: c.Pod.UID, Action: "delete", Outcome: outcome, Err: err})
	if outcome == eviction.OutcomeDeleted {
		e.recordEvicted(c, " Its PodDisruptionBudget was overridden: the node was under hard pressure and no other candidate could be evicted.")
		log.Warn("deleted pod despite its PodDisruptionBudget", podAttrs(c)...)
		e.startCoolDown(now)
		res.Outcome, res.Victim = eviction.OutcomeDeleted, &c
		return res, true
	}
	reservation.CancelAt(now)
	if outcome == eviction.OutcomeGone {
		// It went away by itself (or was replaced) since it was ranked: re-measure.
		res.Outcome, res.Err = outcome, err
		log.Info("escalation delete found the pod gone", append(podAttrs(c), "err", err)...)
		return res, true
	}
	if outcome == eviction.OutcomeAPIError && e.localStopDue(ctx, err) {
		return e.stopLocally(ctx, c, res), true
	}
	res.Err = fmt.Errorf("deleting pod %s/%s: %w", c.Pod.Namespace, c.Pod.Name, err)
	log.Warn("escalation delete failed", append(podAttrs(c), "err", err)...)
	return res, false
}

// evictThroughAPI posts a policy/v1 Eviction whose delete options carry the candidate's
// UID as precondition: a new pod that took the name since it was ranked is never hit.
func (e *Evictor) evictThroughAPI(ctx context.Context, c Candidate) error {
	ctx, cancel := context.WithTimeout(ctx, e.options().APITimeout)
	defer cancel()
	uid := c.Pod.UID
	grace := c.GracePeriodSeconds
	eviction := &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: c.Pod.Name, Namespace: c.Pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{
			GracePeriodSeconds: &grace,
			Preconditions:      &metav1.Preconditions{UID: &uid},
		},
	}
	return e.client.PolicyV1().Evictions(c.Pod.Namespace).Evict(ctx, eviction)
}

func (e *Evictor) deleteThroughAPI(ctx context.Context, c Candidate) error {
	ctx, cancel := context.WithTimeout(ctx, e.options().APITimeout)
	defer cancel()
	uid := c.Pod.UID
	grace := c.GracePeriodSeconds
	return e.client.CoreV1().Pods(c.Pod.Namespace).Delete(ctx, c.Pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace,
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
}

// startCoolDown starts the cool-down after a pod was taken down (or, in dry run, would be).
func (e *Evictor) startCoolDown(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.coolDownUntil = now.Add(e.opts.RateLimit.CoolDown)
}

// noteReachability tracks since when the API server has been unreachable.
func (e *Evictor) noteReachability(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case !isUnreachable(err):
		e.unreachableSince = time.Time{}
	case e.unreachableSince.IsZero():
		e.unreachableSince = e.opts.Clock.Now()
	}
}

// localStopDue reports whether err (from the pass's context ctx) should lead to a local
// stop: enabled, the API server unreachable (not our own shutdown), for LocalStop.After.
func (e *Evictor) localStopDue(ctx context.Context, err error) bool {
	opts := e.options()
	if !opts.LocalStop.Enabled || !isUnreachable(err) || ctx.Err() != nil {
		return false
	}
	e.mu.Lock()
	since := e.unreachableSince
	e.mu.Unlock()
	down := opts.Clock.Since(since)
	if down < opts.LocalStop.After {
		opts.Logger.Warn("API server unreachable under hard pressure; local stop not due yet",
			"unreachableFor", down.Round(time.Millisecond), "after", opts.LocalStop.After)
		return false
	}
	return true
}

func (e *Evictor) coolDownEnd() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.coolDownUntil
}

// stopLocally stops the candidate through the CRI because the API server cannot be
// reached under hard pressure, and remembers it for ReportLocalStops.
//
// The stop is journaled before it is made (write-ahead): evictiond killed
// between the CRI call and the journal write would otherwise leave a pod
// stopped that nobody reports or deletes, for the kubelet to restart on a node
// still short of the resource. A stop that fails is taken out again; one
// journaled by a process killed before it could say whether the stop worked is
// reported like a stop, which deletes the pod through the API the ordinary way.
func (e *Evictor) stopLocally(ctx context.Context, c Candidate, res eviction.Result) eviction.Result {
	opts := e.options()
	now := opts.Clock.Now()
	e.mu.Lock()
	e.localStops = append(e.localStops, localStop{candidate: c, at: now})
	e.persistLocalStopsLocked()
	e.mu.Unlock()
	err := opts.LocalStop.Stopper.StopPodSandboxByPodUID(ctx, c.Pod.UID)
	res.Attempts = append(res.Attempts, eviction.Attempt{Pod: podKey(c.Pod), UID: c.Pod.UID, Action: "local-stop", Outcome: eviction.OutcomeStoppedLocally, Err: err})
	if err != nil {
		e.mu.Lock()
		e.localStops = slices.DeleteFunc(e.localStops, func(s localStop) bool { return s.candidate.Pod.UID == c.Pod.UID && s.at.Equal(now) })
		e.persistLocalStopsLocked()
		e.mu.Unlock()
		res.Outcome, res.Err = eviction.OutcomeAPIError, fmt.Errorf("stopping pod %s/%s through the CRI: %w", c.Pod.Namespace, c.Pod.Name, err)
		opts.Logger.Error("local stop failed", append(podAttrs(c), "err", err)...)
		return res
	}
	e.startCoolDown(now)
	opts.Logger.Warn("API server unreachable under hard pressure: stopped pod through the CRI", podAttrs(c)...)
	res.Outcome, res.Victim = eviction.OutcomeStoppedLocally, &c
	return res
}

// PendingLocalStops is the number of local stops not yet reported to the API server.
func (e *Evictor) PendingLocalStops() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.localStops)
}

// localStopReportInterval spaces the attempts to report local stops, so a flapping API
// server does not cost the loop a request every pass.
const localStopReportInterval = 10 * time.Second

// ReportPending is the loop's turn for queued work: once the API server answers again
// (APIReachable), it reports the pods stopped through the CRI meanwhile, at most every
// localStopReportInterval.
func (e *Evictor) ReportPending(ctx context.Context, log *slog.Logger) {
	opts := e.options()
	now := opts.Clock.Now()
	e.mu.Lock()
	due := len(e.localStops) > 0 && now.Sub(e.lastReport) >= localStopReportInterval
	e.mu.Unlock()
	if !due || !opts.APIReachable() {
		return
	}
	e.mu.Lock()
	e.lastReport = now
	e.mu.Unlock()
	n, err := e.ReportLocalStops(ctx)
	if err != nil {
		log.Warn("local stops not all reported; retrying", "reported", n, "pending", e.PendingLocalStops(), "err", err)
	}
}

// ReportLocalStops, once the API server answers again, records for each pod stopped
// through the CRI a Warning Event on the pod and on the node, and deletes the pod
// (UID precondition) so its controller replaces it instead of the kubelet restarting
// its sandbox on a node still short of the resource. It returns the number reported;
// stops that could not be reported stay queued.
func (e *Evictor) ReportLocalStops(ctx context.Context) (int, error) {
	opts := e.options()
	e.mu.Lock()
	stops := e.localStops
	e.localStops = nil
	e.mu.Unlock()
	if len(stops) == 0 {
		return 0, nil
	}
	var failed []localStop
	var firstErr error
	for _, s := range stops {
		c := s.candidate
		err := e.deleteThroughAPI(ctx, c)
		e.noteReachability(err)
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			failed = append(failed, s)
			if firstErr == nil {
				firstErr = fmt.Errorf("reporting local stop of pod %s/%s: %w", c.Pod.Namespace, c.Pod.Name, err)
			}
			continue
		}
		msg := fmt.Sprintf("Stopped through the CRI at %s while the API server was unreachable under hard %s pressure. %s",
			s.at.UTC().Format(time.RFC3339), c.Signal, c.Message)
		e.recorder.AnnotatedEventf(c.Pod, c.Annotations, corev1.EventTypeWarning, EventReasonStoppedLocally, "%s", msg)
		e.recorder.Eventf(NodeRef(opts.NodeName), corev1.EventTypeWarning, EventReasonStoppedLocally,
			"Pod %s/%s: %s", c.Pod.Namespace, c.Pod.Name, msg)
		opts.Logger.Info("reported local stop", podAttrs(c)...)
	}
	e.mu.Lock()
	e.localStops = append(failed, e.localStops...)
	e.persistLocalStopsLocked()
	e.mu.Unlock()
	return len(stops) - len(failed), firstErr
}

func (e *Evictor) recordEvicted(c Candidate, suffix string) {
	e.recorder.AnnotatedEventf(c.Pod, c.Annotations, corev1.EventTypeWarning, EventReasonEvicted, "%s", c.Message+suffix)
}

// classify maps an API answer onto an Outcome.
func classify(err error) eviction.Outcome {
	switch {
	case err == nil:
		return eviction.OutcomeEvicted
	case apierrors.IsTooManyRequests(err) && hasDisruptionBudgetCause(err):
		return eviction.OutcomePDBBlocked
	case apierrors.IsTooManyRequests(err):
		return eviction.OutcomeThrottled
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return eviction.OutcomeGone
	default:
		return eviction.OutcomeAPIError
	}
}

// hasDisruptionBudgetCause tells a PDB refusal from API priority-and-fairness
// throttling: both are HTTP 429, only the former carries the DisruptionBudget cause.
func hasDisruptionBudgetCause(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, cause := range status.Status().Details.Causes {
		if cause.Type == policyv1.DisruptionBudgetCause {
			return true
		}
	}
	return false
}

// isUnreachable reports whether err means the API server could not be reached at all
// (as opposed to an answer that was an error).
func isUnreachable(err error) bool {
	if err == nil {
		return false
	}
	var netErr net.Error
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout())
}

func podKey(pod *corev1.Pod) types.NamespacedName {
	return types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
}

func podAttrs(c Candidate) []any {
	return []any{"pod", c.Pod.Namespace + "/" + c.Pod.Name, "uid", string(c.Pod.UID), "signal", string(c.Signal),
		"hard", c.Hard, "gracePeriodSeconds", c.GracePeriodSeconds, "expectedReclaim", c.ExpectedReclaim, "reason", c.Reason}
}
