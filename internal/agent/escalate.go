package agent

import (
	"context"
	"log/slog"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
)

// The loop's half of the escalation policy (policy/engine_escalate.go): it
// requests in-flight soft evictions again with the hard grace period, and
// brakes victims still on the node past their grace period plus
// loop.victimReleaseTimeout. Neither waits: a shortened grace is one API
// call, and the brake's kill runs beside the loop (victims.go).

// EventReasonVictimOverdue is the Event on a victim the brake takes because
// it kept its resource past its grace period plus loop.victimReleaseTimeout.
const EventReasonVictimOverdue = "EvictionOverdue"

// escalate requests each in-flight soft eviction again with the hard grace
// period; the engine then tracks it as a hard eviction.
func (a *Agent) escalate(ctx context.Context, cands []policy.Candidate, obs policy.Observations) []eviction.Result {
	out := make([]eviction.Result, 0, len(cands))
	for _, c := range cands {
		res := a.evictor.Evict(ctx, []policy.Candidate{c})
		result := "escalated"
		if res.Outcome != eviction.OutcomeEvicted {
			result = "escalation_failed"
		}
		a.metrics.Evictions.WithLabelValues(string(c.Signal), result).Inc()
		o := obs[c.Signal]
		a.log.Warn("soft eviction escalated: the hard threshold is met while it is in flight", "pod", podKeyOf(c.Pod), "uid", c.Pod.UID,
			"outcome", res.Outcome, "signal", c.Signal, "gracePeriodSeconds", c.GracePeriodSeconds,
			"available", policy.FormatValue(c.Signal, o.Available), "why", c.Reason, "err", res.Err)
		if res.Outcome == eviction.OutcomeEvicted && res.Victim != nil {
			a.engine.Evicted(*res.Victim)
		}
		out = append(out, res)
	}
	return out
}

// brakeOverdue brakes the victims of the starved signal's resource that are
// still on the node past their grace period plus loop.victimReleaseTimeout:
// frozen now, killed beside the loop. It returns the brake's report and
// true while such a kill is in flight: the pass then chooses no other victim, on
// readings that still count the overdue one (the next pass does, if the
// signal is still crossed). Without the brake (disabled, dry run, no pod
// cgroups) the overdue victim is only logged: it holds nothing back.
func (a *Agent) brakeOverdue(s *policy.ThresholdStatus, pods []*v1.Pod) (*BrakeReport, bool) {
	cfg := a.engine.Config()
	var br *BrakeReport
	killing := false
	for _, o := range a.engine.Overdue() {
		if o.Signal.Resource() != s.Threshold.Signal.Resource() || o.UID == a.opts.SelfUID {
			continue
		}
		if a.offLoop.killing[o.UID] {
			killing = true // its kill is not confirmed yet: the readings still count it
			continue
		}
		i := slices.IndexFunc(pods, func(p *v1.Pod) bool { return p.UID == o.UID })
		if i < 0 {
			continue
		}
		pod := pods[i]
		why := "still on the node " + (o.Grace + cfg.VictimReleaseTimeout + o.Overdue).Round(time.Millisecond).String() +
			" after its eviction (grace " + o.Grace.String() + " + loop.victimReleaseTimeout " + cfg.VictimReleaseTimeout.String() + ")"
		if !cfg.Brake.Enabled || cfg.DryRun || a.freezer == nil || !o.Signal.Brakeable() {
			a.heldBack(slog.LevelWarn, "overdue victim not braked (brake disabled, dry run or no pod cgroups): choosing the next victim",
				"pod", o.Key, "signal", o.Signal, "why", why)
			continue
		}
		d := policy.BrakeDecision{Signal: s.Threshold.Signal, Fire: true, Reason: "overdue victim: " + why}
		if br == nil {
			br = &BrakeReport{BrakeDecision: d}
		}
		h, ok := a.freezeVictim(pod, d, s.FirstObservedAt, br, "brake: overdue victim frozen: it kept its resource past its grace period",
			"brake: freeze of the overdue victim failed; choosing the next victim")
		if !ok {
			continue
		}
		a.recorder.Eventf(pod, v1.EventTypeWarning, EventReasonVictimOverdue, "Frozen, then killed through its cgroup: %s while %s is met", why, s.Threshold.Signal)
		res := eviction.Result{Outcome: eviction.OutcomeEvicted, Victim: &policy.Candidate{Pod: pod, Signal: o.Signal}}
		a.killHeld(res, h, d, s.FirstObservedAt, br)
	}
	return br, killing || br != nil && br.Frozen != ""
}

// releaseWake is Run's timer for the next victim release bound
// (policy.Engine.NextReleaseBy): a pass then brakes the victim if it is
// overdue, instead of the next tick up to loop.interval later.
type releaseWake struct {
	at    time.Time
	timer *time.Timer
	c     <-chan time.Time
}

// set arms the timer for next (zero: none) unless it is armed for it
// already, or armed for a bound now due: that one fires first (NextReleaseBy
// no longer returns a bound that has passed).
func (w *releaseWake) set(next, now time.Time) {
	if next.Equal(w.at) || w.c != nil && !w.at.After(now) {
		return
	}
	w.stop()
	w.at = next
	if !next.IsZero() {
		w.timer = time.NewTimer(max(next.Sub(now), 0))
		w.c = w.timer.C
	}
}

// fired forgets the bound the timer fired for.
func (w *releaseWake) fired() { w.at, w.timer, w.c = time.Time{}, nil, nil }

func (w *releaseWake) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
	w.timer, w.c = nil, nil
}
