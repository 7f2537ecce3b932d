package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/evictiond/evictiond/internal/policy"
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
//  2. then AfterBlocked (default Delete: delete the first refused candidate);
//  3. then stop for this pass.
//
// Every step records a Warning Event on the Node. Soft pressure never escalates: it tries
// the next candidate (up to SoftMaxCandidates) and then waits for the next pass.
type EscalationOptions struct {
	// MaxCandidates is how many pods hard pressure tries through the Eviction API in one
	// pass before AfterBlocked (config eviction.pdbEscalation.maxCandidates). Default 3.
	MaxCandidates int
	// AfterBlocked is the step after MaxCandidates refusals (config
	// eviction.pdbEscalation.delete: true = EscalateDelete, false = EscalateStop).
	// Default EscalateDelete.
	AfterBlocked EscalationAction
	// SoftMaxCandidates bounds the Eviction API calls one soft-pressure pass makes when
	// PDBs refuse. Default 5.
	SoftMaxCandidates int
}

// RateLimitOptions bound how fast evictiond disrupts pods. They apply to soft and hard
// pressure alike: the kubelet's hard thresholds remain the backstop when they hold
// evictiond back. Dry-run is paced by them too.
type RateLimitOptions struct {
	// MaxPerPass caps the evictions between two StartPass calls (several only for
	// local-storage limit violations; a threshold eviction is one per pass). Default 3.
	MaxPerPass int
	// PerMinute is the token bucket's refill rate, in evictions per minute. Default 10.
	PerMinute float64
	// Burst is the token bucket's size. Default 3.
	Burst int
	// CoolDown is the minimum time from one threshold eviction to the next (local-storage
	// limit violations, which the kubelet evicts all at once, are exempt). Default 1 s.
	CoolDown time.Duration
}

// LocalStopOptions is the escape hatch for hard pressure while the API server is
// unreachable (config eviction.apiUnreachable).
type LocalStopOptions struct {
	// Enabled stops the chosen pod through Stopper (the CRI) when the API server has been
	// unreachable for After while a hard threshold holds. Default false.
	Enabled bool
	// After is how long the API server must have been unreachable first. Default 10 s.
	After time.Duration
	// Stopper is the CRI client; required when Enabled.
	Stopper LocalPodStopper
	// JournalPath keeps unreported local stops in a file, so they are still reported
	// after evictiond restarts. Default "" (memory only); the DaemonSet's state
	// directory (/var/lib/evictiond/local-stops.json) is the place for it.
	JournalPath string
}

// EvictorOptions configures an Evictor. Zero values take the documented defaults.
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
	// WaitForGone < 0: Evict does not wait at all; the caller tracks the victim
	// (the daemon's policy engine does, without blocking its loop).
	// WaitForGone bounds how long Evict waits for its victim to be gone (config
	// loop.podCleanupTimeout). Default 30 s, the kubelet's pod cleanup timeout.
	WaitForGone time.Duration
	// PendingCreditTTL is how long a victim that is still not gone after WaitForGone keeps
	// its expected reclaim credited in PendingReclaim. Default 2 min.
	PendingCreditTTL time.Duration
	// APITimeout bounds each API call; a call that times out counts as "API server
	// unreachable". Default 5 s.
	APITimeout time.Duration
	// Clock drives cool-down, token bucket, unreachable time and credit expiry. Default
	// the real clock.
	Clock clock.Clock
	// Logger receives one structured record per decision. Default slog.Default().
	Logger *slog.Logger
}

func (o *EvictorOptions) setDefaults() {
	if o.Escalation.MaxCandidates <= 0 {
		o.Escalation.MaxCandidates = 3
	}
	if o.Escalation.AfterBlocked == "" {
		o.Escalation.AfterBlocked = EscalateDelete
	}
	if o.Escalation.SoftMaxCandidates <= 0 {
		o.Escalation.SoftMaxCandidates = 5
	}
	if o.RateLimit.MaxPerPass <= 0 {
		o.RateLimit.MaxPerPass = 3
	}
	if o.RateLimit.PerMinute <= 0 {
		o.RateLimit.PerMinute = 10
	}
	if o.RateLimit.Burst <= 0 {
		o.RateLimit.Burst = 3
	}
	if o.RateLimit.CoolDown == 0 {
		o.RateLimit.CoolDown = time.Second
	}
	if o.LocalStop.After <= 0 {
		o.LocalStop.After = 10 * time.Second
	}
	if o.WaitForGone == 0 {
		o.WaitForGone = 30 * time.Second
	}
	if o.PendingCreditTTL <= 0 {
		o.PendingCreditTTL = 2 * time.Minute
	}
	if o.APITimeout <= 0 {
		o.APITimeout = 5 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

func (o *EvictorOptions) validate() error {
	if o.NodeName == "" {
		return errors.New("evictor: NodeName: value \"\": must not be empty")
	}
	switch o.Escalation.AfterBlocked {
	case EscalateDelete, EscalateStop:
	default:
		return fmt.Errorf("evictor: Escalation.AfterBlocked: value %q: must be %q or %q",
			o.Escalation.AfterBlocked, EscalateDelete, EscalateStop)
	}
	if o.RateLimit.CoolDown < 0 {
		return fmt.Errorf("evictor: RateLimit.CoolDown: value %s: must not be negative", o.RateLimit.CoolDown)
	}
	if o.LocalStop.Enabled && o.LocalStop.Stopper == nil {
		return errors.New("evictor: LocalStop.Enabled: value true: needs LocalStop.Stopper (the CRI client)")
	}
	return nil
}

// Outcome is how one Evict call ended.
type Outcome string

const (
	OutcomeEvicted        Outcome = "evicted"         // Eviction API accepted; see Result.Gone
	OutcomeDeleted        Outcome = "deleted"         // hard escalation deleted a PDB-protected pod
	OutcomeStoppedLocally Outcome = "stopped_locally" // API unreachable; stopped through the CRI
	OutcomeDryRun         Outcome = "dry_run"         // would have evicted Result.Victim
	OutcomePDBBlocked     Outcome = "pdb_blocked"     // every candidate tried was refused
	OutcomeGone           Outcome = "gone"            // the candidate vanished or was replaced (NotFound / UID conflict)
	OutcomeThrottled      Outcome = "throttled"       // API priority and fairness answered 429
	OutcomeRateLimited    Outcome = "rate_limited"    // evictiond's token bucket is empty
	OutcomeCoolingDown    Outcome = "cooling_down"    // within CoolDown of the last eviction
	OutcomeAPIError       Outcome = "api_error"       // API unreachable or failing
	OutcomeNoCandidates   Outcome = "no_candidates"
)

// Attempt is one API call Evict made for one candidate.
type Attempt struct {
	Pod     types.NamespacedName
	UID     types.UID
	Action  string // "evict", "delete" or "local-stop"
	Outcome Outcome
	Err     error
}

// Result is what one Evict call did.
type Result struct {
	Outcome Outcome
	// Victim is the candidate evicted, deleted, stopped (or, in dry-run, chosen).
	Victim *Candidate
	// Gone is true when the victim disappeared within WaitForGone.
	Gone     bool
	Attempts []Attempt
	Err      error
}

// Evictor evicts pods of one node, one victim per call. It is used by the single loop
// goroutine; PendingReclaim and ReportLocalStops may be called from it too.
type Evictor struct {
	client   kubernetes.Interface
	pods     corelisters.PodLister
	recorder record.EventRecorder
	opts     EvictorOptions
	limiter  *rate.Limiter

	mu               sync.Mutex
	coolDownUntil    time.Time
	evictedThisPass  int
	unreachableSince time.Time // zero while the API server answers
	pending          map[types.UID]pendingEviction
	localStops       []localStop
}

type pendingEviction struct {
	pod             types.NamespacedName
	signal          policy.Signal
	expectedReclaim int64
	expires         time.Time
}

type localStop struct {
	candidate Candidate
	at        time.Time
}

// NewEvictor returns an Evictor that reads this node's pods from pods (a node-scoped
// lister, see NodeInformers) and records Events with recorder.
func NewEvictor(client kubernetes.Interface, pods corelisters.PodLister, recorder record.EventRecorder, opts EvictorOptions) (*Evictor, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	e := &Evictor{
		client:   client,
		pods:     pods,
		recorder: recorder,
		opts:     opts,
		limiter:  rate.NewLimiter(rate.Limit(opts.RateLimit.PerMinute/60), opts.RateLimit.Burst),
		pending:  map[types.UID]pendingEviction{},
	}
	if opts.LocalStop.JournalPath != "" {
		stops, err := loadLocalStops(opts.LocalStop.JournalPath)
		if err != nil {
			return nil, err
		}
		e.localStops = stops
	}
	return e, nil
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
// one pod is evicted, within the rate limits and the escalation ladder, and then waits
// (bounded by WaitForGone) for that pod to be gone. It never evicts more than one pod.
func (e *Evictor) Evict(ctx context.Context, candidates []Candidate) Result {
	log := e.opts.Logger
	var res Result
	if len(candidates) == 0 {
		res.Outcome = OutcomeNoCandidates
		return res
	}
	now := e.opts.Clock.Now()
	if e.passBudgetSpent() {
		res.Outcome = OutcomeRateLimited
		log.Info("eviction held back: per-pass maximum reached", "maxPerPass", e.opts.RateLimit.MaxPerPass)
		return res
	}
	if until := e.coolDownEnd(); now.Before(until) && !candidates[0].LocalStorage {
		res.Outcome = OutcomeCoolingDown
		log.Info("eviction held back by cool-down", "until", until, "signal", candidates[0].Signal)
		return res
	}
	hard := candidates[0].Hard
	tries := min(len(candidates), e.opts.Escalation.SoftMaxCandidates)
	if hard {
		tries = min(len(candidates), e.opts.Escalation.MaxCandidates)
	}

	var refused []Candidate
	for i := range tries {
		c := candidates[i]
		if c.Pod.Spec.NodeName != e.opts.NodeName {
			// The informers only hold this node's pods; anything else is a caller bug,
			// and evicting another node's pod is exactly what RBAC cannot prevent.
			res.Err = fmt.Errorf("candidate %s/%s: spec.nodeName %q: must be this node %q",
				c.Pod.Namespace, c.Pod.Name, c.Pod.Spec.NodeName, e.opts.NodeName)
			res.Outcome = OutcomeNoCandidates
			return res
		}
		reservation := e.limiter.ReserveN(now, 1)
		if !reservation.OK() || reservation.DelayFrom(now) > 0 {
			reservation.CancelAt(now)
			res.Outcome = OutcomeRateLimited
			log.Info("eviction held back by the token bucket", "perMinute", e.opts.RateLimit.PerMinute, "burst", e.opts.RateLimit.Burst)
			return res
		}
		if e.opts.DryRun {
			// Rate limits and cool-down apply in dry-run too, so its log shows the
			// evictions a real run would make, at the pace it would make them.
			log.Info("would evict pod", podAttrs(c)...)
			e.mu.Lock()
			e.coolDownUntil = now.Add(e.opts.RateLimit.CoolDown)
			e.evictedThisPass++
			e.mu.Unlock()
			res.Outcome, res.Victim = OutcomeDryRun, &c
			return res
		}
		err := e.evictThroughAPI(ctx, c)
		e.noteReachability(err)
		attempt := Attempt{Pod: podKey(c.Pod), UID: c.Pod.UID, Action: "evict", Err: err}
		outcome := classify(err)
		attempt.Outcome = outcome
		res.Attempts = append(res.Attempts, attempt)
		if outcome != OutcomeEvicted {
			reservation.CancelAt(now)
		}
		switch outcome {
		case OutcomeEvicted:
			e.recordEvicted(c, "")
			log.Info("evicted pod", append(podAttrs(c), "attempt", i+1)...)
			return e.afterEviction(ctx, c, OutcomeEvicted, res)
		case OutcomePDBBlocked:
			refused = append(refused, c)
			log.Info("eviction refused by a PodDisruptionBudget", append(podAttrs(c), "attempt", i+1, "of", tries)...)
			if hard {
				e.recorder.Eventf(NodeRef(e.opts.NodeName), corev1.EventTypeWarning, EventReasonEvictionBlocked,
					"Hard %s pressure: eviction of pod %s/%s refused by its PodDisruptionBudget (candidate %d of %d)",
					c.Signal, c.Pod.Namespace, c.Pod.Name, i+1, tries)
			}
			continue
		case OutcomeAPIError:
			if hard && e.localStopDue(ctx, err) {
				return e.stopLocally(ctx, c, res)
			}
			res.Outcome, res.Err = outcome, fmt.Errorf("evicting pod %s/%s: %w", c.Pod.Namespace, c.Pod.Name, err)
			log.Warn("eviction failed", append(podAttrs(c), "err", err)...)
			return res
		default:
			// Gone (NotFound, or the UID precondition failed because a new pod took the
			// name) or throttled: the numbers this pass decided on are no longer true.
			res.Outcome, res.Err = outcome, err
			log.Info("eviction not done", append(podAttrs(c), "outcome", outcome, "err", err)...)
			return res
		}
	}

	res.Outcome = OutcomePDBBlocked
	if !hard || len(refused) == 0 {
		return res
	}
	if e.opts.Escalation.AfterBlocked == EscalateDelete {
		c := refused[0]
		// The delete is a disruption like an eviction: it takes a token too.
		reservation := e.limiter.ReserveN(now, 1)
		if !reservation.OK() || reservation.DelayFrom(now) > 0 {
			reservation.CancelAt(now)
			res.Outcome = OutcomeRateLimited
			log.Info("escalation delete held back by the token bucket", append(podAttrs(c), "perMinute", e.opts.RateLimit.PerMinute)...)
			return res
		}
		e.recorder.Eventf(NodeRef(e.opts.NodeName), corev1.EventTypeWarning, EventReasonEscalatedToDelete,
			"Hard %s pressure: %d candidates refused by PodDisruptionBudgets; deleting pod %s/%s without its budget",
			c.Signal, len(refused), c.Pod.Namespace, c.Pod.Name)
		err := e.deleteThroughAPI(ctx, c)
		e.noteReachability(err)
		outcome := classify(err)
		if outcome == OutcomeEvicted {
			outcome = OutcomeDeleted
		}
		res.Attempts = append(res.Attempts, Attempt{Pod: podKey(c.Pod), UID: c.Pod.UID, Action: "delete", Outcome: outcome, Err: err})
		if outcome == OutcomeDeleted {
			e.recordEvicted(c, " Its PodDisruptionBudget was overridden: the node was under hard pressure and no other candidate could be evicted.")
			log.Warn("deleted pod despite its PodDisruptionBudget", podAttrs(c)...)
			return e.afterEviction(ctx, c, OutcomeDeleted, res)
		}
		reservation.CancelAt(now)
		if outcome == OutcomeGone {
			// It went away by itself (or was replaced) since it was ranked: re-measure.
			res.Outcome, res.Err = outcome, err
			log.Info("escalation delete found the pod gone", append(podAttrs(c), "err", err)...)
			return res
		}
		if outcome == OutcomeAPIError && e.localStopDue(ctx, err) {
			return e.stopLocally(ctx, c, res)
		}
		res.Err = fmt.Errorf("deleting pod %s/%s: %w", c.Pod.Namespace, c.Pod.Name, err)
		log.Warn("escalation delete failed", append(podAttrs(c), "err", err)...)
	}
	e.recorder.Eventf(NodeRef(e.opts.NodeName), corev1.EventTypeWarning, EventReasonEvictionGaveUp,
		"Hard %s pressure: no pod could be evicted this pass (%d refused by PodDisruptionBudgets, escalation %s)",
		candidates[0].Signal, len(refused), e.opts.Escalation.AfterBlocked)
	log.Warn("eviction ladder exhausted", "signal", candidates[0].Signal, "refused", len(refused), "escalation", e.opts.Escalation.AfterBlocked)
	return res
}

// evictThroughAPI posts a policy/v1 Eviction whose delete options carry the candidate's
// UID as precondition: a new pod that took the name since it was ranked is never hit.
func (e *Evictor) evictThroughAPI(ctx context.Context, c Candidate) error {
	ctx, cancel := context.WithTimeout(ctx, e.opts.APITimeout)
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
	ctx, cancel := context.WithTimeout(ctx, e.opts.APITimeout)
	defer cancel()
	uid := c.Pod.UID
	grace := c.GracePeriodSeconds
	return e.client.CoreV1().Pods(c.Pod.Namespace).Delete(ctx, c.Pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace,
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
}

// afterEviction starts the cool-down, credits the victim's expected reclaim and waits,
// bounded, for it to be gone.
func (e *Evictor) afterEviction(ctx context.Context, c Candidate, outcome Outcome, res Result) Result {
	res.Outcome, res.Victim = outcome, &c
	now := e.opts.Clock.Now()
	e.mu.Lock()
	e.coolDownUntil = now.Add(e.opts.RateLimit.CoolDown)
	e.evictedThisPass++
	if e.opts.WaitForGone < 0 {
		// The caller tracks the victim (and PendingReclaim is not asked):
		// an entry here would only accumulate, one per eviction.
		e.mu.Unlock()
		return res
	}
	for uid, p := range e.pending {
		if now.After(p.expires) {
			delete(e.pending, uid) // PendingReclaim may never be called
		}
	}
	e.pending[c.Pod.UID] = pendingEviction{
		pod:             podKey(c.Pod),
		signal:          c.Signal,
		expectedReclaim: c.ExpectedReclaim,
		expires:         now.Add(e.opts.WaitForGone + e.opts.PendingCreditTTL),
	}
	e.mu.Unlock()
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, e.opts.WaitForGone, true, func(context.Context) (bool, error) {
		return e.podGone(podKey(c.Pod), c.Pod.UID), nil
	})
	res.Gone = err == nil
	e.opts.Logger.Info("waited for evicted pod", append(podAttrs(c), "gone", res.Gone, "waited", time.Since(start).Round(time.Millisecond))...)
	return res
}

// podGone is true when the informer no longer has the pod (or has a new one under its
// name), or the pod reached a terminal phase (its containers are stopped).
func (e *Evictor) podGone(key types.NamespacedName, uid types.UID) bool {
	pod, err := e.pods.Pods(key.Namespace).Get(key.Name)
	if err != nil {
		return apierrors.IsNotFound(err)
	}
	return pod.UID != uid || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// PendingReclaim is the expected reclaim, for signal, of evicted pods that are not gone
// yet: the loop adds it to what it observes so it never picks a second victim on numbers
// that predate the first.
func (e *Evictor) PendingReclaim(signal policy.Signal) int64 {
	now := e.opts.Clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	var total int64
	for uid, p := range e.pending {
		if now.After(p.expires) || e.podGone(p.pod, uid) {
			delete(e.pending, uid)
			continue
		}
		if p.signal == signal {
			total += p.expectedReclaim
		}
	}
	return total
}

// StartPass begins a new loop pass for RateLimitOptions.MaxPerPass.
func (e *Evictor) StartPass() {
	e.mu.Lock()
	e.evictedThisPass = 0
	e.mu.Unlock()
}

func (e *Evictor) passBudgetSpent() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.evictedThisPass >= e.opts.RateLimit.MaxPerPass
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
	if !e.opts.LocalStop.Enabled || !isUnreachable(err) || ctx.Err() != nil {
		return false
	}
	e.mu.Lock()
	since := e.unreachableSince
	e.mu.Unlock()
	down := e.opts.Clock.Since(since)
	if down < e.opts.LocalStop.After {
		e.opts.Logger.Warn("API server unreachable under hard pressure; local stop not due yet",
			"unreachableFor", down.Round(time.Millisecond), "after", e.opts.LocalStop.After)
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
func (e *Evictor) stopLocally(ctx context.Context, c Candidate, res Result) Result {
	now := e.opts.Clock.Now()
	e.mu.Lock()
	e.localStops = append(e.localStops, localStop{candidate: c, at: now})
	e.persistLocalStopsLocked()
	e.mu.Unlock()
	err := e.opts.LocalStop.Stopper.StopPodSandboxByPodUID(ctx, c.Pod.UID)
	res.Attempts = append(res.Attempts, Attempt{Pod: podKey(c.Pod), UID: c.Pod.UID, Action: "local-stop", Outcome: OutcomeStoppedLocally, Err: err})
	if err != nil {
		e.mu.Lock()
		e.localStops = slices.DeleteFunc(e.localStops, func(s localStop) bool { return s.candidate.Pod.UID == c.Pod.UID && s.at.Equal(now) })
		e.persistLocalStopsLocked()
		e.mu.Unlock()
		res.Outcome, res.Err = OutcomeAPIError, fmt.Errorf("stopping pod %s/%s through the CRI: %w", c.Pod.Namespace, c.Pod.Name, err)
		e.opts.Logger.Error("local stop failed", append(podAttrs(c), "err", err)...)
		return res
	}
	e.mu.Lock()
	e.coolDownUntil = now.Add(e.opts.RateLimit.CoolDown)
	e.evictedThisPass++
	e.mu.Unlock()
	e.opts.Logger.Warn("API server unreachable under hard pressure: stopped pod through the CRI", podAttrs(c)...)
	res.Outcome, res.Victim = OutcomeStoppedLocally, &c
	return res
}

// PendingLocalStops is the number of local stops not yet reported to the API server.
func (e *Evictor) PendingLocalStops() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.localStops)
}

// ReportLocalStops, once the API server answers again, records for each pod stopped
// through the CRI a Warning Event on the pod and on the node, and deletes the pod
// (UID precondition) so its controller replaces it instead of the kubelet restarting
// its sandbox on a node still short of the resource. It returns the number reported;
// stops that could not be reported stay queued.
func (e *Evictor) ReportLocalStops(ctx context.Context) (int, error) {
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
		e.recorder.Eventf(NodeRef(e.opts.NodeName), corev1.EventTypeWarning, EventReasonStoppedLocally,
			"Pod %s/%s: %s", c.Pod.Namespace, c.Pod.Name, msg)
		e.opts.Logger.Info("reported local stop", podAttrs(c)...)
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
func classify(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeEvicted
	case apierrors.IsTooManyRequests(err) && hasDisruptionBudgetCause(err):
		return OutcomePDBBlocked
	case apierrors.IsTooManyRequests(err):
		return OutcomeThrottled
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return OutcomeGone
	default:
		return OutcomeAPIError
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
