package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// SystemCriticalPriority is the kubelet's critical-pod priority cut-off.
const SystemCriticalPriority = 2000000000

// podInfo is a pod with the values ranking needs, computed once per pass.
type podInfo struct {
	pod      *v1.Pod
	stats    PodStats
	hasStats bool
	priority int32
	memReq   int64
	diskReq  int64 // ephemeral-storage request
	memUsage int64
	swap     int64 // memory.swap.current, ranked by for swap.available
	procs    int64 // tasks (threads included) when measured, else processes
	tasks    bool
	disk     int64 // usage on the filesystems the signal ranks by
}

// fsUsage selects which usage a disk signal ranks by (the kubelet's
// fsStatsType lists per layout, buildSignalToRankFunc).
type fsUsage struct {
	root, logs, localVolumes bool
	inodes                   bool
}

func rankUsage(s Signal, layout FilesystemLayout) fsUsage {
	u := fsUsage{inodes: s.Resource() == ResourceInodes}
	fs := signalFilesystem(s, layout)
	switch {
	case !layout.DedicatedImageFs:
		u.root, u.logs, u.localVolumes = true, true, true
	case layout.SplitContainerFs:
		if fs == fsNode {
			u.root, u.logs, u.localVolumes = true, true, true
		} // imagefs ranks by images, which pods' stats do not hold
	default:
		if fs == fsNode {
			u.logs, u.localVolumes = true, true
		} else {
			u.root = true
		}
	}
	return u
}

// localVolumeNames lists the volumes the kubelet counts as local: hostPath
// and the local ephemeral ones.
func localVolumeNames(pod *v1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil || isLocalEphemeralVolume(v) {
			out = append(out, v.Name)
		}
	}
	return out
}

// isLocalEphemeralVolume is the kubelet's volumeutils.IsLocalEphemeralVolume:
// gitRepo, configMap and emptyDirs on the node's disk (the default medium;
// Memory and HugePages* emptyDirs use no disk).
func isLocalEphemeralVolume(v v1.Volume) bool {
	return v.GitRepo != nil || v.ConfigMap != nil ||
		v.EmptyDir != nil && v.EmptyDir.Medium == v1.StorageMediumDefault
}

func val(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// diskUsage sums a pod's usage over the selected filesystem stats.
func diskUsage(pod *v1.Pod, st PodStats, u fsUsage) int64 {
	var total int64
	for _, c := range st.Containers {
		if u.root {
			if u.inodes {
				total += val(c.RootfsInodes)
			} else {
				total += val(c.RootfsBytes)
			}
		}
		if u.logs {
			if u.inodes {
				total += val(c.LogsInodes)
			} else {
				total += val(c.LogsBytes)
			}
		}
	}
	if u.localVolumes {
		for _, name := range localVolumeNames(pod) {
			vs, ok := st.Volumes[name]
			if !ok {
				continue
			}
			if u.inodes {
				total += val(vs.InodesUsed)
			} else {
				total += val(vs.UsedBytes)
			}
		}
	}
	return total
}

// diskMeasured reports whether any of the usage a disk signal ranks by was
// measured for the pod (a new pod's disk usage waits for the next
// housekeeping; until then it has no stats, rather than "uses nothing").
func diskMeasured(pod *v1.Pod, st PodStats, u fsUsage) bool {
	for _, c := range st.Containers {
		if u.root && (c.RootfsBytes != nil || c.RootfsInodes != nil) || u.logs && (c.LogsBytes != nil || c.LogsInodes != nil) {
			return true
		}
	}
	if u.localVolumes {
		for _, name := range localVolumeNames(pod) {
			if vs, ok := st.Volumes[name]; ok && (vs.UsedBytes != nil || vs.InodesUsed != nil) {
				return true
			}
		}
	}
	return false
}

func podPriority(pod *v1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return 0
}

// podRequest is resourcehelper.PodRequests(pod, {})[name].Value() for one
// resource — containers, the sidecar-aware maximum with init containers,
// pod-level requests, overhead — without building resource lists: it runs
// for every pod on every pass, and PodRequests was most of a decision's time.
// TestPodRequest_MatchesComponentHelpers holds it to PodRequests.
func podRequest(pod *v1.Pod, name v1.ResourceName) int64 {
	var total resource.Quantity
	for i := range pod.Spec.Containers {
		if q, ok := pod.Spec.Containers[i].Resources.Requests[name]; ok {
			total.Add(q)
		}
	}
	// Init container i needs its own request plus the sidecars started before it.
	var sidecars, initMax resource.Quantity
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		q := c.Resources.Requests[name]
		var use resource.Quantity
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			total.Add(q)
			sidecars.Add(q)
			use = sidecars.DeepCopy()
		} else {
			use = q.DeepCopy()
			use.Add(sidecars)
		}
		if use.Cmp(initMax) > 0 {
			initMax = use
		}
	}
	if initMax.Cmp(total) > 0 {
		total = initMax
	}
	if resourcehelper.IsPodLevelRequestsSet(pod) && resourcehelper.IsSupportedPodLevelResource(name) {
		if q, ok := pod.Spec.Resources.Requests[name]; ok {
			total = q.DeepCopy()
		}
	}
	if q, ok := pod.Spec.Overhead[name]; ok {
		total.Add(q)
	}
	return total.Value()
}

func newPodInfo(pod *v1.Pod, stats PodStatsByUID, s Signal, layout FilesystemLayout) podInfo {
	pi := podInfo{pod: pod, priority: podPriority(pod)}
	switch s.Resource() {
	case ResourceMemory, ResourceSwap:
		pi.memReq = podRequest(pod, v1.ResourceMemory)
	case ResourceEphemeralStorage, ResourceInodes:
		pi.diskReq = podRequest(pod, v1.ResourceEphemeralStorage)
	}
	pi.stats, pi.hasStats = stats[pod.UID]
	// A pod whose usage for this resource was not measured (no cgroup yet,
	// an unreadable file) has no stats for ranking, as a pod missing from the
	// kubelet's summary: it ranks first, never as if it used nothing.
	switch {
	case !pi.hasStats:
	case s.Resource() == ResourceMemory:
		pi.hasStats = pi.stats.MemoryWorkingSet != nil
	case s.Resource() == ResourceSwap:
		pi.hasStats = pi.stats.MemoryWorkingSet != nil && pi.stats.MemorySwap != nil
	case s.Resource() == ResourcePIDs:
		pi.hasStats = pi.stats.Tasks != nil || pi.stats.Processes != nil
	case s.Resource() == ResourceEphemeralStorage || s.Resource() == ResourceInodes:
		pi.hasStats = diskMeasured(pod, pi.stats, rankUsage(s, layout))
	}
	if pi.hasStats {
		pi.memUsage = val(pi.stats.MemoryWorkingSet)
		pi.swap = val(pi.stats.MemorySwap)
		pi.procs = val(pi.stats.Processes)
		if pi.stats.Tasks != nil {
			pi.procs, pi.tasks = *pi.stats.Tasks, true
		}
		if s.Resource() == ResourceEphemeralStorage || s.Resource() == ResourceInodes {
			pi.disk = diskUsage(pod, pi.stats, rankUsage(s, layout))
		}
	}
	return pi
}

// cmpFunc compares two pods: negative puts a first.
type cmpFunc func(a, b *podInfo) int

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// withStats wraps a stats-based comparator: pods without stats rank first.
func withStats(f cmpFunc) cmpFunc {
	return func(a, b *podInfo) int {
		if !a.hasStats || !b.hasStats {
			return cmpBool(!a.hasStats, !b.hasStats)
		}
		return f(a, b)
	}
}

var (
	exceedMemoryRequests = withStats(func(a, b *podInfo) int { return cmpBool(a.memUsage > a.memReq, b.memUsage > b.memReq) })
	byPriority           = func(a, b *podInfo) int { return cmpInt(int64(a.priority), int64(b.priority)) }
	byMemory             = withStats(func(a, b *podInfo) int { return cmpInt(b.memUsage-b.memReq, a.memUsage-a.memReq) })
	byProcess            = withStats(func(a, b *podInfo) int { return cmpInt(b.procs, a.procs) })

	// For swap.available: a pod that holds no swap frees none (under LimitedSwap
	// BestEffort and Guaranteed pods never swap), then the memory keys with the
	// pod's swap counted in its usage — working set + swap against the memory
	// request, which is also what the kubelet sizes a container's swap limit by.
	holdsSwap              = withStats(func(a, b *podInfo) int { return cmpBool(a.swap > 0, b.swap > 0) })
	exceedMemSwapRequests  = withStats(func(a, b *podInfo) int { return cmpBool(a.memSwap() > a.memReq, b.memSwap() > b.memReq) })
	byMemSwapAboveRequests = withStats(func(a, b *podInfo) int { return cmpInt(b.memSwap()-b.memReq, a.memSwap()-a.memReq) })
)

// memSwap is the pod's memory footprint with its swap counted.
func (p *podInfo) memSwap() int64 { return p.memUsage + p.swap }

// exceedDiskRequests: for inodes the request is 0, so any usage exceeds.
func exceedDiskRequests(inodes bool) cmpFunc {
	req := func(p *podInfo) int64 {
		if inodes {
			return 0
		}
		return p.diskReq
	}
	return withStats(func(a, b *podInfo) int { return cmpBool(a.disk > req(a), b.disk > req(b)) })
}

// byDisk: larger usage - ephemeral-storage request first; the kubelet
// subtracts the ephemeral-storage request even for inodes, and so do we.
var byDisk = withStats(func(a, b *podInfo) int { return cmpInt(b.disk-b.diskReq, a.disk-a.diskReq) })

// rankFuncs are the kubelet's rank functions per signal.
func rankFuncs(s Signal) []cmpFunc {
	switch s.Resource() {
	case ResourceMemory:
		return []cmpFunc{exceedMemoryRequests, byPriority, byMemory}
	case ResourceSwap:
		return []cmpFunc{holdsSwap, exceedMemSwapRequests, byPriority, byMemSwapAboveRequests}
	case ResourcePIDs:
		return []cmpFunc{byPriority, byProcess}
	case ResourceInodes:
		return []cmpFunc{exceedDiskRequests(true), byPriority, byDisk}
	default:
		return []cmpFunc{exceedDiskRequests(false), byPriority, byDisk}
	}
}

// rankPods sorts pods for a signal with the kubelet's multi-key order; ties
// on every key fall back to namespace, then name, so the order is total and
// deterministic and an unstable O(n log n) sort suffices (a stable sort of
// these structs was most of a 10,000-pod decision).
func rankPods(pods []podInfo, s Signal) {
	fns := rankFuncs(s)
	order := make([]*podInfo, len(pods))
	for i := range pods {
		order[i] = &pods[i]
	}
	slices.SortFunc(order, func(a, b *podInfo) int {
		for _, f := range fns {
			if c := f(a, b); c != 0 {
				return c
			}
		}
		if c := strings.Compare(a.pod.Namespace, b.pod.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.pod.Name, b.pod.Name)
	})
	sorted := make([]podInfo, len(pods))
	for i, p := range order {
		sorted[i] = *p
	}
	copy(pods, sorted)
}

func podKey(p *v1.Pod) string { return p.Namespace + "/" + p.Name }

// rankReason explains a pod's place in the ranking with the keys that put it there.
func rankReason(p *podInfo, s Signal, rank, of int) string {
	head := fmt.Sprintf("ranked %d of %d for %s", rank, of, s)
	if !p.hasStats {
		return head + ": no usage stats (the kubelet ranks pods without stats first)"
	}
	switch s.Resource() {
	case ResourceMemory:
		exceeds := "within"
		if p.memUsage > p.memReq {
			exceeds = "exceeds"
		}
		return fmt.Sprintf("%s: %s its memory request (working set %s, request %s), priority %d, %s above request",
			head, exceeds, fmtBytes(p.memUsage), fmtBytes(p.memReq), p.priority, fmtBytes(p.memUsage-p.memReq))
	case ResourceSwap:
		exceeds := "within"
		if p.memSwap() > p.memReq {
			exceeds = "exceeds"
		}
		return fmt.Sprintf("%s: holds %s of swap; working set + swap %s %s its memory request %s, priority %d, %s above request",
			head, fmtBytes(p.swap), fmtBytes(p.memSwap()), exceeds, fmtBytes(p.memReq), p.priority, fmtBytes(p.memSwap()-p.memReq))
	case ResourcePIDs:
		unit := "processes"
		if p.tasks {
			unit = "tasks (threads included)"
		}
		return fmt.Sprintf("%s: priority %d, %d %s", head, p.priority, p.procs, unit)
	case ResourceInodes:
		return fmt.Sprintf("%s: uses %d inodes, priority %d", head, p.disk, p.priority)
	default:
		exceeds := "within"
		if p.disk > p.diskReq {
			exceeds = "exceeds"
		}
		return fmt.Sprintf("%s: %s its ephemeral-storage request (usage %s, request %s), priority %d, %s above request",
			head, exceeds, fmtBytes(p.disk), fmtBytes(p.diskReq), p.priority, fmtBytes(p.disk-p.diskReq))
	}
}

// fmtBytes formats bytes as the kubelet does (BinarySI quantity).
func fmtBytes(n int64) string {
	return resource.NewQuantity(n, resource.BinarySI).String()
}

// FormatValue renders an observation or threshold value in a signal's unit:
// bytes as BinarySI quantities, inodes and PIDs as counts, PSI as the stall
// percentage.
func FormatValue(s Signal, v int64) string {
	switch {
	case s.IsPSI():
		return fmt.Sprintf("%.2f%%", float64(PSIScale-v)/100)
	case s.Resource() == ResourceInodes || s.Resource() == ResourcePIDs:
		// Counts as plain integers: a DecimalSI quantity prints 4000 as "4k"
		// but 3500 as "3500", which reads as two different units side by side.
		return strconv.FormatInt(v, 10)
	}
	return fmtBytes(v)
}

// evictionMessage builds the kubelet-style message and Event annotations for
// evicting pod under threshold t.
func evictionMessage(p *podInfo, t Threshold, o Observation) (string, map[string]string) {
	res := t.Signal.Resource()
	var b strings.Builder
	if t.Signal.IsPSI() {
		fmt.Fprintf(&b, "The node was low on resource: %s. Pressure stall %s: %s, threshold: %s. ",
			res, t.Signal, FormatValue(t.Signal, o.Available), t.Raw)
	} else {
		fmt.Fprintf(&b, "The node was low on resource: %s. ", res)
		fmt.Fprintf(&b, "Threshold quantity: %s, available: %s. ", thresholdText(t, o.Capacity), FormatValue(t.Signal, o.Available))
	}
	var names, usages []string
	if res == ResourceSwap {
		fmt.Fprintf(&b, "Pod was using %s of swap and a working set of %s, memory request %s. ", fmtBytes(p.swap), fmtBytes(p.memUsage), fmtBytes(p.memReq))
	}
	if res == ResourceMemory || res == ResourceSwap || res == ResourceEphemeralStorage {
		reqName := v1.ResourceMemory
		if res == ResourceEphemeralStorage {
			reqName = v1.ResourceEphemeralStorage
		}
		all := append(append([]v1.Container(nil), p.pod.Spec.InitContainers...), p.pod.Spec.Containers...)
		for _, c := range all {
			cs, ok := p.stats.Containers[c.Name]
			if !ok {
				continue
			}
			var usage int64
			var known bool
			if res != ResourceEphemeralStorage {
				usage, known = val(cs.MemoryWorkingSet), cs.MemoryWorkingSet != nil
			} else {
				usage, known = val(cs.RootfsBytes)+val(cs.LogsBytes), cs.RootfsBytes != nil || cs.LogsBytes != nil
			}
			req := c.Resources.Requests[reqName]
			if known && usage > req.Value() {
				fmt.Fprintf(&b, "Container %s was using %s, request is %s, has larger consumption of %s. ", c.Name, fmtBytes(usage), req.String(), reqName)
				names = append(names, c.Name)
				usages = append(usages, fmtBytes(usage))
			}
		}
	}
	if res == ResourceEphemeralStorage {
		// The kubelet's message names only containers; a pod filling an
		// emptyDir would read as using next to nothing. Name its volumes too.
		var vols []string
		for _, name := range localVolumeNames(p.pod) {
			if vs, ok := p.stats.Volumes[name]; ok && vs.UsedBytes != nil && *vs.UsedBytes > 0 {
				vols = append(vols, fmt.Sprintf("%s %s", name, fmtBytes(*vs.UsedBytes)))
			}
		}
		if len(vols) > 0 {
			fmt.Fprintf(&b, "Pod local volumes were using %s. ", strings.Join(vols, ", "))
		}
	}
	ann := map[string]string{
		AnnotationOffendingContainers:      strings.Join(names, ","),
		AnnotationOffendingContainersUsage: strings.Join(usages, ","),
		AnnotationStarvedResource:          string(res),
	}
	return b.String(), ann
}

// thresholdText is the threshold as a quantity: the user's quantity, or a
// percentage resolved against capacity.
func thresholdText(t Threshold, capacity int64) string {
	if t.Value.IsQuantity() && t.Signal.Resource() != ResourceInodes && t.Signal.Resource() != ResourcePIDs {
		return t.Value.Quantity.String()
	}
	return FormatValue(t.Signal, t.quantity(capacity))
}
