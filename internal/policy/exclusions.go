package policy

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Annotations the kubelet uses to mark static and mirror pods.
const (
	configSourceAnnotation = "kubernetes.io/config.source"
	// MirrorAnnotation is the kubelet's kubetypes.ConfigMirrorAnnotationKey:
	// on a static pod's mirror, the UID the node runs the static pod under.
	MirrorAnnotation = "kubernetes.io/config.mirror"
)

// IsCriticalPod is the kubelet's rule: static pods, mirror pods and pods at
// or above system-critical priority are never evicted.
func IsCriticalPod(pod *v1.Pod) bool {
	if src, ok := pod.Annotations[configSourceAnnotation]; ok && src != "api" {
		return true
	}
	if _, ok := pod.Annotations[MirrorAnnotation]; ok {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= SystemCriticalPriority
}

// exclusionReason says why a pod may not be evicted, or "" if it may.
func exclusionReason(pod *v1.Pod, cfg *Config, self types.UID, now time.Time) string {
	switch {
	case pod.UID != "" && pod.UID == self:
		return "evictiond's own pod"
	case IsCriticalPod(pod):
		return "critical pod (static, mirror, or priority >= system-critical)"
	case pod.DeletionTimestamp != nil:
		return "already terminating"
	case pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed:
		return "not running (phase " + string(pod.Status.Phase) + ")"
	case cfg.Exclusions.Namespaces[pod.Namespace]:
		return "namespace " + pod.Namespace + " is excluded"
	case cfg.Exclusions.PodSelector != nil && cfg.Exclusions.PodSelector.Matches(labels.Set(pod.Labels)):
		return "labels match exclusions.podSelector"
	case cfg.Exclusions.DaemonSetPods && ownedByDaemonSet(pod):
		return "owned by a DaemonSet"
	case cfg.Exclusions.MinPodAge > 0 && !pod.CreationTimestamp.IsZero() && now.Sub(pod.CreationTimestamp.Time) < cfg.Exclusions.MinPodAge:
		return fmt.Sprintf("younger than exclusions.minPodAge (%v)", cfg.Exclusions.MinPodAge)
	}
	return ""
}

func ownedByDaemonSet(pod *v1.Pod) bool {
	for _, o := range pod.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			return true
		}
	}
	return false
}
