package simulate

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/brake"
	"github.com/evictiond/evictiond/internal/daemon"
	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/kube/kubefake"
	"github.com/evictiond/evictiond/internal/policy"
)

// Node is a scenario's node as the daemon sees it (daemon.Node): the pods
// bound to it, the signals and pod usage of the current step, what
// node-level reclaim frees, which evictions the API server refuses, and the
// brake's holds on the virtual clock. It also lists the pods (agent.Pods);
// Clientset answers like an API server.
type Node struct {
	Name   string
	layout policy.FilesystemLayout
	now    func() time.Time

	mu          sync.Mutex
	pods        []*v1.Pod
	obs         policy.Observations
	stats       policy.PodStatsByUID
	reclaimable map[policy.ReclaimStep]int64
	refused     map[types.UID]bool
	// held are the pods the brake froze, each until its deadline on the
	// virtual clock; onExpire runs when Apply passes one.
	held     map[types.UID]brake.Hold
	onExpire func(brake.Hold, error)
}

// NewNode is the scenario's node at its start, reading the time from now.
func NewNode(sc *Scenario, now func() time.Time) *Node {
	n := &Node{Name: nodeName(sc), now: now, obs: policy.Observations{}, stats: policy.PodStatsByUID{}, held: map[types.UID]brake.Hold{},
		layout: policy.FilesystemLayout{DedicatedImageFs: sc.Node.DedicatedImageFs, SplitContainerFs: sc.Node.SplitContainerFs}}
	for i := range sc.Pods {
		n.pods = append(n.pods, n.bind(&sc.Pods[i]))
	}
	return n
}

func nodeName(sc *Scenario) string {
	if sc.Node.Name == "" {
		return "node"
	}
	return sc.Node.Name
}

// bind puts a scenario pod on this node (pods in a scenario are the node's).
func (n *Node) bind(p *v1.Pod) *v1.Pod {
	p = p.DeepCopy()
	if p.Spec.NodeName == "" {
		p.Spec.NodeName = n.Name
	}
	return p
}

// StepInput is one step's changes, parsed and validated.
type StepInput struct {
	Gone         map[types.UID]bool
	Added        []*v1.Pod
	Observations policy.Observations
	PodStats     policy.PodStatsByUID
	Reclaimable  map[policy.ReclaimStep]int64
	Refused      map[types.UID]bool
}

// Apply makes in the node's state, at the virtual clock's time: a hold past
// its deadline (brake.maxFreeze) is thawed first, as the node's timer would.
func (n *Node) Apply(in StepInput) {
	for _, h := range n.expireHolds() {
		if n.onExpire != nil {
			n.onExpire(h, nil)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	kept := n.pods[:0]
	for _, p := range n.pods {
		if in.Gone[p.UID] {
			delete(n.stats, p.UID)
			continue
		}
		kept = append(kept, p)
	}
	n.pods = kept
	for _, p := range in.Added {
		n.pods = append(n.pods, n.bind(p))
	}
	for s, o := range in.Observations {
		n.obs[s] = o
	}
	for uid, ps := range in.PodStats {
		n.stats[uid] = ps
	}
	n.reclaimable, n.refused = in.Reclaimable, in.Refused
}

// Pods are the pods bound to the node now.
func (n *Node) Pods() []*v1.Pod {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*v1.Pod(nil), n.pods...)
}

// ListPods is the loop's agent.Pods.
func (n *Node) ListPods() ([]*v1.Pod, error) { return n.Pods(), nil }

// ListPodsDirect is the API server's list: a scenario's pod list is never
// behind it.
func (n *Node) ListPodsDirect(context.Context) ([]*v1.Pod, error) { return n.Pods(), nil }

// Observe is the loop's agent.Stats: the current readings.
func (n *Node) Observe(ctx context.Context, pods []*v1.Pod) agent.Observed {
	n.mu.Lock()
	defer n.mu.Unlock()
	stats := make(policy.PodStatsByUID, len(n.stats))
	for uid, ps := range n.stats {
		stats[uid] = ps
	}
	return agent.Observed{Observations: copyObs(n.obs), Pods: stats, Layout: n.layout}
}

// ObserveUsage adds nothing: a scenario gives memory and processes with the
// rest of a pod's usage.
func (n *Node) ObserveUsage(ctx context.Context, pods []*v1.Pod, obs *agent.Observed) {}

// ObserveFast reads the current readings (a scenario's signals all change
// at its steps).
func (n *Node) ObserveFast() policy.Observations {
	n.mu.Lock()
	defer n.mu.Unlock()
	return copyObs(n.obs)
}

// FastReadings is empty: a scenario has no fast poll between its steps.
func (n *Node) FastReadings() []policy.Observations { return nil }

// LookInFlight waits for the answer: a scenario's eviction requests take no
// time on its clock, so the loop takes no look while one is in flight.
func (n *Node) LookInFlight(done <-chan struct{}, _ time.Duration) ([]policy.Observations, bool) {
	<-done
	return nil, false
}

// PodCgroupUIDs are the pods bound to the node: every one of them runs.
func (n *Node) PodCgroupUIDs() ([]types.UID, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	uids := make([]types.UID, 0, len(n.pods))
	for _, p := range n.pods {
		uids = append(uids, p.UID)
	}
	return uids, nil
}

// Freeze holds the pod until maxFreeze on the virtual clock; freezing a pod
// already held keeps the first hold, as brake.Brake does.
func (n *Node) Freeze(pod *v1.Pod, maxFreeze time.Duration) (brake.Hold, error) {
	key := pod.Namespace + "/" + pod.Name
	if pod.UID == "" {
		return brake.Hold{}, fmt.Errorf("freeze pod %q: UID is empty", key)
	}
	if maxFreeze <= 0 {
		return brake.Hold{}, fmt.Errorf("freeze pod %s: maxFreeze %v: must be positive", key, maxFreeze)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if h, ok := n.held[pod.UID]; ok {
		return h, nil
	}
	now := n.now()
	h := brake.Hold{UID: pod.UID, Pod: key, FrozenAt: now, Deadline: now.Add(maxFreeze)}
	n.held[pod.UID] = h
	return h, nil
}

// Thaw ends the pod's hold.
func (n *Node) Thaw(uid types.UID) (brake.Hold, bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, ok := n.held[uid]
	delete(n.held, uid)
	return h, ok, nil
}

// Kill ends the pod's hold; the pod's processes (its podStats) are what it
// kills. The pod stays bound until a step says it is gone, as on a node the
// kubelet reports it.
func (n *Node) Kill(uid types.UID, timeout time.Duration) (brake.Hold, int, bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, ok := n.held[uid]
	if !ok {
		return brake.Hold{}, 0, false, nil
	}
	delete(n.held, uid)
	killed := 0
	if p := n.stats[uid].Processes; p != nil {
		killed = int(*p)
	}
	return h, killed, true, nil
}

// Held lists the holds, oldest first.
func (n *Node) Held() []brake.Hold {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]brake.Hold, 0, len(n.held))
	for _, h := range n.held {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].FrozenAt.Equal(out[j].FrozenAt) {
			return out[i].FrozenAt.Before(out[j].FrozenAt)
		}
		return out[i].UID < out[j].UID
	})
	return out
}

// OnBrakeExpired sets what runs when a hold passes its deadline.
func (n *Node) OnBrakeExpired(fn func(brake.Hold, error)) { n.onExpire = fn }

// expireHolds ends the holds whose deadline the virtual clock passed.
func (n *Node) expireHolds() []brake.Hold {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	var out []brake.Hold
	for uid, h := range n.held {
		if !now.Before(h.Deadline) {
			out = append(out, h)
			delete(n.held, uid)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out
}

// Wake is nil: a scenario's passes are its steps.
func (n *Node) Wake() <-chan struct{} { return nil }

// Reconfigure: a scenario's configuration does not change.
func (n *Node) Reconfigure(*policy.Config) {}

// Reclaim frees what the step says the reclaim step frees: every signal of
// the same unit on the starved signal's filesystem gains it, read now.
func (n *Node) Reclaim(ctx context.Context, step policy.ReclaimStep, signal policy.Signal, need int64, live []*v1.Pod) eviction.ReclaimResult {
	n.mu.Lock()
	defer n.mu.Unlock()
	amount := n.reclaimable[step]
	now := n.now()
	for _, s := range policy.SameFilesystem(signal, n.layout) {
		if o, ok := n.obs[s]; ok {
			o.Available = min(o.Available+amount, o.Capacity)
			o.Time = now
			n.obs[s] = o
		}
	}
	return eviction.ReclaimResult{Freed: amount}
}

// StopPodSandboxByPodUID is the local stop (the API server unreachable): a
// held pod is killed first, as on a node. A simulated API server always
// answers, so the evictor does not call it.
func (n *Node) StopPodSandboxByPodUID(ctx context.Context, uid types.UID) error {
	_, _, _, err := n.Kill(uid, 0)
	return err
}

// Clientset is a fake API server for the daemon: it holds the
// scenario's pods, answers evictions with 201, or with the 429 of a
// PodDisruptionBudget for the pods the current step refuses, and accepts the
// escalation's deletes. Neither removes the pod: a scenario says when pods
// are gone (podsGone), as a kubelet would.
func (n *Node) Clientset() (*kubefake.Clientset, error) {
	objs := []runtime.Object{&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: types.UID(n.Name)}}}
	for _, p := range n.Pods() {
		objs = append(objs, p)
	}
	c, err := kubefake.NewClientset(objs...)
	if err != nil {
		return nil, err
	}
	c.OnCall("create", "pods", func(a kubefake.Action) (bool, runtime.Object, error) {
		ev, ok := a.Object.(*policyv1.Eviction)
		if !ok || a.Subresource != "eviction" {
			return false, nil, nil
		}
		if n.evictionRefused(ev) {
			return true, nil, pdbRefusal(ev.Name)
		}
		return true, ev, nil
	})
	c.OnCall("delete", "pods", func(kubefake.Action) (bool, runtime.Object, error) {
		return true, nil, nil
	})
	return c, nil
}

func (n *Node) evictionRefused(ev *policyv1.Eviction) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ev.DeleteOptions != nil && ev.DeleteOptions.Preconditions != nil && ev.DeleteOptions.Preconditions.UID != nil {
		return n.refused[*ev.DeleteOptions.Preconditions.UID]
	}
	for _, p := range n.pods {
		if p.Namespace == ev.Namespace && p.Name == ev.Name {
			return n.refused[p.UID]
		}
	}
	return false
}

// pdbRefusal is the API server's answer when a PodDisruptionBudget refuses.
func pdbRefusal(name string) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	err.ErrStatus.Details.Name = name
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes,
		metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget needs 1 healthy pods and has 1 currently"})
	return err
}

var _ daemon.Node = (*Node)(nil)
