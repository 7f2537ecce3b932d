package policy

import "time"

// EvictedAt is Evicted with the time the eviction was accepted, for callers
// (the daemon's evictor) that return only after waiting for the pod: the wait
// for it to be gone counts from the eviction, not from the return.
// An escalated candidate (Candidate.Escalated) updates its pending eviction
// instead: hard from now on, its release bound counted from now.
func (e *Engine) EvictedAt(c Candidate, at time.Time) {
	grace := time.Duration(c.GracePeriodSeconds) * time.Second
	if c.Escalated {
		for _, p := range e.pending {
			if p.uid == c.Pod.UID && p.goneAt.IsZero() {
				p.hard, p.evictedAt, p.grace = true, at, grace
				p.releaseBy = at.Add(grace + e.cfg.VictimReleaseTimeout)
				p.expected = max(p.expected, c.ExpectedReclaim)
				return
			}
		}
	}
	e.pending = append(e.pending, &pendingEviction{uid: c.Pod.UID, key: podKey(c.Pod), signal: c.Signal,
		expected: c.ExpectedReclaim, evictedAt: at, braked: c.Braked, hard: c.Hard && !c.LocalStorage,
		grace: grace, releaseBy: at.Add(grace + e.cfg.VictimReleaseTimeout)})
}
