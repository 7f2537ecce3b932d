package node

import (
	"context"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/monitor"
	"github.com/evictiond/evictiond/internal/policy"
)

// Stats is the loop's agent.Stats, read by the monitor: node signals, the
// fast readings and their recent history, the pods' usage and cgroups.
type Stats struct {
	M *monitor.Monitor
	// Recent, when set, keeps the newest fast readings (the fast poll's,
	// which reads through ObserveFast) for the brake's rate estimate.
	Recent *RecentReadings
}

var _ agent.Stats = Stats{}

// ObserveFast reads the memory signals, pid.available and nodefs alone (the
// fast poll's reading, the brake's second reading), and keeps it in Recent.
func (s Stats) ObserveFast() policy.Observations {
	obs := s.M.ObserveFast().Observations
	s.Recent.add(obs)
	return obs
}

// FastReadings returns the fast readings taken since the last call, oldest
// first.
func (s Stats) FastReadings() []policy.Observations { return s.Recent.drain() }

// LookInFlight waits interval, or until done, and returns the fast readings
// FastReadings would, leaving them.
func (s Stats) LookInFlight(done <-chan struct{}, interval time.Duration) ([]policy.Observations, bool) {
	t := time.NewTimer(interval)
	defer t.Stop()
	select {
	case <-done:
		return nil, false
	case <-t.C:
		return s.Recent.peek(), true
	}
}

// RecentReadings keeps the newest fast readings until the loop takes them:
// written by the fast poll's goroutine, read by the loop's.
type RecentReadings struct {
	mu   sync.Mutex
	keep int
	obs  []policy.Observations
}

// NewRecentReadings keeps the newest n readings (the brake's rate looks at
// the last few: 16 per signal at most).
func NewRecentReadings(n int) *RecentReadings { return &RecentReadings{keep: max(n, 1)} }

func (r *RecentReadings) add(obs policy.Observations) {
	if r == nil || len(obs) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.obs) == r.keep {
		r.obs = append(r.obs[:0], r.obs[1:]...)
	}
	r.obs = append(r.obs, obs)
}

func (r *RecentReadings) peek() []policy.Observations {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.obs)
}

func (r *RecentReadings) drain() []policy.Observations {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.obs
	r.obs = make([]policy.Observations, 0, r.keep)
	return out
}

// PodCgroupUIDs names the pods that have a cgroup under kubepods.
func (s Stats) PodCgroupUIDs() ([]types.UID, error) {
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
func (s Stats) Observe(ctx context.Context, pods []*v1.Pod) agent.Observed {
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
func (s Stats) ObserveUsage(ctx context.Context, pods []*v1.Pod, obs *agent.Observed) {
	snap, ok := obs.Handle.(*monitor.Snapshot)
	if !ok {
		return
	}
	s.M.ObservePods(ctx, snap, monitor.PodRefsFromPods(pods))
	obs.Pods = snap.Pods
}
