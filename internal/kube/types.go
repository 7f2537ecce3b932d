// Package kube is evictiond's Kubernetes side: informers scoped to this node, pod
// eviction through the Eviction API with its PDB escalation ladder and rate limits, and
// the node status writer (pressure conditions, evictiond's taints, Events).
//
// The vocabulary:
//   - NodeInformers: Pod and Node caches holding only this node's objects.
//   - Evictor: evicts one ranked Candidate per call (Eviction API, UID precondition),
//     walks the escalation ladder on PDB refusals, waits for the victim to be gone and
//     credits its expected reclaim (PendingReclaim) meanwhile.
//   - LocalPodStopper: the CRI escape hatch used while the API server is unreachable.
//   - NodeStatus: owns the pressure condition entries and taints evictiond writes, and
//     writes only when they differ from what it wants.
package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Candidate is one pod the policy ranked for eviction, with what the Evictor needs to
// evict it and to explain why. The daemon maps policy.Candidate onto it.
type Candidate struct {
	// Pod as seen by the informer; its UID becomes the eviction's precondition.
	Pod *corev1.Pod
	// Signal is the eviction signal that starved, e.g. "memory.available".
	Signal string
	// Hard is true when a hard threshold is met: grace 1 s and the escalation ladder.
	Hard bool
	// GracePeriodSeconds is the grace the policy computed (hard 1 s; soft
	// min(evictionMaxPodGracePeriod, terminationGracePeriodSeconds)).
	GracePeriodSeconds int64
	// Message is the kubelet-style eviction message for the pod's Event.
	Message string
	// Annotations go on the pod's Evicted Event (offending_containers, ...).
	Annotations map[string]string
	// Reason explains the ranking, for logs.
	Reason string
	// ExpectedReclaim is what the pod's eviction should free, in the signal's unit
	// (bytes, inodes or PIDs); credited until the pod is gone.
	ExpectedReclaim int64
}

// LocalPodStopper stops a pod's sandbox on this node without the API server, through the
// CRI. The reclaim package's CRI client satisfies it. It must be idempotent: stopping a
// pod whose sandbox is already stopped or gone returns nil.
type LocalPodStopper interface {
	StopPodSandboxByPodUID(ctx context.Context, podUID types.UID) error
}

// Condition reasons on the standard pressure conditions that mark an entry as
// evictiond's. Entries with any other reason belong to someone else (the kubelet).
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

// pressureKind ties one pressure condition type to its reasons, taint and messages.
type pressureKind struct {
	condition   corev1.NodeConditionType
	trueReason  string
	falseReason string
	trueMessage string
	falseMsg    string
	taintKey    string
}

var pressureKinds = []pressureKind{
	{corev1.NodeMemoryPressure, ReasonMemoryPressure, ReasonNoMemoryPressure,
		"evictiond: node has insufficient memory available", "evictiond: node has sufficient memory available", TaintKeyMemoryPressure},
	{corev1.NodeDiskPressure, ReasonDiskPressure, ReasonNoDiskPressure,
		"evictiond: node has disk pressure", "evictiond: node has no disk pressure", TaintKeyDiskPressure},
	{corev1.NodePIDPressure, ReasonPIDPressure, ReasonNoPIDPressure,
		"evictiond: node has insufficient PID available", "evictiond: node has sufficient PID available", TaintKeyPIDPressure},
}

// ownsCondition reports whether a condition entry was written by evictiond.
func ownsCondition(kind pressureKind, c *corev1.NodeCondition) bool {
	return c != nil && (c.Reason == kind.trueReason || c.Reason == kind.falseReason)
}
