// Package kube is evictiond's Kubernetes side: informers scoped to this node, pod
// eviction through the Eviction API with its PDB escalation ladder and rate limits, and
// the node status writer (pressure conditions, evictiond's taints, Events).
//
// The vocabulary:
//   - NodeInformers: Pod and Node caches holding only this node's objects; the loop's
//     agent.Pods.
//   - Evictor: the loop's agent.Evictor. Evicts at most one ranked Candidate per call
//     (Eviction API, UID precondition), walks the escalation ladder on PDB refusals,
//     applies the token bucket and the cool-down, and returns at once: the policy engine
//     waits for the victim to be gone and credits its expected reclaim meanwhile.
//   - LocalPodStopper: the CRI escape hatch used while the API server is unreachable.
//   - NodeStatus: the loop's agent.NodeStatus. Owns the condition entries and taints
//     evictiond writes, and writes only when they differ from what it wants.
//   - Reachability: whether the API server answered recently, from the requests the
//     agent makes anyway (for /readyz and the reporting of local stops).
//
// internal/daemon connects them to the loop; docs/architecture.md draws the map.
package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/policy"
)

// Candidate is one pod the policy ranked for eviction: the Evictor uses its Pod (UID
// precondition), Hard (escalation ladder), GracePeriodSeconds, Message and Annotations
// (the Evicted Event), Reason (logs) and ExpectedReclaim (credited until the pod is gone).
type Candidate = policy.Candidate

// LocalPodStopper stops a pod's sandbox on this node without the API server, through the
// CRI. The reclaim package's CRI client satisfies it. It must be idempotent: stopping a
// pod whose sandbox is already stopped or gone returns nil.
type LocalPodStopper interface {
	StopPodSandboxByPodUID(ctx context.Context, podUID types.UID) error
}

// Condition types evictiond publishes as its own (nodeStatus.conditions own or both), as
// node-problem-detector publishes custom conditions: nothing else writes them, so they
// never flap and the kubelet's MemoryPressure/DiskPressure/PIDPressure stay the kubelet's.
const (
	ConditionMemoryPressure corev1.NodeConditionType = "EvictiondMemoryPressure"
	ConditionDiskPressure   corev1.NodeConditionType = "EvictiondDiskPressure"
	ConditionPIDPressure    corev1.NodeConditionType = "EvictiondPIDPressure"
)

// Condition reasons evictiond writes. On the standard pressure conditions they mark an
// entry as evictiond's: entries with any other reason belong to someone else (the
// kubelet). evictiond's own condition types carry the same reasons.
const (
	ReasonMemoryPressure   = "EvictiondMemoryPressure"
	ReasonDiskPressure     = "EvictiondDiskPressure"
	ReasonPIDPressure      = "EvictiondPIDPressure"
	ReasonNoMemoryPressure = "EvictiondNoMemoryPressure"
	ReasonNoDiskPressure   = "EvictiondNoDiskPressure"
	ReasonNoPIDPressure    = "EvictiondNoPIDPressure"
)

// Taint keys evictiond owns; nothing else writes them.
const (
	TaintKeyPrefix         = "evictiond.io/"
	TaintKeyMemoryPressure = "evictiond.io/memory-pressure"
	TaintKeyDiskPressure   = "evictiond.io/disk-pressure"
	TaintKeyPIDPressure    = "evictiond.io/pid-pressure"
)

// EventComponent is the source component of every Event evictiond records.
const EventComponent = "evictiond"

// pressureKind ties one pressure condition type to evictiond's own condition type, its
// reasons, taint and messages.
type pressureKind struct {
	condition   corev1.NodeConditionType
	own         corev1.NodeConditionType
	trueReason  string
	falseReason string
	trueMessage string
	falseMsg    string
	taintKey    string
}

var pressureKinds = []pressureKind{
	{corev1.NodeMemoryPressure, ConditionMemoryPressure, ReasonMemoryPressure, ReasonNoMemoryPressure,
		"evictiond: node has insufficient memory available", "evictiond: node has sufficient memory available", TaintKeyMemoryPressure},
	{corev1.NodeDiskPressure, ConditionDiskPressure, ReasonDiskPressure, ReasonNoDiskPressure,
		"evictiond: node has disk pressure", "evictiond: node has no disk pressure", TaintKeyDiskPressure},
	{corev1.NodePIDPressure, ConditionPIDPressure, ReasonPIDPressure, ReasonNoPIDPressure,
		"evictiond: node has insufficient PID available", "evictiond: node has sufficient PID available", TaintKeyPIDPressure},
}
