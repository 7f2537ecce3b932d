package agent

import (
	"context"
	"log/slog"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
)

// The loop's vocabulary: what it reads (Stats, Pods), what it drives
// (Evictor, Reclaimer, NodeStatus) and what they answer. The implementations
// live in their own packages and satisfy these interfaces directly (monitor
// through daemon.MonitorStats, kube.NodeInformers, kube.Evictor,
// reclaim.Reclaimer, kube.NodeStatus); docs/architecture.md draws the map.

// Observed is one fresh reading of the node.
type Observed struct {
	Observations policy.Observations
	Pods         policy.PodStatsByUID
	Layout       policy.FilesystemLayout
	// Missing names signals that could not be read, and why.
	Missing map[policy.Signal]string
	// Handle is the Stats implementation's own state for ObserveUsage.
	Handle any
}

// Stats reads the node.
type Stats interface {
	// Observe reads every node signal and the pods' disk usage (what the
	// local-storage limit checks need): cheap, every pass.
	Observe(ctx context.Context, pods []*v1.Pod) Observed
	// ObserveUsage adds the pods' fresh memory and process counts to obs (to
	// its Pods map, in place): only when pods must be ranked, since reading
	// every pod cgroup each pass is what an idle node should not pay.
	ObserveUsage(ctx context.Context, pods []*v1.Pod, obs *Observed)
}

// FastStats is a Stats that also reads, alone, the node signals the brake
// races on (memory and PIDs): no filesystems, no CRI call, no pod cgroups;
// well under a millisecond. The brake's second reading uses it; without it
// the agent reads everything again with Observe.
type FastStats interface {
	ObserveFast() policy.Observations
}

// FastHistory is a Stats that keeps the fast readings taken between the
// loop's passes (the notifier's fast poll reads every 5-100ms, faster near a
// threshold). The brake needs a rate, two readings a few milliseconds apart;
// with these, a crossing's first pass has one at once instead of reading
// again brake.sampleInterval later.
type FastHistory interface {
	// FastReadings returns the fast readings taken since the last call,
	// oldest first (at most the few newest: the rate needs the last ones).
	FastReadings() []policy.Observations
}

// Pods lists the pods bound to this node.
type Pods interface {
	ListPods() ([]*v1.Pod, error)
}

// DirectPods is a Pods whose ListPods reads a cache (kube.NodeInformers): it
// can also ask the API server itself, rate-limited. The loop does when a hard
// threshold is met, no pod of the cache can be evicted, and the node runs pod
// cgroups the cache does not know (a cache behind the API server).
type DirectPods interface {
	ListPodsDirect(ctx context.Context) ([]*v1.Pod, error)
}

// PodCgroups is a Stats that can name the pods running on the node by their
// cgroups under kubepods (daemon.MonitorStats): runtime UIDs, a static pod's
// being its mirror's kubernetes.io/config.mirror annotation.
type PodCgroups interface {
	PodCgroupUIDs() ([]types.UID, error)
}

// NodeStatus publishes the node conditions evictiond reports.
type NodeStatus interface {
	SetConditions([]v1.NodeConditionType)
}

// Evictor evicts at most one pod of a ranked candidate list; PDB escalation,
// the token bucket and the cool-down are its business. The loop evicts
// local-storage violators one call each, up to eviction.rateLimits.maxPerPass.
type Evictor interface {
	Evict(ctx context.Context, candidates []policy.Candidate) eviction.Result
}

// PendingReporter is an Evictor with work queued for when the API server
// answers again (pods stopped through the CRI while it was unreachable); the
// loop gives it a turn at the start of every pass.
type PendingReporter interface {
	ReportPending(ctx context.Context, log *slog.Logger)
}

// Reclaimer runs node-level reclaim steps. live is the node's pod set.
type Reclaimer interface {
	Reclaim(ctx context.Context, step policy.ReclaimStep, signal policy.Signal, need int64, live []*v1.Pod) eviction.ReclaimResult
}
