package reclaim_test

import (
	"context"
	"log/slog"

	v1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/reclaim"
)

// How the daemon wires node-level reclaim: one Reclaimer for the agent's life, the layout
// handed to policy, the image tracker in the background, and the steps of policy's plan in
// order until the need is met.
func Example() {
	ctx := context.Background()
	r, err := reclaim.New(reclaim.Options{
		RuntimeEndpoint: "unix:///run/containerd/containerd.sock",
		HostRoot:        "/host",
	})
	if err != nil {
		slog.Error("reclaim options", "err", err)
		return
	}
	defer r.Close()

	// Keep last-used times current, in its own goroutine (a few milliseconds every 10s).
	go r.RunImageTracker(ctx, 0)

	// Under disk pressure, policy's plan for the starved signal, e.g. on a single filesystem:
	plan := policy.NodeReclaim{Signal: policy.SignalImageFsAvailable, Need: 2 << 30,
		Steps: []policy.ReclaimStep{policy.ReclaimContainerGC, policy.ReclaimPodLogs, policy.ReclaimImageGC}}
	var podsOnNode []*v1.Pod // from the informer; nil when it is not synced
	need := plan.Need
	for _, step := range plan.Steps {
		req := reclaim.Request{Step: step, Signal: plan.Signal, Need: need}
		if podsOnNode != nil {
			req.LivePods = reclaim.LivePodsFromPods(podsOnNode)
		}
		res, err := r.Run(ctx, req)
		if err != nil {
			slog.Warn("reclaim step failed", "step", step, "err", err)
			continue
		}
		slog.Info(res.EventMessage())
		if need -= res.Freed; need <= 0 {
			break
		}
	}
}
