package policy

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// adoptTerminating runs on the engine's first assessment: pods of the node
// already terminating then (deletion requested less than
// loop.podCleanupTimeout ago) are taken as evictions still pending. An agent
// restarted after an eviction it requested (killed after the request, or
// while waiting for its victim) has lost that memory; without it the victim,
// excluded as "already terminating", would be passed over and a second pod
// evicted on stats that still count the first. A pod deleted by someone else
// frees its usage as well once it stops, so it is waited for the same way.
// Their signal is unknown: they block a new victim while they terminate
// (bounded by loop.podCleanupTimeout from the request) and are forgotten once
// gone; no expected reclaim is credited.
func (e *Engine) adoptTerminating(pods []*v1.Pod, now time.Time) {
	for _, p := range pods {
		if p.DeletionTimestamp == nil || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed || e.isPending(p.UID) {
			continue
		}
		// The API server sets deletionTimestamp to the request time plus
		// the grace period.
		requested := p.DeletionTimestamp.Time
		if g := p.DeletionGracePeriodSeconds; g != nil {
			requested = requested.Add(-time.Duration(*g) * time.Second)
		}
		if now.Sub(requested) >= e.cfg.PodCleanupTimeout {
			continue
		}
		e.pending = append(e.pending, &pendingEviction{uid: p.UID, key: podKey(p), evictedAt: requested})
	}
}
