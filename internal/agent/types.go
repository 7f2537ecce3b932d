package agent

import (
	"context"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
)

// The loop's vocabulary: what it reads (Stats, Pods), what it drives
// (Evictor, Reclaimer, NodeStatus, Recorder) and what they answer. The
// implementations live in their own packages and satisfy these interfaces
// directly (the node's Stats in internal/node, kube.NodeInformers,
// kube.Evictor, reclaim.Reclaimer, kube.NodeStatus, kube.Recorder);
// docs/architecture.md draws the map.

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

// Stats reads the node. Every capability the loop uses is a method here, so
// a node that cannot do one says so in its implementation, not by missing
// a type assertion.
type Stats interface {
	// Observe reads every node signal and the pods' disk usage (what the
	// local-storage limit checks need): cheap, every pass.
	Observe(ctx context.Context, pods []*v1.Pod) Observed
	// ObserveUsage adds the pods' fresh memory and process counts to obs (to
	// its Pods map, in place): only when pods must be ranked, since reading
	// every pod cgroup each pass is what an idle node should not pay.
	ObserveUsage(ctx context.Context, pods []*v1.Pod, obs *Observed)
	// ObserveFast reads, alone, the node signals the brake races on (memory
	// and PIDs): no filesystems, no CRI call, no pod cgroups; well under a
	// millisecond. The brake's second reading and its graceful watch use it.
	ObserveFast() policy.Observations
	// FastReadings returns the fast readings taken since the last call
	// between the loop's passes (the notifier's fast poll reads every
	// 5-100ms, faster near a threshold), oldest first, at most the few
	// newest. The brake needs a rate, two readings a few milliseconds apart;
	// with these, a crossing's first pass has one at once instead of reading
	// again brake.sampleInterval later.
	FastReadings() []policy.Observations
	// LookInFlight waits while an eviction request is in flight, until
	// interval has passed or done is closed (the answer came): ok is false
	// when the answer came first; otherwise it returns the fast readings
	// FastReadings would now, without taking them (the next pass takes them
	// as usual), and the brake decides again on them. How many looks a
	// request gets is the API server's latency: a recording keeps each look,
	// and its replay gets the same looks whatever its own requests take.
	LookInFlight(done <-chan struct{}, interval time.Duration) (readings []policy.Observations, ok bool)
	// PodCgroupUIDs names the pods running on the node by their cgroups
	// under kubepods: runtime UIDs, a static pod's being its mirror's
	// kubernetes.io/config.mirror annotation.
	PodCgroupUIDs() ([]types.UID, error)
}

// Pods lists the pods bound to this node.
type Pods interface {
	// ListPods reads the node's pods, from a cache where there is one.
	ListPods() ([]*v1.Pod, error)
	// ListPodsDirect asks the API server itself, rate-limited (a cache's
	// ListPods can be behind it). The loop does when a hard threshold is met,
	// no listed pod can be evicted, and the node runs pod cgroups the list
	// does not know.
	ListPodsDirect(ctx context.Context) ([]*v1.Pod, error)
}

// NodeStatus publishes the node conditions evictiond reports.
type NodeStatus interface {
	// SetConditions: the conditions to show, and the signals met now for each.
	SetConditions(conditions []v1.NodeConditionType, causes map[v1.NodeConditionType][]string)
}

// Evictor evicts at most one pod of a ranked candidate list; PDB escalation,
// the token bucket and the cool-down are its business. The loop evicts
// local-storage violators one call each, up to eviction.rateLimits.maxPerPass.
type Evictor interface {
	Evict(ctx context.Context, candidates []policy.Candidate) eviction.Result
	// ReportPending reports work queued for when the API server answers
	// again (pods stopped through the CRI while it was unreachable); the
	// loop gives it a turn at the start of every pass.
	ReportPending(ctx context.Context, log *slog.Logger)
}

// Reclaimer runs node-level reclaim steps. live is the node's pod set.
type Reclaimer interface {
	Reclaim(ctx context.Context, step policy.ReclaimStep, signal policy.Signal, need int64, live []*v1.Pod) eviction.ReclaimResult
}

// Recorder records the loop's Events: kube.EventRecorder (client-go's
// record.EventRecorder's methods, so tests use its FakeRecorder).
type Recorder interface {
	Event(object runtime.Object, eventtype, reason, message string)
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
	AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any)
}
