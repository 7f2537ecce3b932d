package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
)

// MemoryReclaimer asks the kernel to take back a pod's reclaimable memory
// (cgroup v2 memory.reclaim): reclaim before evict.
type MemoryReclaimer interface {
	// ReclaimPodMemory asks for bytes from the pod's cgroup; Freed is its
	// memory.current before less after. The kernel reclaiming less than
	// asked is not an error. ErrMemoryReclaimUnsupported: no memory.reclaim
	// (cgroup v1, a kernel before 5.19).
	ReclaimPodMemory(ctx context.Context, pod *v1.Pod, bytes int64) eviction.ReclaimResult
}

// ErrMemoryReclaimUnsupported is a node without memory.reclaim.
var ErrMemoryReclaimUnsupported = errors.New("memory.reclaim is not available (it needs cgroup v2 and a 5.19 or later kernel)")

// MemoryReclaimReport is one pass's reclaim before evict.
type MemoryReclaimReport struct {
	Plan *policy.MemoryReclaimPlan
	// Results are the node's answers, one per target, in the plan's order.
	Results []eviction.ReclaimResult
	// After is the signal's available once reclaimed (re-read), -1 when
	// nothing was asked.
	After int64
	// EvictionAvoided: a hard memory threshold was met before reclaim and
	// none is after it.
	EvictionAvoided bool
}

// Freed is the bytes the pods gave back.
func (r *MemoryReclaimReport) Freed() int64 {
	var n int64
	for _, x := range r.Results {
		n += max(x.Freed, 0)
	}
	return n
}

// memoryReclaimState is what reclaim before evict keeps between passes.
type memoryReclaimState struct {
	// asked is when each pod was last asked (memoryReclaim.podInterval).
	asked map[types.UID]time.Time
	// unsupported is set once the node said it has no memory.reclaim: it
	// is logged once and not asked again.
	unsupported bool
	// lastQuiet is the last "nothing to reclaim" logged, logged once per change.
	lastQuiet string
}

// reclaimMemory is the step before Assess: when a memory signal is within
// memoryReclaim.margin of its threshold, the chosen pods are asked to give
// back page cache and the node is read again, so the assessment (and any
// eviction) sees what the kernel took back. It returns nil when reclaim is
// off or no memory signal is near.
func (a *Agent) reclaimMemory(ctx context.Context, pods []*v1.Pod, obs *Observed) *MemoryReclaimReport {
	cfg := a.engine.Config()
	if a.memReclaimer == nil || a.memState.unsupported {
		return nil
	}
	plan := policy.MemoryReclaimDue(cfg, obs.Observations, obs.Layout)
	if plan == nil {
		a.memState.lastQuiet = ""
		return nil
	}
	now := a.opts.Clock.Now()
	for uid, at := range a.memState.asked {
		if now.Sub(at) >= cfg.MemoryReclaim.PodInterval {
			delete(a.memState.asked, uid)
		}
	}
	a.stats.ObserveUsage(ctx, pods, obs)
	policy.ChooseMemoryReclaimTargets(plan, cfg, a.opts.SelfUID, pods, obs.Pods, a.memState.asked, now)
	rep := &MemoryReclaimReport{Plan: plan, After: -1}
	if len(plan.Targets) == 0 {
		quiet := fmt.Sprintf("%s: %s", plan.Signal, skippedSummary(plan.Skipped))
		level := slog.LevelInfo
		if quiet == a.memState.lastQuiet {
			level = slog.LevelDebug
		}
		a.memState.lastQuiet = quiet
		a.log.Log(ctx, level, "memory reclaim: no pod to ask", "signal", plan.Signal, "available", fmtBytes(plan.Available),
			"threshold", fmtBytes(plan.Threshold), "trigger", fmtBytes(plan.Trigger), "skipped", skippedSummary(plan.Skipped))
		return rep
	}
	a.memState.lastQuiet = ""
	dry := cfg.DryRun
	for _, t := range plan.Targets {
		key := t.Pod.Namespace + "/" + t.Pod.Name
		if dry {
			rep.Results = append(rep.Results, eviction.ReclaimResult{})
			a.metrics.MemoryReclaimRequests.WithLabelValues("dry_run").Inc()
			a.log.Info("dry run: would reclaim pod memory", "pod", key, "ask", fmtBytes(t.Ask), "signal", plan.Signal, "why", t.Reason)
			continue
		}
		a.memState.asked[t.Pod.UID] = now
		r := a.memReclaimer.ReclaimPodMemory(ctx, t.Pod, t.Ask)
		rep.Results = append(rep.Results, r)
		if errors.Is(r.Err, ErrMemoryReclaimUnsupported) {
			a.memState.unsupported = true
			a.metrics.MemoryReclaimRequests.WithLabelValues("unsupported").Inc()
			a.log.Warn("memory reclaim off: the node cannot do it; pods are evicted without it", "err", r.Err)
			return rep
		}
		result := "ok"
		switch {
		case r.Err != nil:
			result = "error"
		case r.Freed < t.Ask:
			result = "partial"
		}
		a.metrics.MemoryReclaimRequests.WithLabelValues(result).Inc()
		if r.Freed > 0 {
			a.metrics.MemoryReclaimBytes.WithLabelValues(string(plan.Signal)).Add(float64(r.Freed))
		}
		if r.Err != nil {
			a.log.Warn("memory reclaim of a pod failed", "pod", key, "ask", fmtBytes(t.Ask), "err", r.Err)
			continue
		}
		a.log.Info("pod memory reclaimed before any eviction", "pod", key, "uid", t.Pod.UID, "signal", plan.Signal,
			"available", fmtBytes(plan.Available), "threshold", fmtBytes(plan.Threshold), "trigger", fmtBytes(plan.Trigger),
			"ask", fmtBytes(t.Ask), "freed", fmtBytes(r.Freed), "freedBytes", r.Freed, "why", t.Reason)
		a.recorder.Eventf(t.Pod, v1.EventTypeNormal, "MemoryReclaimed",
			"Reclaimed %s of the %s asked from this pod's page cache (memory.reclaim) instead of evicting: %s available %s, threshold %s + margin %s. %s",
			fmtBytes(max(r.Freed, 0)), fmtBytes(t.Ask), plan.Signal, fmtBytes(plan.Available), fmtBytes(plan.Threshold),
			fmtBytes(plan.Trigger-plan.Threshold), t.Reason)
	}
	if dry {
		return rep
	}
	*obs = a.stats.Observe(ctx, pods)
	if o, ok := obs.Observations[plan.Signal]; ok {
		rep.After = o.Available
	}
	if plan.EvictionDue && !policy.MemoryThresholdMet(cfg, obs.Observations, obs.Layout) {
		rep.EvictionAvoided = true
		a.metrics.MemoryReclaimEvictionsAvoided.WithLabelValues(string(plan.Signal)).Inc()
		a.log.Warn("memory reclaim: hard threshold no longer met, no eviction", "signal", plan.Signal,
			"before", fmtBytes(plan.Available), "after", fmtBytes(rep.After), "freed", fmtBytes(rep.Freed()))
	}
	return rep
}

// skippedSummary counts passed-over pods by reason.
func skippedSummary(skipped []policy.ExcludedPod) string {
	if len(skipped) == 0 {
		return "no pod holds page cache worth asking for"
	}
	return strings.TrimSuffix(excludedSummary(skipped), "; ")
}

func fmtBytes(n int64) string { return policy.FormatValue(policy.SignalMemoryAvailable, n) }
