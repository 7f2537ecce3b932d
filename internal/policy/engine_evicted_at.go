package policy

import "time"

// EvictedAt is Evicted with the time the eviction was accepted, for callers
// (the daemon's evictor) that return only after waiting for the pod: the wait
// for it to be gone counts from the eviction, not from the return.
func (e *Engine) EvictedAt(c Candidate, at time.Time) {
	e.pending = append(e.pending, &pendingEviction{uid: c.Pod.UID, key: podKey(c.Pod), signal: c.Signal,
		expected: c.ExpectedReclaim, evictedAt: at, braked: c.Braked, hard: c.Hard && !c.LocalStorage})
}
