package policy

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Escalation: no victim holds the node hostage (docs/operations.md,
// "Slow victims"). The kubelet blocks its loop on a soft eviction for up to
// 1.5x the victim's grace period, so a hard crossing meanwhile waits
// (kubernetes#123872). Here:
//   - a hard threshold met while soft evictions of the same resource are in
//     flight requests them again with the hard grace period (the API server
//     shortens a terminating pod's grace; the kubelet v1.35 measured on the
//     e2e cluster does not stop the container sooner, so the bound below is
//     what frees it); their usage is credited, so another pod goes in the
//     same pass only when it does not cover the need;
//   - a victim of a memory or PID signal still on the node
//     loop.victimReleaseTimeout after its grace period ended is overdue: it
//     holds back no other victim, and the agent brakes it (freeze, then kill
//     through its cgroup) while a threshold of its resource is met.
// Disk victims are exempt from the bound: their space comes back when the
// kubelet removes the pod, which a kill does not hasten.

// escalates reports whether the pending eviction p is requested again with
// the hard grace period because the hard threshold t is met.
func escalates(t Threshold, p *pendingEviction) bool {
	return t.Hard() && !p.hard && p.signal != "" && !holdsDisk(p.signal) && sameReclaim(p.signal, t.Signal) && p.goneAt.IsZero()
}

// releaseBounded: a victim of s frees its resource when its containers exit,
// so holding it past its grace period means it is stuck.
func releaseBounded(s Signal) bool { return s != "" && !holdsDisk(s) }

// overdue reports whether p's victim, still on the node, is past its grace
// period plus loop.victimReleaseTimeout.
func (e *Engine) overdue(p *pendingEviction, now time.Time) bool {
	return p.goneAt.IsZero() && releaseBounded(p.signal) && !now.Before(p.releaseBy)
}

// escalations are the soft evictions in flight that the starved hard
// threshold requests again with its grace period, as candidates.
func (e *Engine) escalations(a *Assessment, obs Observations) []Candidate {
	t := a.Starved.Threshold
	if !t.Hard() {
		return nil
	}
	var out []Candidate
	for _, p := range e.pending {
		if !escalates(t, p) {
			continue
		}
		var pod *v1.Pod
		for _, q := range a.input.Pods {
			if q.UID == p.uid {
				pod = q
				break
			}
		}
		if pod == nil {
			continue
		}
		info := newPodInfo(pod, a.input.Stats, t.Signal, a.input.Layout)
		msg, ann := evictionMessage(&info, t, obs[t.Signal])
		out = append(out, Candidate{Pod: pod, Signal: t.Signal, Hard: true, Escalated: true,
			GracePeriodSeconds: e.gracePeriod(t, pod), Message: msg, Annotations: ann,
			Reason: fmt.Sprintf("escalated: its soft eviction for %s (grace %v, requested %v ago) is still in flight and the hard threshold %s<%s is met; requested again with the hard grace period",
				p.signal, p.grace, a.Now.Sub(p.evictedAt).Round(time.Millisecond), t.Signal, t.Raw),
			ExpectedReclaim: max(p.expected, expectedReclaim(&info, t.Signal))})
	}
	return out
}

// OverdueVictim is a victim still on the node past its grace period plus
// loop.victimReleaseTimeout.
type OverdueVictim struct {
	UID    types.UID
	Key    string
	Signal Signal
	// Grace is the grace period requested; Overdue how long past its bound.
	Grace   time.Duration
	Overdue time.Duration
}

// Overdue lists the victims of memory and PID signals not gone
// loop.victimReleaseTimeout after their grace period, not braked yet.
func (e *Engine) Overdue() []OverdueVictim {
	now := e.clock.Now()
	var out []OverdueVictim
	for _, p := range e.pending {
		if !p.braked && e.overdue(p, now) {
			out = append(out, OverdueVictim{UID: p.uid, Key: p.key, Signal: p.signal, Grace: p.grace, Overdue: now.Sub(p.releaseBy)})
		}
	}
	return out
}

// NextReleaseBy is the earliest release bound still ahead of now among the
// victims on the node (zero: none): the loop wakes then, so an overdue
// victim is braked at its bound, not at the next tick after it.
func (e *Engine) NextReleaseBy() time.Time {
	now := e.clock.Now()
	var next time.Time
	for _, p := range e.pending {
		if p.braked || !p.goneAt.IsZero() || !releaseBounded(p.signal) || !p.releaseBy.After(now) {
			continue
		}
		if next.IsZero() || p.releaseBy.Before(next) {
			next = p.releaseBy
		}
	}
	return next
}
