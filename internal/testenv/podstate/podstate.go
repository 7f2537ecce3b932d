// Package podstate reads a pod's state for the end-to-end tiers' assertions and failure
// messages (test/e2e on this machine's cluster, test/nodev2 on the cgroup v2 node).
package podstate

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Ready reports whether the pod runs and its Ready condition is true.
func Ready(pod *corev1.Pod) bool {
	if pod == nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Finished reports whether the pod failed or succeeded.
func Finished(pod *corev1.Pod) bool {
	return pod != nil && (pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded)
}

// Describe is a one-line account of a pod's status for failure messages and logs.
func Describe(pod *corev1.Pod) string {
	if pod == nil {
		return "(never seen)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s", pod.Status.Phase)
	if pod.Status.Reason != "" {
		fmt.Fprintf(&b, " reason=%s message=%q", pod.Status.Reason, pod.Status.Message)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		fmt.Fprintf(&b, " [%s restarts=%d", cs.Name, cs.RestartCount)
		switch {
		case cs.State.Running != nil:
			fmt.Fprintf(&b, " running since %s", cs.State.Running.StartedAt.Format(time.RFC3339))
		case cs.State.Terminated != nil:
			fmt.Fprintf(&b, " terminated reason=%s exit=%d", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
		case cs.State.Waiting != nil:
			fmt.Fprintf(&b, " waiting reason=%s %s", cs.State.Waiting.Reason, cs.State.Waiting.Message)
		}
		b.WriteString("]")
	}
	return b.String()
}

// Terminated returns the terminated state of the pod's named container, or nil.
func Terminated(pod *corev1.Pod, container string) *corev1.ContainerStateTerminated {
	if pod == nil {
		return nil
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container {
			return cs.State.Terminated
		}
	}
	return nil
}

// DescribeEvents is a short account of events for failure messages: source, reason,
// object, message.
func DescribeEvents(events []corev1.Event) string {
	var parts []string
	for _, e := range events {
		parts = append(parts, fmt.Sprintf("[%s %s %s/%s: %s]", e.Source.Component, e.Reason, e.InvolvedObject.Namespace, e.InvolvedObject.Name, e.Message))
	}
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, " ")
}
