package simulate

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
)

// Node is a scenario's node as the daemon sees it: the pods bound to it, the
// signals and pod usage of the current step, what node-level reclaim frees,
// and which evictions the API server refuses. It implements the loop's Stats
// and Pods and the daemon's Reclaimer; Clientset answers like an API server.
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
}

// NewNode is the scenario's node at its start, reading the time from now.
func NewNode(sc *Scenario, now func() time.Time) *Node {
	n := &Node{Name: nodeName(sc), now: now, obs: policy.Observations{}, stats: policy.PodStatsByUID{},
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

// Apply makes in the node's state.
func (n *Node) Apply(in StepInput) {
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

// Reclaim frees what the step says the reclaim step frees: every signal of
// the same unit on the starved signal's filesystem gains it, read now.
func (n *Node) Reclaim(ctx context.Context, step policy.ReclaimStep, signal policy.Signal, need int64, live []*v1.Pod) eviction.ReclaimResult {
	n.mu.Lock()
	defer n.mu.Unlock()
	amount := n.reclaimable[step]
	now := n.now()
	for _, s := range sameFilesystem(signal, n.layout) {
		if o, ok := n.obs[s]; ok {
			o.Available = min(o.Available+amount, o.Capacity)
			o.Time = now
			n.obs[s] = o
		}
	}
	return eviction.ReclaimResult{Freed: amount}
}

// StopPodSandboxByPodUID is the local stop (the API server unreachable): a
// simulated API server always answers, so it is never called.
func (n *Node) StopPodSandboxByPodUID(ctx context.Context, uid types.UID) error { return nil }

// SetDryRun: a simulated reclaim removes nothing either way.
func (n *Node) SetDryRun(bool) {}

// Clientset is a client-go fake API server for the daemon: it holds the
// scenario's pods, answers evictions with 201, or with the 429 of a
// PodDisruptionBudget for the pods the current step refuses, and accepts the
// escalation's deletes. Neither removes the pod: a scenario says when pods
// are gone (podsGone), as a kubelet would.
func (n *Node) Clientset() *fake.Clientset {
	objs := []runtime.Object{&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: types.UID(n.Name)}}}
	for _, p := range n.Pods() {
		objs = append(objs, p)
	}
	c := fake.NewClientset(objs...)
	c.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		create, ok := action.(k8stesting.CreateAction)
		if !ok || action.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev, ok := create.GetObject().(*policyv1.Eviction)
		if !ok {
			return false, nil, nil
		}
		if n.evictionRefused(ev) {
			return true, nil, pdbRefusal(ev.Name)
		}
		return true, ev, nil
	})
	c.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, nil
	})
	return c
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
