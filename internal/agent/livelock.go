package agent

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
)

// Livelock events.
const (
	EventReasonMemoryLivelock = "MemoryLivelock"
	EventReasonLivelockKilled = "LivelockKilled"
	EventReasonWouldKill      = "WouldKill"
)

// LivelockReport is what the livelock check found and did in one pass.
type LivelockReport struct {
	// Found are the pods livelocked at their memory limit now.
	Found []policy.Livelock
	// Restart is the restart requested this pass (livelock.restart).
	Restart *LivelockRestart
	// HeldBack says why no livelocked pod was restarted, when none was.
	HeldBack string
}

// LivelockRestart is one restart of a livelocked pod.
type LivelockRestart struct {
	Pod    string
	Action string
	// Outcome: the eviction's (evicted, pdb_blocked, dry_run, ...), or
	// killing, would_kill, kill_failed for the kill.
	Outcome string
	Err     string
}

// noteLivelocks finds the pods livelocked at their memory limit
// (policy.LivelockTracker), reports each once per episode (a Warning Event on
// the pod, a log line with the numbers, evictiond_pod_memory_livelock*), and
// with livelock.restart restarts at most one, rate-limited. It never touches
// the node's conditions and never evicts another pod.
func (a *Agent) noteLivelocks(ctx context.Context, pods []*v1.Pod, obs Observed) *LivelockReport {
	cfg := a.engine.Config()
	now := a.opts.Clock.Now()
	found := a.livelock.Assess(cfg.Livelock, now, pods, obs.Pods)
	a.metrics.PodMemoryLivelocked.Set(float64(len(found)))
	if len(found) == 0 {
		a.livelockHeldBack = ""
		return nil
	}
	for _, l := range found {
		if !l.New {
			continue
		}
		a.metrics.PodMemoryLivelocksTotal.Inc()
		p := l.Pressure
		a.log.Warn("pod livelocked at its memory limit", "pod", l.Pod.Namespace+"/"+l.Pod.Name, "uid", l.Pod.UID,
			"usage", p.Usage, "limit", p.Limit, "fullAvg10", float64(p.Full[0])/100, "fullAvg60", float64(p.Full[1])/100,
			"for", l.For.Round(time.Second).String(), "oomKills", p.OOMKills, "restart", restartSetting(cfg.Livelock), "why", l.Reason)
		a.recorder.Eventf(l.Pod, v1.EventTypeWarning, EventReasonMemoryLivelock,
			"Livelocked at its memory limit: %s. The kernel reclaims without OOM-killing it; the node is not short of memory and no other pod is evicted for it (livelock.restart: %s).",
			l.Reason, restartSetting(cfg.Livelock))
	}
	rep := &LivelockReport{Found: found}
	l, why := a.livelock.NextRestart(cfg, a.opts.SelfUID, now, found)
	if l == nil {
		rep.HeldBack = why
		if why != "" && why != a.livelockHeldBack {
			a.log.Info("livelocked pod not restarted", "why", why)
		}
		a.livelockHeldBack = why
		return rep
	}
	a.livelockHeldBack = ""
	if cfg.Livelock.Action == policy.LivelockKill {
		rep.Restart = a.killLivelocked(*l, cfg)
	} else {
		rep.Restart = a.evictLivelocked(ctx, *l, cfg)
	}
	return rep
}

func restartSetting(c policy.LivelockConfig) string {
	if !c.Restart {
		return "off, reported only"
	}
	return c.Action + ", at most one per " + c.MinInterval.String()
}

// evictLivelocked evicts the pod through the Eviction API as a soft
// eviction: its PodDisruptionBudget is respected and never escalated past.
func (a *Agent) evictLivelocked(ctx context.Context, l policy.Livelock, cfg *policy.Config) *LivelockRestart {
	c := policy.LivelockCandidate(cfg, l)
	res := a.evictor.Evict(ctx, []policy.Candidate{c})
	a.metrics.Evictions.WithLabelValues(string(c.Signal), string(res.Outcome)).Inc()
	a.metrics.PodMemoryLivelockRestarts.WithLabelValues(policy.LivelockEvict, string(res.Outcome)).Inc()
	out := &LivelockRestart{Pod: l.Pod.Namespace + "/" + l.Pod.Name, Action: policy.LivelockEvict, Outcome: string(res.Outcome)}
	if res.Err != nil {
		out.Err = res.Err.Error()
	}
	switch res.Outcome {
	case eviction.OutcomeEvicted, eviction.OutcomeDryRun, eviction.OutcomeGone:
		a.livelock.Restarted(l.Pod.UID, a.opts.Clock.Now(), true)
	case eviction.OutcomePDBBlocked:
		// Asked again after livelock.restart.minInterval.
		a.livelock.Restarted(l.Pod.UID, a.opts.Clock.Now(), false)
	}
	msg := "livelocked pod evicted"
	switch res.Outcome {
	case eviction.OutcomeDryRun:
		msg = "dry run: livelocked pod would be evicted"
		a.recorder.Eventf(l.Pod, v1.EventTypeWarning, "WouldEvict", "Dry run: would evict. %s", c.Message)
	case eviction.OutcomeEvicted:
	default:
		msg = "livelocked pod not evicted"
	}
	a.log.Warn(msg, "pod", out.Pod, "uid", l.Pod.UID, "action", out.Action, "outcome", res.Outcome,
		"gracePeriodSeconds", c.GracePeriodSeconds, "err", out.Err, "why", l.Reason)
	return out
}

// killLivelocked freezes the pod cgroup and kills its tasks through the
// brake (cgroup.kill on cgroup v2); the kill's wait runs beside the loop.
// The kubelet restarts the pod's sandbox and containers in place.
func (a *Agent) killLivelocked(l policy.Livelock, cfg *policy.Config) *LivelockRestart {
	key := l.Pod.Namespace + "/" + l.Pod.Name
	out := &LivelockRestart{Pod: key, Action: policy.LivelockKill}
	now := a.opts.Clock.Now()
	switch {
	case cfg.DryRun:
		out.Outcome = "would_kill"
		a.livelock.Restarted(l.Pod.UID, now, true)
		a.recorder.Eventf(l.Pod, v1.EventTypeWarning, EventReasonWouldKill, "Dry run: would kill the pod's tasks (livelock.restart.action kill): livelocked at its memory limit: %s", l.Reason)
		a.log.Warn("dry run: livelocked pod would be killed", "pod", key, "uid", l.Pod.UID, "why", l.Reason)
	case a.freezer == nil:
		out.Outcome, out.Err = "kill_failed", "no pod cgroups to kill on this node (no brake)"
	default:
		h, err := a.freezer.Freeze(l.Pod, cfg.Brake.MaxFreeze)
		if err != nil {
			out.Outcome, out.Err = "kill_failed", err.Error()
			break
		}
		out.Outcome = "killing"
		a.livelock.Restarted(l.Pod.UID, now, true)
		a.killOffLoop(killResult{hold: h, livelock: &l})
		a.log.Warn("livelocked pod frozen, killing", "pod", key, "uid", l.Pod.UID, "why", l.Reason)
		return out
	}
	a.metrics.PodMemoryLivelockRestarts.WithLabelValues(policy.LivelockKill, out.Outcome).Inc()
	if out.Err != "" {
		a.log.Error("livelocked pod not killed", "pod", key, "uid", l.Pod.UID, "err", out.Err)
	}
	return out
}

// recordLivelockKill logs, counts and reports a livelock restart's kill
// that ended (on the loop).
func (a *Agent) recordLivelockKill(r killResult) {
	l, key := r.livelock, r.hold.Pod
	if r.err != nil {
		a.metrics.PodMemoryLivelockRestarts.WithLabelValues(policy.LivelockKill, "kill_failed").Inc()
		a.log.Error("livelocked pod not killed", "pod", key, "uid", r.hold.UID, "err", r.err)
		return
	}
	a.metrics.PodMemoryLivelockRestarts.WithLabelValues(policy.LivelockKill, "killed").Inc()
	a.recorder.Eventf(l.Pod, v1.EventTypeWarning, EventReasonLivelockKilled,
		"Killed %d task(s) through the pod cgroup (livelock.restart.action kill), the kubelet restarts the pod in place: livelocked at its memory limit: %s", r.killed, l.Reason)
	a.log.Warn("livelocked pod killed", "pod", key, "uid", r.hold.UID, "tasks", r.killed, "why", l.Reason)
}
