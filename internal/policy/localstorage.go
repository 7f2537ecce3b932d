package policy

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Metric labels of local-storage evictions, as the kubelet's.
const (
	SignalEmptyDirLimit           Signal = "emptydirfs.limit"
	SignalPodEphemeralLimit       Signal = "ephemeralpodfs.limit"
	SignalContainerEphemeralLimit Signal = "ephemeralcontainerfs.limit"
)

// localStorageViolation checks one pod against its local storage limits in
// the kubelet's order (emptyDir sizeLimit, pod ephemeral-storage limit,
// container ephemeral-storage limit); the first violation wins. It returns
// the pseudo-signal, the message and the usage over the limit.
func localStorageViolation(pod *v1.Pod, st PodStats, layout FilesystemLayout) (Signal, string, int64, bool) {
	for _, vol := range pod.Spec.Volumes {
		ed := vol.EmptyDir
		if ed == nil || ed.SizeLimit == nil || ed.SizeLimit.Sign() != 1 {
			continue
		}
		vs, ok := st.Volumes[vol.Name]
		if !ok || vs.UsedBytes == nil {
			continue
		}
		if *vs.UsedBytes > ed.SizeLimit.Value() {
			return SignalEmptyDirLimit, fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q. ", vol.Name, ed.SizeLimit.String()), *vs.UsedBytes, true
		}
	}
	if limit, ok := podEphemeralStorageLimit(pod); ok {
		used, known := podEphemeralUsage(pod, st)
		if known && used > limit.Value() {
			return SignalPodEphemeralLimit, fmt.Sprintf("Pod ephemeral local storage usage exceeds the total limit of containers %s. ", limit.String()), used, true
		}
	}
	for _, c := range pod.Spec.Containers {
		limit, ok := c.Resources.Limits[v1.ResourceEphemeralStorage]
		if !ok || limit.IsZero() {
			continue // the kubelet reads a zero limit as no limit
		}
		cs, ok := st.Containers[c.Name]
		if !ok {
			continue
		}
		used := val(cs.LogsBytes)
		if !layout.DedicatedImageFs {
			// With a dedicated imagefs the writable layer is not counted (as in the kubelet).
			used += val(cs.RootfsBytes)
		}
		if used > limit.Value() {
			return SignalContainerEphemeralLimit, fmt.Sprintf("Container %s exceeded its local ephemeral storage limit %q. ", c.Name, limit.String()), used, true
		}
	}
	return "", "", 0, false
}

// podEphemeralStorageLimit is the pod's ephemeral-storage limit as
// resourcehelper.PodLimits computes it. Only containers can set one (it is
// not a pod-level resource), so pods without any skip PodLimits, which
// builds every resource list and runs for every pod on every pass.
func podEphemeralStorageLimit(pod *v1.Pod) (resource.Quantity, bool) {
	has := func(cs []v1.Container) bool {
		for i := range cs {
			if _, ok := cs[i].Resources.Limits[v1.ResourceEphemeralStorage]; ok {
				return true
			}
		}
		return false
	}
	if !has(pod.Spec.Containers) && !has(pod.Spec.InitContainers) {
		return resource.Quantity{}, false
	}
	limit, ok := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[v1.ResourceEphemeralStorage]
	return limit, ok
}

// podEphemeralUsage is the pod's total local ephemeral storage use: the
// reported total, or writable layers + logs + local ephemeral volumes.
func podEphemeralUsage(pod *v1.Pod, st PodStats) (int64, bool) {
	if st.EphemeralStorageBytes != nil {
		return *st.EphemeralStorageBytes, true
	}
	var total int64
	known := false
	for _, c := range st.Containers {
		if c.RootfsBytes != nil || c.LogsBytes != nil {
			known = true
		}
		total += val(c.RootfsBytes) + val(c.LogsBytes)
	}
	for _, v := range pod.Spec.Volumes {
		if isLocalEphemeralVolume(v) {
			if vs, ok := st.Volumes[v.Name]; ok && vs.UsedBytes != nil {
				known = true
				total += *vs.UsedBytes
			}
		}
	}
	return total, known
}
