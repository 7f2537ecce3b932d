package main

import (
	"context"

	v1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/monitor"
)

// monitorStats is the agent's Stats, read by the monitor: node signals and
// the usage of the pods the agent is deciding about.
type monitorStats struct{ m *monitor.Monitor }

var _ agent.Stats = monitorStats{}

func (s monitorStats) Observe(ctx context.Context, pods []*v1.Pod) agent.Observed {
	snap := s.m.Observe(ctx, monitor.PodRefsFromPods(pods))
	return agent.Observed{
		Observations: snap.Observations,
		Pods:         snap.Pods,
		Layout:       snap.Layout,
		Missing:      snap.Missing,
	}
}
