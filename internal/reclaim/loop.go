package reclaim

import (
	"context"

	v1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
)

// Reclaim runs one node-level reclaim step for the loop (agent.Reclaimer): live is the
// node's pod set from the API server.
func (r *Reclaimer) Reclaim(ctx context.Context, step policy.ReclaimStep, signal policy.Signal, need int64, live []*v1.Pod) eviction.ReclaimResult {
	res, err := r.Run(ctx, Request{Step: step, Signal: signal, Need: need, LivePods: LivePodsFromPods(live)})
	return eviction.ReclaimResult{Freed: res.Freed, Items: res.ItemsRemoved + res.WouldRemove, Err: err}
}

// SetDryRun switches dry run on a configuration reload: "would remove" and nothing
// removed while on. The loop calls it between steps (OnConfig runs in its goroutine).
func (r *Reclaimer) SetDryRun(on bool) {
	r.dryRun.Store(on)
}
