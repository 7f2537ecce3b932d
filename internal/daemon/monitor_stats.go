package daemon

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/monitor"
	"github.com/evictiond/evictiond/internal/policy"
)

// MonitorStats is the agent's Stats, read by the monitor: node signals and
// the usage of the pods the agent is deciding about.
type MonitorStats struct{ M *monitor.Monitor }

var (
	_ agent.Stats      = MonitorStats{}
	_ agent.FastStats  = MonitorStats{}
	_ agent.PodCgroups = MonitorStats{}
)

// ObserveFast reads the memory and PID signals alone (the brake's second
// reading).
func (s MonitorStats) ObserveFast() policy.Observations { return s.M.ObserveFast().Observations }

// PodCgroupUIDs names the pods that have a cgroup under kubepods.
func (s MonitorStats) PodCgroupUIDs() ([]types.UID, error) {
	refs, err := s.M.DiscoverPods()
	if err != nil {
		return nil, err
	}
	uids := make([]types.UID, 0, len(refs))
	for _, r := range refs {
		uids = append(uids, r.UID)
	}
	return uids, nil
}

// Observe reads the node signals and the pods' cached disk usage.
func (s MonitorStats) Observe(ctx context.Context, pods []*v1.Pod) agent.Observed {
	refs := monitor.PodRefsFromPods(pods)
	s.M.SetPods(refs) // the disk refresher measures these pods
	snap := s.M.ObserveNode(ctx)
	s.M.ObservePodDisk(ctx, snap, refs)
	return agent.Observed{
		Observations: snap.Observations,
		Pods:         snap.Pods,
		Layout:       snap.Layout,
		Missing:      snap.Missing,
		Handle:       snap,
	}
}

// ObserveUsage adds fresh memory and process counts, for ranking.
func (s MonitorStats) ObserveUsage(ctx context.Context, pods []*v1.Pod, obs *agent.Observed) {
	snap, ok := obs.Handle.(*monitor.Snapshot)
	if !ok {
		return
	}
	s.M.ObservePods(ctx, snap, monitor.PodRefsFromPods(pods))
	obs.Pods = snap.Pods
}
