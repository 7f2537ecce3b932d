package daemon

import (
	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/brake"
	"github.com/evictiond/evictiond/internal/kube"
	"github.com/evictiond/evictiond/internal/policy"
)

// Node is everything the loop needs from the node it decides on. The real
// node (internal/node: monitor, notify, nodefs, reclaim and brake) and the
// simulated one (internal/simulate: a scenario on a virtual clock) both
// implement it, so a simulation drives the same capabilities the daemon
// does: a capability one side lacks is a compile error, not a silent
// difference.
type Node interface {
	// Stats: every signal, the fast readings and their recent history, the
	// pods' usage and their cgroups under kubepods.
	agent.Stats
	// Freezer: the brake's freeze, thaw and kill of a pod's cgroup.
	agent.Freezer
	// OnBrakeExpired sets what runs when a hold reached brake.maxFreeze and
	// was thawed by the node.
	OnBrakeExpired(func(brake.Hold, error))
	// Reclaimer: node-level reclaim (container GC, pod logs, image GC).
	agent.Reclaimer
	// MemoryReclaimer: reclaim before evict (a pod cgroup's memory.reclaim).
	agent.MemoryReclaimer
	// LocalPodStopper: the evictor's stop through the CRI while the API
	// server is unreachable; a pod the brake holds is killed first.
	kube.LocalPodStopper
	// Wake is the kernel fast path's wake-ups of the loop; nil: the ticker only.
	Wake() <-chan struct{}
	// Reconfigure applies a reloaded configuration's node sections (dry run,
	// the fast path's thresholds); it runs in the loop goroutine.
	Reconfigure(*policy.Config)
}
